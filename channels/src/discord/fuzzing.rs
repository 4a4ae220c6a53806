//! Fuzzing entry point (feature `fuzzing`): a MESSAGE_CREATE payload mapped to the bus message
//! the way the ingress maps it, minus what needs the network (downloads, channel and role
//! lookups, which the caller answers instead). Not part of the API.

use serenity::all::Message;

use super::gate::Place;
use super::inbound::classify;
use super::ingress::inbound_message;
use crate::contract::InboundMessage;

/// What became of one message.
#[derive(Debug)]
pub enum Mapped {
    /// Not the JSON of a message, as serenity reads it.
    NotAMessage(serde_json::Error),
    /// The bot's own message, or one without text and attachments.
    Skipped,
    /// The message for the bus, with how many attachments it carried.
    Inbound { message: Box<InboundMessage>, attachments: usize },
}

/// Maps one message for the bot `bot_id`. `thread_parent`: the lookup's answer that the
/// message's channel is a thread of this parent channel (guild messages only).
pub fn map_message(json: &[u8], bot_id: u64, thread_parent: Option<u64>) -> Mapped {
    let message: Message = match serde_json::from_slice(json) {
        Ok(message) => message,
        Err(err) => return Mapped::NotAMessage(err),
    };
    let Ok(msg) = classify(&message, bot_id) else { return Mapped::Skipped };
    let place = match (msg.guild_id, thread_parent) {
        (None, _) => Place::Direct { channel_id: msg.channel_id },
        (Some(guild_id), None) => Place::Guild { guild_id, channel_id: msg.channel_id },
        (Some(guild_id), Some(parent_id)) => Place::Thread { guild_id, parent_id, thread_id: msg.channel_id },
    };
    let mentioned = msg.is_direct() || msg.mentions_bot || msg.replies_to_bot;
    Mapped::Inbound {
        message: Box::new(inbound_message(&msg, place, mentioned, msg.text.clone(), Vec::new())),
        attachments: msg.attachments.len(),
    }
}
