//! Discord MESSAGE_CREATE → inbound mapping, as a direct, guild or thread message: any payload
//! either fails to decode, is skipped, or becomes an inbound message the worker accepts, keyed
//! by its channel and message ids and addressed to the right chat and thread.

#![no_main]

#[path = "../common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use switchboard_channels::discord::fuzzing::{Mapped, map_message};

const BOT_ID: u64 = 5000;
const THREAD_PARENT: u64 = 4242;

fuzz_target!(|json: &[u8]| {
    for thread_parent in [None, Some(THREAD_PARENT)] {
        let Mapped::Inbound { message, attachments } = map_message(json, BOT_ID, thread_parent) else { return };
        common::check_inbound(&message);
        assert_eq!(message.channel, "discord");
        assert_ne!(message.sender.id, BOT_ID.to_string(), "the bot's own message was forwarded");
        let meta = |key: &str| message.metadata.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        let channel_id = meta("channel_id").expect("channel_id in metadata");
        let message_id = meta("message_id").expect("message_id in metadata");
        assert_eq!(message.id, format!("discord:{channel_id}:{message_id}"));
        assert!(!message.content.trim().is_empty() || attachments > 0, "an empty message was forwarded");
        match (meta("guild_id"), thread_parent) {
            (None, _) => {
                assert!(!message.is_group && message.mentioned && message.thread_id.is_none());
                assert_eq!(message.chat_id, channel_id);
            }
            (Some(_), None) => {
                assert!(message.is_group && message.thread_id.is_none());
                assert_eq!(message.chat_id, channel_id);
            }
            (Some(_), Some(parent)) => {
                assert!(message.is_group);
                assert_eq!(message.chat_id, parent.to_string());
                assert_eq!(message.thread_id.as_deref(), Some(channel_id.as_str()));
            }
        }
    }
});
