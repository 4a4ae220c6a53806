//! Raw publishes on every subject switchboard consumes in the NATS shape: the inbound subjects
//! (the workers) and each channel's outbound subject (the adapters). What cannot be processed is
//! dead-lettered with its reason; what is valid is answered exactly once, replays included.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::Context;
use serde_json::{Value, json};
use switchboard_channels::subject::Flow;
use switchboard_testkit::fake_llm::Scripted;

use super::rig::{ALICE, Doors, Rig, Shape, eventually};

const BAD_INBOUND: &str = "switchboard.in.corpus.bad";

/// A valid inbound message for Alice's Telegram chat (so its reply is visible at the fake).
fn inbound(id: &str, content: &str) -> Value {
    json!({"v": 1, "id": id, "channel": "telegram", "chat_id": ALICE.to_string(),
           "sender": {"id": ALICE.to_string(), "name": "alice", "is_bot": false}, "content": content})
}

/// A valid outbound message for `channel`/`chat`.
fn outbound(channel: &str, chat: &str) -> Value {
    json!({"v": 1, "id": format!("corpus-out-{channel}"), "channel": channel, "chat_id": chat, "content": "x"})
}

/// `base` with `key` removed, or set to `value`.
fn with(mut base: Value, key: &str, value: Option<Value>) -> Vec<u8> {
    match value {
        Some(value) => base[key] = value,
        None => drop(base.as_object_mut().unwrap().remove(key)),
    }
    base.to_string().into_bytes()
}

/// Payloads no reader can process: not JSON, not an object, wrong types or version, missing
/// fields, bytes that are not UTF-8. `base` is a valid message of the flow.
fn garbage(base: &Value) -> Vec<(&'static str, Vec<u8>)> {
    let valid = base.to_string();
    // In a field every reader reads (an unknown field may be skipped without a look).
    let mut invalid_utf8 = valid.replace("\"content\":\"", "\"content\":\"\u{1}").into_bytes();
    let marker = invalid_utf8.iter().position(|&b| b == 1).unwrap();
    invalid_utf8.splice(marker..=marker, [0xC3, 0x28, 0xFF]);
    vec![
        ("not JSON", b"{not json".to_vec()),
        ("empty", Vec::new()),
        ("an array", b"[]".to_vec()),
        ("null", b"null".to_vec()),
        ("deeply nested", format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes()),
        ("trailing garbage", format!("{valid} trailing").into_bytes()),
        ("a newer version", with(base.clone(), "v", Some(json!(2)))),
        ("version 0", with(base.clone(), "v", Some(json!(0)))),
        ("version as text", with(base.clone(), "v", Some(json!("1")))),
        ("no id", with(base.clone(), "id", None)),
        ("empty id", with(base.clone(), "id", Some(json!("")))),
        ("no channel", with(base.clone(), "channel", None)),
        ("no chat_id", with(base.clone(), "chat_id", None)),
        ("content a number", with(base.clone(), "content", Some(json!(5)))),
        ("media a string", with(base.clone(), "media", Some(json!("photo.jpg")))),
        ("an unknown kind", with(base.clone(), "kind", Some(json!("admin")))),
        ("invalid UTF-8 bytes", invalid_utf8),
        ("a lone surrogate", valid.replace("\"content\":\"", "\"content\":\"\\udc00").into_bytes()),
        ("half a megabyte of junk", "#".repeat(512 * 1024).into_bytes()),
    ]
}

/// Inbound-only garbage: a user message must name its sender.
fn inbound_only() -> Vec<(&'static str, Vec<u8>)> {
    let base = inbound("corpus:sender", "x");
    vec![
        ("no sender", with(base.clone(), "sender", None)),
        ("an empty sender id", with(base.clone(), "sender", Some(json!({"id": "", "name": "x"})))),
        ("received_at not a time", with(base, "received_at", Some(json!("yesterday")))),
    ]
}

async fn publish(js: &Context, subject: &str, payload: Vec<u8>, msg_id: Option<&str>) -> bool {
    let mut headers = HeaderMap::new();
    if let Some(id) = msg_id {
        headers.insert("Nats-Msg-Id", id);
    }
    let ack = js.publish_with_headers(subject.to_owned(), headers, payload.into()).await.unwrap();
    ack.await.unwrap().duplicate
}

/// Every published bad message is dead-lettered once, on its flow, naming its subject and
/// carrying a reason and the payload as it was.
fn assert_dead_lettered(
    letters: &[switchboard_channels::contract::DeadLetter],
    sent: &[(String, &str, Vec<u8>)],
    logs: &str,
) {
    assert_eq!(letters.len(), sent.len(), "{letters:#?}\n{logs}");
    for (subject, name, payload) in sent {
        let payload = String::from_utf8_lossy(payload);
        let letter = letters.iter().find(|l| &l.subject == subject && l.payload == payload);
        let letter = letter.unwrap_or_else(|| panic!("{name} on {subject} was not dead-lettered: {letters:#?}"));
        assert!(!letter.reason.trim().is_empty(), "{name}: no reason");
    }
}

