//! The memory scope of a run, decided from the chat and the people in it (see
//! [`crate::workspace::memory`]); the model has no say in it. The turn, its sub-agents and
//! the memory flush after it all ask here, so they agree.

use switchboard_channels::contract::{InboundKind, InboundMessage};

use super::access::People;
use crate::agent::Agent;
use crate::config::{Identity, Level};
use crate::store::{Store, StoreError};
use crate::workspace::memory::{Acting, MemoryScope, ScopeFacts};

/// The scope of a run of `agent` answering `msg`. `known_level` is the level of the person
/// the message acts for when the caller has it already (a turn, after `access::admit`); else
/// it is looked up. Store errors are the caller's: a scope that cannot be decided is never
/// guessed.
pub(super) async fn scope(
    people: &People<'_>,
    agent: &Agent,
    msg: &InboundMessage,
    known_level: Option<Level>,
) -> Result<MemoryScope, StoreError> {
    let mut facts = ScopeFacts {
        channel: &msg.channel,
        chat_id: &msg.chat_id,
        is_group: msg.is_group,
        from_person: msg.kind == InboundKind::User,
        acting: None,
        owner_chat: false,
    };
    // A group's scope is the group, whoever writes: nothing to look up.
    if msg.is_group {
        return Ok(MemoryScope::decide(&facts));
    }
    let identity = match msg.kind {
        InboundKind::User => Some(Identity::new(&msg.channel, &msg.sender.id)),
        // An invalid name acts as a guest (see `access::admit`): nobody's owner memory.
        InboundKind::System => {
            msg.on_behalf_of().map(|text| text.parse().unwrap_or_else(|_| Identity::new("invalid", text)))
        }
    };
    let level = match (&identity, known_level) {
        (Some(_), Some(level)) => Some(level),
        (Some(identity), None) => Some(people.level_of(identity, &msg.sender.name).await?),
        (None, _) => None,
    };
    facts.acting = identity.as_ref().zip(level).map(|(identity, level)| Acting {
        channel: &identity.channel,
        id: &identity.sender_id,
        is_owner: level == Level::Owner,
    });
    if msg.kind == InboundKind::System && facts.acting.is_none_or(|acting| acting.is_owner) {
        facts.owner_chat = is_owner_chat(people.store, agent, msg).await?;
    }
    Ok(MemoryScope::decide(&facts))
}

/// Whether `msg`'s chat is a direct chat an owner wrote to `agent` in.
async fn is_owner_chat(store: &dyn Store, agent: &Agent, msg: &InboundMessage) -> Result<bool, StoreError> {
    let chats = store.owner_chats(&agent.settings().name).await?;
    Ok(chats.iter().any(|owner| owner.chat.channel == msg.channel && owner.chat.chat_id == msg.chat_id))
}
