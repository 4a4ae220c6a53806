use super::*;

#[test]
fn minimal_inbound_json_decodes_with_defaults() {
    let msg: InboundMessage = serde_json::from_str(
        r#"{"v":1,"id":"x1","channel":"api","chat_id":"me","sender":{"id":"7"},"content":"hi","future_field":3}"#,
    )
    .unwrap();
    assert_eq!(msg.sender, Sender { id: "7".into(), ..Sender::default() });
    assert_eq!(msg.kind, InboundKind::User);
    assert!(msg.validate().is_ok());
    assert_eq!(msg.session_key(), "api:me");
}

#[test]
fn user_messages_need_a_sender_and_system_messages_do_not() {
    let user: InboundMessage = serde_json::from_str(r#"{"id":"a","channel":"api","chat_id":"me"}"#).unwrap();
    assert_eq!(user.validate(), Err(ContractError::NoSender));
    let empty: InboundMessage =
        serde_json::from_str(r#"{"id":"a","channel":"api","chat_id":"me","sender":{"id":""}}"#).unwrap();
    assert_eq!(empty.validate(), Err(ContractError::NoSender));
    let system: InboundMessage =
        serde_json::from_str(r#"{"id":"a","channel":"api","chat_id":"me","kind":"system"}"#).unwrap();
    assert_eq!(system.validate(), Ok(()));
}

#[test]
fn an_unknown_media_kind_fails_validation_both_ways() {
    let known: InboundMessage = serde_json::from_str(
        r#"{"id":"a","channel":"api","chat_id":"me","sender":{"id":"7"},"media":[{"kind":"voice","path":"v.ogg"}]}"#,
    )
    .unwrap();
    assert_eq!(known.validate(), Ok(()));
    let sticker: InboundMessage = serde_json::from_str(
        r#"{"id":"a","channel":"api","chat_id":"me","sender":{"id":"7"},"media":[{"kind":"sticker"}]}"#,
    )
    .unwrap();
    assert_eq!(sticker.validate(), Err(ContractError::MediaKind("sticker".into())));
    let out: OutboundMessage =
        serde_json::from_str(r#"{"id":"o","channel":"api","chat_id":"me","media":[{"kind":"Photo"}]}"#).unwrap();
    assert_eq!(out.validate(), Err(ContractError::MediaKind("Photo".into())));
}

#[test]
fn missing_id_fails_validation() {
    let msg: InboundMessage = serde_json::from_str(r#"{"channel":"api","chat_id":"me"}"#).unwrap();
    assert_eq!(msg.validate(), Err(ContractError::Missing("id")));
}

#[test]
fn newer_version_is_refused() {
    let msg: InboundMessage = serde_json::from_str(r#"{"v":99,"id":"a","channel":"api","chat_id":"me"}"#).unwrap();
    assert_eq!(msg.validate(), Err(ContractError::Version(99)));
}

#[test]
fn session_keys_name_topics_and_threads() {
    assert_eq!(session_key("telegram", "-100", Some("7")), "telegram:-100:topic:7");
    assert_eq!(session_key("discord", "55", Some("9")), "discord:55:thread:9");
}

#[test]
fn run_events_are_tagged_by_type() {
    let ev = RunEvent {
        v: 1,
        run_id: "r".into(),
        session_key: "api:me".into(),
        channel: "api".into(),
        chat_id: "me".into(),
        inbound_id: None,
        thread_id: None,
        reply_to: None,
        at: Utc::now(),
        body: RunEventBody::Chunk { text: "he".into() },
    };
    let json = serde_json::to_value(&ev).unwrap();
    assert_eq!(json["type"], "chunk");
    assert_eq!(json["text"], "he");
    let back: RunEvent = serde_json::from_value(json).unwrap();
    assert_eq!(back, ev);
    let addressed = RunEvent { thread_id: Some("9".into()), reply_to: Some("42".into()), ..ev };
    let json = serde_json::to_value(&addressed).unwrap();
    assert_eq!((json["thread_id"].as_str(), json["reply_to"].as_str()), (Some("9"), Some("42")));
    let unknown: RunEvent =
        serde_json::from_str(r#"{"run_id":"r","session_key":"k","channel":"c","chat_id":"d","type":"run.paused"}"#)
            .unwrap();
    assert_eq!(unknown.body, RunEventBody::Unknown);
}

fn decode(json: &str) -> InboundMessage {
    serde_json::from_str(json).unwrap()
}

#[test]
fn flags_are_read_from_the_message() {
    let request = decode(r#"{"id":"a","channel":"console","chat_id":"me","flags":{"awaits_reply":true}}"#);
    assert!(request.awaits_reply());
    assert!(!request.sender_is_claimed() && !request.wants_reply_again());
    let retry = decode(r#"{"id":"a","channel":"console","chat_id":"me","flags":{"resend_reply":true}}"#);
    assert!(retry.wants_reply_again() && !retry.awaits_reply());
    // A system message has no person waiting for it, whatever its flags say.
    let system =
        decode(r#"{"id":"a","channel":"console","chat_id":"me","kind":"system","flags":{"awaits_reply":true}}"#);
    assert!(!system.awaits_reply());
    let chat = decode(r#"{"id":"a","channel":"telegram","chat_id":"me"}"#);
    assert_eq!(chat.effective_flags(), MessageFlags::default());
}

#[test]
fn a_message_of_an_earlier_api_process_reads_as_it_meant() {
    let old = decode(r#"{"id":"a","channel":"api","chat_id":"me","metadata":{"resend_reply":true}}"#);
    assert_eq!(old.effective_flags(), MessageFlags { resend_reply: true, ..MessageFlags::request() });
    let old = decode(r#"{"id":"a","channel":"api","chat_id":"me"}"#);
    assert_eq!(old.effective_flags(), MessageFlags::request());
    // The legacy key still counts on any channel, as it did.
    let other = decode(r#"{"id":"a","channel":"console","chat_id":"me","metadata":{"resend_reply":true}}"#);
    assert_eq!(other.effective_flags(), MessageFlags { resend_reply: true, ..MessageFlags::default() });
    // A message that says its flags is taken at its word, on the api channel too.
    let flagged = decode(r#"{"id":"a","channel":"api","chat_id":"me","flags":{"resend_reply":true}}"#);
    assert_eq!(flagged.effective_flags(), MessageFlags { resend_reply: true, ..MessageFlags::default() });
}

#[test]
fn flags_are_left_out_of_the_json_when_none_is_set() {
    let json = serde_json::to_value(InboundMessage::user("telegram", "1", Sender::default(), "hi")).unwrap();
    assert_eq!(json.get("flags"), None);
    let flags = MessageFlags { awaits_reply: true, ..MessageFlags::default() };
    assert_eq!(serde_json::to_string(&flags).unwrap(), r#"{"awaits_reply":true}"#);
}

#[test]
fn a_named_agents_session_keys_carry_its_prefix_and_the_main_agents_do_not() {
    use crate::contract::{ChatAddress, MAIN_AGENT, SessionKey};
    let topic = ChatAddress::parse("telegram:-100:topic:7").unwrap();
    assert_eq!(SessionKey::of_chat(MAIN_AGENT, &topic).as_str(), "telegram:-100:topic:7");
    assert_eq!(SessionKey::of_chat("ops", &topic).as_str(), "ops/telegram:-100:topic:7");
    assert_eq!(SessionKey::named("ops", "cron:ab12cd34").base("ops"), "cron:ab12cd34");
    // Another agent's prefix, or a name that only starts like the agent's, is left alone.
    assert_eq!(SessionKey::stored("support/telegram:1").base("ops"), "support/telegram:1");
    assert_eq!(SessionKey::stored("opsx/telegram:1").base("ops"), "opsx/telegram:1");
    assert_eq!(SessionKey::stored("main/telegram:1").base(MAIN_AGENT), "main/telegram:1");
    // On the wire and in the stores, the text itself.
    let json = serde_json::to_string(&SessionKey::of_chat("ops", &topic)).unwrap();
    assert_eq!(json, "\"ops/telegram:-100:topic:7\"");
}
