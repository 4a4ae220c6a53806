//! Fuzzing entry point (feature `fuzzing`): an update's JSON mapped to the bus message the way
//! the ingress maps it, minus what needs the network (downloads) or earlier messages (group
//! context). Not part of the API.

use teloxide::types::{Update, UpdateKind, UserId};

use super::inbound::{BotIdentity, classify};
use super::ingress::inbound_message;
use crate::contract::InboundMessage;

/// What became of one update.
#[derive(Debug)]
pub enum Mapped {
    /// Not the JSON of an update, as teloxide reads it.
    NotAnUpdate(serde_json::Error),
    /// Not a new message, or a message the bot skips (service message, channel post, a
    /// command for another bot).
    Skipped,
    /// The message for the bus, with how many attachments it carried and the command it
    /// starts with (lower case, without the slash), if any.
    Inbound { message: Box<InboundMessage>, attachments: usize, command: Option<String> },
}

/// Maps one update for the bot `bot_id` / `@bot_username`.
pub fn map_update(json: &[u8], bot_id: u64, bot_username: &str) -> Mapped {
    let update: Update = match serde_json::from_slice(json) {
        Ok(update) => update,
        Err(err) => return Mapped::NotAnUpdate(err),
    };
    let UpdateKind::Message(message) = &update.kind else { return Mapped::Skipped };
    let me = BotIdentity { id: UserId(bot_id), username: bot_username.to_owned() };
    match classify(message, &me) {
        Ok(msg) => Mapped::Inbound {
            message: Box::new(inbound_message(&msg, msg.text.clone(), Vec::new())),
            attachments: msg.attachments.len(),
            command: msg.command,
        },
        Err(_) => Mapped::Skipped,
    }
}
