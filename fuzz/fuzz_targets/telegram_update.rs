//! Telegram update → inbound mapping: any update JSON either fails to decode, is skipped, or
//! becomes an inbound message the worker accepts, keyed by its chat and message ids.

#![no_main]

#[path = "../common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use switchboard_channels::telegram::fuzzing::{Mapped, map_update};

const BOT_ID: u64 = 5000;

fuzz_target!(|json: &[u8]| {
    let Mapped::Inbound { message, attachments, command } = map_update(json, BOT_ID, "switchboard_bot") else {
        return;
    };
    common::check_inbound(&message);
    assert_eq!(message.channel, "telegram");
    assert!(message.chat_id.parse::<i64>().is_ok(), "chat id {:?} is not a Telegram id", message.chat_id);
    let message_id = message.metadata.get("message_id").and_then(|id| id.as_str()).expect("message_id in metadata");
    assert_eq!(message.id, format!("telegram:{}:{message_id}", message.chat_id));
    assert!(
        !message.content.trim().is_empty() || attachments > 0,
        "a message with neither text nor attachments was forwarded"
    );
    if let Some(command) = command {
        // The entity's `/command@bot` is shortened to `/command`; what follows is kept as sent.
        let lower = message.content.to_ascii_lowercase();
        assert!(lower.starts_with(&format!("/{command}")), "command {command:?} not first in {:?}", message.content);
    }
    if let Some(topic) = &message.thread_id {
        assert!(message.is_group && topic.parse::<i32>().is_ok(), "topic {topic:?} outside a group");
    }
});
