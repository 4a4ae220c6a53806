//! Where a Discord message goes (a channel or thread, and the message the first part
//! references), and what every message Discord is sent carries: its nonce and the mentions
//! it may ping.
//!
//! Mentions: model text may ping users it names explicitly (`<@id>`, e.g. a reminder for its
//! owner), never `@everyone`/`@here` or roles, and a reply never pings the author of the
//! message it references.

use serenity::all::{
    ChannelId, CreateAllowedMentions, CreateMessage, MessageId, MessageReference, MessageReferenceKind,
};

use super::directory::Directory;
use crate::contract::OutboundMessage;

/// Where a message goes: a channel (or thread), and the message the first part references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub channel: ChannelId,
    pub reply_to: Option<MessageId>,
    /// The slash command a reply answers, while its interaction is open: the reply goes
    /// through it rather than into the channel.
    pub interaction: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum AddressError {
    #[error("channel id {0:?} is not a Discord channel id")]
    Channel(String),
    #[error("user id {0:?} is not a Discord user id")]
    Person(String),
}

impl Target {
    /// The thread if there is one, else the chat. The reply is referenced only in guild
    /// channels: in a DM it is obvious what a message answers.
    pub(crate) fn of(msg: &OutboundMessage, directory: &Directory) -> Result<Target, AddressError> {
        let channel_id = msg.thread_id.as_deref().unwrap_or(&msg.chat_id);
        let channel = parse_id(channel_id).ok_or_else(|| AddressError::Channel(channel_id.to_owned()))?;
        let reply_to = msg.reply_to.as_deref().and_then(parse_id).filter(|_| !directory.is_direct(channel));
        Ok(Target { channel: ChannelId::new(channel), reply_to: reply_to.map(MessageId::new), interaction: None })
    }

    /// The message to create for a part; only the first references the reply's trigger.
    pub(crate) fn message(&self, text: &str, first: bool) -> CreateMessage {
        let mut message = CreateMessage::new().content(text).allowed_mentions(allowed_mentions());
        if let Some(reply_to) = self.reply_to.filter(|_| first) {
            // Send even if the trigger was deleted meanwhile, as a plain message.
            let reference = MessageReference::new(MessageReferenceKind::Default, self.channel)
                .message_id(reply_to)
                .fail_if_not_exists(false);
            message = message.reference_message(reference);
        }
        message
    }
}

/// The nonce of part `part` of the message known as `key` (an outbound or inbound message id):
/// the same for every attempt and redelivery, so that Discord, told to `enforce_nonce`, posts
/// it once. Discord takes at most 25 characters; the key has 16.
pub(crate) fn nonce(key: &str, part: usize) -> String {
    crate::delivery::idempotency_key(key, part)
}

/// A snowflake (a non-zero u64).
pub(crate) fn parse_id(text: &str) -> Option<u64> {
    text.parse::<u64>().ok().filter(|id| *id != 0)
}

/// Users named in the text may be pinged; `@everyone`, `@here`, roles and the replied-to
/// author are not.
pub(crate) fn allowed_mentions() -> CreateAllowedMentions {
    CreateAllowedMentions::new().all_users(true).replied_user(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discord::directory::ChannelKind;

    #[test]
    fn nonces_fit_discord() {
        assert!(nonce("run-1:reply", 0).len() <= 25, "Discord takes at most 25 characters");
    }

    fn reply(chat: &str, thread: Option<&str>) -> OutboundMessage {
        OutboundMessage {
            id: "o1".into(),
            chat_id: chat.into(),
            thread_id: thread.map(str::to_owned),
            reply_to: Some("42".into()),
            ..OutboundMessage::default()
        }
    }

    #[test]
    fn targets_are_threads_or_chats_and_reference_only_in_guilds() {
        let directory = Directory::default();
        directory.insert(7, ChannelKind::Direct);
        let guild = Target::of(&reply("200", None), &directory).unwrap();
        let expected = Target { channel: ChannelId::new(200), reply_to: Some(MessageId::new(42)), interaction: None };
        assert_eq!(guild, expected);
        let thread = Target::of(&reply("200", Some("201")), &directory).unwrap();
        assert_eq!(thread.channel, ChannelId::new(201));
        assert_eq!(Target::of(&reply("7", None), &directory).unwrap().reply_to, None);
        assert!(Target::of(&reply("general", None), &directory).is_err());
    }
}
