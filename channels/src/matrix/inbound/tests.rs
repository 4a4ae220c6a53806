use matrix_sdk::ruma::{owned_user_id, user_id};
use serde_json::{Value, json};

use super::*;

const BOT: &str = "@bot:example.org";

fn event(content: Value) -> OriginalSyncRoomMessageEvent {
    serde_json::from_value(json!({
        "type": "m.room.message",
        "event_id": "$abc",
        "sender": "@alice:example.org",
        "origin_server_ts": 1_765_000_000_123_u64,
        "content": content,
    }))
    .unwrap()
}

fn classified(content: Value) -> Result<Incoming, Skip> {
    classify(&event(content), user_id!("@bot:example.org"), Some("Helper"))
}

#[test]
fn a_text_message_with_its_time_and_mentions() {
    let msg = classified(json!({"msgtype": "m.text", "body": "hello", "m.mentions": {"user_ids": [BOT]}})).unwrap();
    assert_eq!((msg.text.as_str(), msg.mentions_bot, msg.notice), ("hello", true, false));
    assert_eq!(msg.sender, owned_user_id!("@alice:example.org"));
    assert_eq!(msg.sent_at.timestamp_millis(), 1_765_000_000_123);
    // A client that sends m.mentions has said whom it mentions: the name in the text is not one.
    let msg = classified(json!({"msgtype": "m.text", "body": "Helper?", "m.mentions": {}})).unwrap();
    assert!(!msg.mentions_bot);
}

#[test]
fn without_m_mentions_the_bot_is_named_in_the_text() {
    let named = |body: &str| classified(json!({"msgtype": "m.text", "body": body})).unwrap().mentions_bot;
    assert!(named("helper: what time is it"));
    assert!(named("ask @bot:example.org"));
    assert!(!named("the helpers are here"));
    assert!(!named("nothing for you"));
}

#[test]
fn threads_replies_and_edits() {
    let reply = classified(json!({"msgtype": "m.text", "body": "> <@bot:example.org> earlier\n> two\n\nyes please",
        "m.relates_to": {"m.in_reply_to": {"event_id": "$earlier"}}}))
    .unwrap();
    assert_eq!(reply.text, "yes please");
    assert_eq!(reply.reply_to.as_deref().map(|id| id.as_str()), Some("$earlier"));
    assert_eq!(reply.thread, None);
    let in_thread = classified(json!({"msgtype": "m.text", "body": "in the thread",
        "m.relates_to": {"rel_type": "m.thread", "event_id": "$root", "is_falling_back": true,
                         "m.in_reply_to": {"event_id": "$latest"}}}))
    .unwrap();
    assert_eq!(in_thread.thread.as_deref().map(|id| id.as_str()), Some("$root"));
    assert_eq!(in_thread.reply_to, None, "a thread's fallback is not a reply");
    let edit = classified(
        json!({"msgtype": "m.text", "body": "* fixed", "m.new_content": {"msgtype": "m.text", "body": "fixed"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": "$abc0"}}),
    );
    assert_eq!(edit.unwrap_err(), Skip::Edit);
}

#[test]
fn notices_own_messages_and_unknown_types() {
    assert!(classified(json!({"msgtype": "m.notice", "body": "beep"})).unwrap().notice);
    let own = classify(&event(json!({"msgtype": "m.text", "body": "x"})), user_id!("@alice:example.org"), None);
    assert_eq!(own.unwrap_err(), Skip::OwnMessage);
    let location = classified(json!({"msgtype": "m.location", "body": "here", "geo_uri": "geo:1,2"}));
    assert_eq!(location.unwrap_err(), Skip::Unsupported);
}

#[test]
fn attachments_keep_their_name_size_and_source() {
    let image = classified(json!({"msgtype": "m.image", "body": "cat.png", "url": "mxc://example.org/cat",
        "info": {"mimetype": "image/png", "size": 1234}}))
    .unwrap();
    let attachment = image.attachment.unwrap();
    assert_eq!(
        (attachment.kind, attachment.name.as_str(), attachment.size),
        (AttachmentKind::Image, "cat.png", Some(1234))
    );
    assert!(matches!(attachment.source, Source::Plain(ref uri) if uri.as_str() == "mxc://example.org/cat"));
    assert_eq!(image.text, "", "the body is the file name");
    let captioned = classified(json!({"msgtype": "m.file", "body": "the report", "filename": "q3.pdf",
        "url": "mxc://example.org/q3"}))
    .unwrap();
    assert_eq!((captioned.text.as_str(), captioned.attachment.unwrap().name.as_str()), ("the report", "q3.pdf"));
    let voice = classified(json!({"msgtype": "m.audio", "body": "Voice message", "url": "mxc://example.org/v",
        "org.matrix.msc3245.voice": {}, "org.matrix.msc1767.audio": {"duration": 2000}}))
    .unwrap();
    assert_eq!(voice.attachment.unwrap().kind, AttachmentKind::Voice);
}
