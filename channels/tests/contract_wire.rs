//! The bus JSON of a few messages, byte for byte, as switchboard encodes them: the wire format
//! is a contract with adapters and workers of other versions, so a refactor must not change it.
//! New optional fields that are left out when empty keep these strings as they are.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed unwrap is a failed test")]

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use switchboard_channels::contract::{
    InboundMessage, Media, MessageFlags, OutboundKind, OutboundMessage, RepliedTo, RunEvent, RunEventBody, Sender,
    Usage,
};

fn at() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2024-05-01T12:00:00Z").unwrap().with_timezone(&Utc)
}

fn inbound() -> InboundMessage {
    let mut metadata = Map::new();
    metadata.insert("message_id".into(), json!("42"));
    metadata.insert("chat_type".into(), json!("supergroup"));
    InboundMessage {
        id: "telegram:-100:42".into(),
        channel: "telegram".into(),
        chat_id: "-100".into(),
        sender: Sender { id: "7".into(), name: "Ann".into(), is_bot: false },
        content: "look".into(),
        media: vec![Media {
            kind: "photo".into(),
            path: Some("media/telegram/a.jpg".into()),
            mime_type: Some("image/jpeg".into()),
            size: Some(1234),
            ..Media::default()
        }],
        reply_to: Some("41".into()),
        thread_id: Some("9".into()),
        is_group: true,
        mentioned: true,
        received_at: at(),
        metadata,
        ..InboundMessage::default()
    }
}

#[test]
fn an_inbound_user_message_keeps_its_json() {
    let expected = concat!(
        r#"{"v":1,"id":"telegram:-100:42","channel":"telegram","chat_id":"-100","#,
        r#""sender":{"id":"7","name":"Ann","is_bot":false},"content":"look","#,
        r#""media":[{"kind":"photo","path":"media/telegram/a.jpg","mime_type":"image/jpeg","size":1234}],"#,
        r#""reply_to":"41","thread_id":"9","is_group":true,"mentioned":true,"kind":"user","origin":null,"#,
        r#""received_at":"2024-05-01T12:00:00Z","metadata":{"chat_type":"supergroup","message_id":"42"}}"#
    );
    assert_eq!(serde_json::to_string(&inbound()).unwrap(), expected);
}

#[test]
fn a_reply_to_another_message_carries_it_after_reply_to() {
    let bob = Sender { id: "8".into(), name: "Bob".into(), is_bot: false };
    let mut msg = InboundMessage { media: Vec::new(), ..inbound() };
    msg.replied_to = Some(RepliedTo::new("41".into(), bob, false, "meet at 6?", Some("at 6")));
    let expected = concat!(
        r#"{"v":1,"id":"telegram:-100:42","channel":"telegram","chat_id":"-100","#,
        r#""sender":{"id":"7","name":"Ann","is_bot":false},"content":"look","media":[],"reply_to":"41","#,
        r#""replied_to":{"message_id":"41","sender":{"id":"8","name":"Bob","is_bot":false},"#,
        r#""text":"meet at 6?","quote":"at 6"},"#,
        r#""thread_id":"9","is_group":true,"mentioned":true,"kind":"user","origin":null,"#,
        r#""received_at":"2024-05-01T12:00:00Z","metadata":{"chat_type":"supergroup","message_id":"42"}}"#
    );
    let json = serde_json::to_string(&msg).unwrap();
    assert_eq!(json, expected);
    let back: InboundMessage = serde_json::from_str(&json).unwrap();
    assert_eq!(back, msg);
    // A reply to the bot's own message says so; a reader that knows no `replied_to` ignores it.
    let own = RepliedTo { from_self: true, quote: None, ..msg.replied_to.clone().unwrap() };
    let own = serde_json::to_value(&own).unwrap();
    assert_eq!((own["from_self"].as_bool(), own.get("quote")), (Some(true), None));
}

