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
/// it once. Discord takes at most 25 characters; this is 16 hex digits of a 64-bit FNV-1a hash
/// (stable across builds, unlike std's hasher).
pub(crate) fn nonce(key: &str, part: usize) -> String {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = key.bytes().chain([0xff]).chain((part as u64).to_le_bytes());
    let hash = bytes.fold(FNV_OFFSET, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME));
    format!("{hash:016x}")
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
    fn nonces_are_short_stable_and_differ_per_message_and_part() {
        let first = nonce("run-1:reply", 0);
        assert!(first.len() <= 25, "Discord takes at most 25 characters");
        assert_eq!(first, nonce("run-1:reply", 0));
        // Fixed by the algorithm, not by the build: a restarted daemon sends the same nonce.
        assert_eq!(nonce("", 0), "2032dd643620252e");
        let others = [nonce("run-1:reply", 1), nonce("run-2:reply", 0), nonce("run-1:repl", 0)];
        assert!(others.iter().all(|other| *other != first), "{first} {others:?}");
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