#[tokio::test]
async fn garbage_on_every_subject_is_dead_lettered_with_a_reason_nats() {
    let mut rig = Rig::start(Shape::Nats, Doors { telegram: true, discord: true }, &[]).await;
    let js = rig.jetstream().await;

    let mut inbound_sent = Vec::new();
    let corpus = garbage(&inbound("corpus:1", "x")).into_iter().chain(inbound_only());
    for (name, payload) in corpus {
        publish(&js, BAD_INBOUND, payload.clone(), None).await;
        inbound_sent.push((BAD_INBOUND.to_owned(), name, payload));
    }
    let mut outbound_sent = Vec::new();
    for (channel, chat) in [("telegram", ALICE.to_string()), ("discord", "300".to_owned()), ("api", "me".to_owned())] {
        let subject = format!("switchboard.out.{channel}.{chat}");
        for (name, payload) in garbage(&outbound(channel, &chat)) {
            publish(&js, &subject, payload.clone(), None).await;
            outbound_sent.push((subject.clone(), name, payload));
        }
    }
    // Run events are best effort and not stored: garbage there is skipped by whoever listens.
    let client = async_nats::connect(rig.nats.as_ref().unwrap().url()).await.unwrap();
    client.publish(format!("switchboard.events.telegram.{ALICE}"), "{not json".into()).await.unwrap();
    client.flush().await.unwrap();

    let letters = rig.wait_dead_letters(Flow::In, inbound_sent.len()).await;
    assert_dead_lettered(&letters, &inbound_sent, &rig.logs());
    let version = letters.iter().find(|l| l.payload.contains("\"v\":2")).unwrap();
    assert!(version.reason.contains("version"), "{}", version.reason);
    let letters = rig.wait_dead_letters(Flow::Out, outbound_sent.len()).await;
    assert_dead_lettered(&letters, &outbound_sent, &rig.logs());

    assert!(rig.llm.requests().is_empty(), "garbage reached the model");
    assert!(rig.telegram.sent_messages().is_empty(), "{:?}", rig.telegram.sent_messages());
    assert!(rig.discord.sent_messages().is_empty(), "{:?}", rig.discord.sent_messages());
    rig.assert_still_healthy().await;
    // Nothing comes back round: every message acked, and the dead letters stay as many.
    rig.wait_acked(&["SWITCHBOARD_IN", "SWITCHBOARD_OUT"]).await;
    assert_eq!(rig.dead_letters(Flow::In).await.len(), inbound_sent.len(), "{}", rig.logs());
    rig.report("raw garbage on every subject");
}

/// The same inbound message published again, with and without the same `Nats-Msg-Id`, before
/// and after it was answered, and a large valid one: each answered exactly once.
#[tokio::test]
async fn replayed_and_oversized_inbound_is_answered_once_nats() {
    let mut rig = Rig::start(Shape::Nats, Doors { telegram: true, discord: false }, &[]).await;
    let js = rig.jetstream().await;
    let subject = format!("switchboard.in.telegram.{ALICE}");
    // One message at a time, each after the answer to the one before: one person's messages
    // that arrive together are one turn (a burst), and this test counts answers per message.
    let telegram = rig.telegram.clone();
    let answered = |n: usize| {
        let telegram = telegram.clone();
        move || telegram.sent_messages().len() >= n
    };
    let first = inbound(&format!("telegram:{ALICE}:7001"), "replayed with its id");
    assert!(!publish(&js, &subject, first.to_string().into(), Some("telegram:111:7001")).await);
    assert!(publish(&js, &subject, first.to_string().into(), Some("telegram:111:7001")).await, "not deduplicated");
    assert!(eventually(Duration::from_secs(20), answered(1)).await, "{:#?}\n{}", rig.telegram.calls(), rig.logs());
    let second = inbound(&format!("telegram:{ALICE}:7002"), "replayed without an id");
    publish(&js, &subject, second.to_string().into(), None).await;
    publish(&js, &subject, second.to_string().into(), None).await;
    assert!(eventually(Duration::from_secs(20), answered(2)).await, "{:#?}\n{}", rig.telegram.calls(), rig.logs());
    let big = inbound(&format!("telegram:{ALICE}:7003"), &"z".repeat(900 * 1024));
    rig.llm.push_when("zzzzzzzz", Scripted::Text("read the big one".into()));
    publish(&js, &subject, big.to_string().into(), Some("telegram:111:7003")).await;
    assert!(eventually(Duration::from_secs(20), answered(3)).await, "{:#?}\n{}", rig.telegram.calls(), rig.logs());
    // Replayed once more after the answers went out, without an id: still nothing new.
    publish(&js, &subject, second.to_string().into(), None).await;
    publish(&js, &subject, first.to_string().into(), None).await;
    // Handled: taken, (not) answered and acked, and any answer delivered and acked.
    rig.wait_acked(&["SWITCHBOARD_IN", "SWITCHBOARD_OUT"]).await;

    let mut texts: Vec<String> = rig.telegram.sent_messages().into_iter().filter_map(|m| m.text).collect();
    texts.sort();
    assert_eq!(
        texts,
        ["echo: replayed with its id", "echo: replayed without an id", "read the big one"],
        "{}",
        rig.logs()
    );
    let requests = rig.llm.requests();
    assert_eq!(requests.len(), 3, "a replay ran the model again");
    // The guard cut the big one before the model saw it.
    let big_request = requests.iter().map(Value::to_string).find(|r| r.contains("zzzzzzzz")).unwrap();
    assert!(big_request.len() < 100 * 1024, "{} bytes reached the model", big_request.len());
    assert!(rig.dead_letters(Flow::In).await.is_empty());
    rig.assert_still_healthy().await;
    rig.report("replays and a large inbound message");
}