#[test]
fn a_request_carries_its_flags_after_metadata() {
    let sender = Sender { id: "me".into(), name: "me".into(), is_bot: false };
    let mut msg = InboundMessage::user("api", "c", sender, "hi");
    msg.id = "api:idem:ab".into();
    msg.received_at = at();
    msg.metadata.insert("reply_channel".into(), json!("api@h-8080"));
    msg.flags = MessageFlags { resend_reply: true, ..MessageFlags::request() };
    let expected = concat!(
        r#"{"v":1,"id":"api:idem:ab","channel":"api","chat_id":"c","#,
        r#""sender":{"id":"me","name":"me","is_bot":false},"content":"hi","media":[],"#,
        r#""reply_to":null,"thread_id":null,"is_group":false,"mentioned":false,"kind":"user","origin":null,"#,
        r#""received_at":"2024-05-01T12:00:00Z","metadata":{"reply_channel":"api@h-8080"},"#,
        r#""flags":{"awaits_reply":true,"claimed_sender":true,"resend_reply":true}}"#
    );
    let json = serde_json::to_string(&msg).unwrap();
    assert_eq!(json, expected);
    assert_eq!(serde_json::from_str::<InboundMessage>(&json).unwrap(), msg);
}

#[test]
fn an_outbound_reply_with_its_metadata_keeps_its_json() {
    let mut reply = OutboundMessage::answering(&inbound(), "run-1:reply".into(), OutboundKind::Reply, "hi".into());
    reply.created_at = at();
    let metadata: [(&str, Value); 6] = [
        ("run_id", json!("run-1")),
        ("session_key", json!("telegram:-100:topic:9")),
        ("suppressed", json!(true)),
        ("model", json!("gpt-x")),
        ("usage", json!(Usage::estimate(10, 5))),
        ("cost_usd", json!(null)),
    ];
    for (key, value) in metadata {
        reply.metadata.insert(key.into(), value);
    }
    let expected = concat!(
        r#"{"v":1,"id":"run-1:reply","in_reply_to":"telegram:-100:42","channel":"telegram","chat_id":"-100","#,
        r#""thread_id":"9","content":"hi","media":[],"reply_to":"42","kind":"reply","#,
        r#""created_at":"2024-05-01T12:00:00Z","metadata":{"cost_usd":null,"model":"gpt-x","run_id":"run-1","#,
        r#""session_key":"telegram:-100:topic:9","suppressed":true,"#,
        r#""usage":{"estimated":true,"input_tokens":10,"output_tokens":5}}}"#
    );
    assert_eq!(serde_json::to_string(&reply).unwrap(), expected);
}

fn event(body: RunEventBody) -> RunEvent {
    RunEvent {
        v: 1,
        run_id: "run-1".into(),
        session_key: "telegram:-100:topic:9".into(),
        channel: "telegram".into(),
        chat_id: "-100".into(),
        inbound_id: Some("telegram:-100:42".into()),
        thread_id: None,
        reply_to: None,
        at: at(),
        body,
    }
}

#[test]
fn run_events_keep_their_json() {
    let head = concat!(
        r#"{"v":1,"run_id":"run-1","session_key":"telegram:-100:topic:9","channel":"telegram","chat_id":"-100","#,
        r#""inbound_id":"telegram:-100:42","at":"2024-05-01T12:00:00Z","#
    );
    let chunk = serde_json::to_string(&event(RunEventBody::Chunk { text: "he".into() })).unwrap();
    assert_eq!(chunk, format!(r#"{head}"type":"chunk","text":"he"}}"#));
    let completed = RunEventBody::completed("hello", Usage::new(3, 4), "gpt-x", Some(0.5));
    let completed = serde_json::to_string(&event(completed)).unwrap();
    let tail = r#""type":"run.completed","reply":"hello","usage":{"input_tokens":3,"output_tokens":4},"model":"gpt-x","cost_usd":0.5}"#;
    assert_eq!(completed, format!("{head}{tail}"));
}
