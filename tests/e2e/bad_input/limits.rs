//! Ids at and past every length limit, and a dead letter too large to publish whole. These
//! expect the bounds of issue 13 (ids that become part of a NATS subject or header are bounded;
//! longer ones are refused with 400 `invalid_body` at the API and dead-lettered with a reason on
//! NATS; a dead letter's copy of the payload is cut to fit the server's payload limit).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_channels::subject::Flow;

use super::rig::{ALICE, API_ONLY, Rig, Shape, TELEGRAM, eventually};

/// The bounds, in UTF-8 bytes.
const MAX_CHANNEL: usize = 64;
const MAX_CHAT_ID: usize = 256;
const MAX_SENDER_ID: usize = 256;
const MAX_THREAD_ID: usize = 256;
const MAX_MESSAGE_ID: usize = 512;
/// nats-server's default `max_payload`.
const NATS_MAX_PAYLOAD: usize = 1024 * 1024;

async fn api_ids(shape: Shape) {
    let mut rig = Rig::start(shape, API_ONLY, &[]).await;
    let at_limit = [
        json!({"chat_id": "c".repeat(MAX_CHAT_ID), "content": "ascii chat at the limit"}),
        // Two bytes a character, each encoded to three subject bytes: the widest subject.
        json!({"chat_id": "\u{e9}".repeat(MAX_CHAT_ID / 2), "content": "wide chat at the limit"}),
        json!({"chat_id": "s", "sender": "u".repeat(MAX_SENDER_ID), "content": "sender at the limit"}),
    ];
    for body in at_limit {
        let (status, answer) = rig.daemon.post(body.clone()).await;
        assert_eq!(status, 200, "{body}: {answer}\n{}", rig.logs());
        assert_eq!(answer["reply"], format!("echo: {}", body["content"].as_str().unwrap()));
    }
    let past_limit = [
        json!({"chat_id": "c".repeat(MAX_CHAT_ID + 1), "content": "x"}),
        json!({"chat_id": "\u{e9}".repeat(MAX_CHAT_ID / 2 + 1), "content": "x"}),
        json!({"chat_id": "7".repeat(4_016), "content": "the issue's chat id"}),
        json!({"chat_id": "s", "sender": "u".repeat(MAX_SENDER_ID + 1), "content": "x"}),
    ];
    // The attack, repeated: each refused at once, none reaches the bus.
    for body in past_limit.iter().cycle().take(30) {
        let (status, answer) = rig.daemon.post(body.clone()).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (400, Some("invalid_body")), "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("limit"), "{answer}");
    }
    assert_eq!(rig.llm.requests().len(), 3);
    let started = Instant::now();
    rig.assert_still_healthy().await;
    assert!(started.elapsed() < Duration::from_secs(5), "a normal message took {:?}", started.elapsed());
    rig.report("ids at and past the limits (API)");
}

#[tokio::test]
async fn api_ids_past_limits_embedded() {
    api_ids(Shape::Embedded).await;
}

#[tokio::test]
async fn api_ids_past_limits_nats() {
    api_ids(Shape::Nats).await;
}

/// A valid inbound message on channel `channel`, chat `chat`.
fn inbound(id: &str, channel: &str, chat: &str) -> Value {
    json!({"v": 1, "id": id, "channel": channel, "chat_id": chat,
           "sender": {"id": "u1", "name": "U", "is_bot": false}, "content": format!("hello {id}")})
}

/// Raw inbound messages whose ids pass the bounds, published on a short subject (the body is
/// what a worker trusts): each is dead-lettered with a reason naming the limit.
#[tokio::test]
async fn raw_inbound_ids_past_limits_are_dead_lettered_nats() {
    let mut rig = Rig::start(Shape::Nats, API_ONLY, &[]).await;
    let js = rig.jetstream().await;
    let mut long_sender = inbound("long-sender", "corpus", "c");
    long_sender["sender"]["id"] = json!("u".repeat(MAX_SENDER_ID + 1));
    let mut long_thread = inbound("long-thread", "corpus", "c");
    long_thread["thread_id"] = json!("t".repeat(MAX_THREAD_ID + 1));
    let past = [
        inbound("long-chat", "corpus", &"c".repeat(MAX_CHAT_ID + 1)),
        inbound("long-channel", &"k".repeat(MAX_CHANNEL + 1), "c"),
        inbound(&"i".repeat(MAX_MESSAGE_ID + 1), "corpus", "c"),
        long_sender,
        long_thread,
    ];
    for message in &past {
        js.publish("switchboard.in.corpus.c", message.to_string().into()).await.unwrap().await.unwrap();
    }
    // At the limits: answered (the reply waits in the stream for a `corpus` adapter).
    let at = inbound(&"i".repeat(MAX_MESSAGE_ID), &"k".repeat(MAX_CHANNEL), &"\u{e9}".repeat(MAX_CHAT_ID / 2));
    js.publish("switchboard.in.corpus.c", at.to_string().into()).await.unwrap().await.unwrap();

    let letters = rig.wait_dead_letters(Flow::In, past.len()).await;
    assert_eq!(letters.len(), past.len(), "{letters:#?}\n{}", rig.logs());
    for letter in &letters {
        assert!(letter.reason.contains("limit"), "{}", letter.reason);
    }
    assert!(eventually(Duration::from_secs(10), || rig.llm.requests().len() == 1).await, "{}", rig.logs());
    // Every message acked (the reply waits in the outbound stream): none can come round again.
    rig.wait_acked(&["SWITCHBOARD_IN"]).await;
    assert_eq!(rig.dead_letters(Flow::In).await.len(), past.len(), "a refused message came round again");
    assert_eq!(rig.llm.requests().len(), 1);
    rig.assert_still_healthy().await;
    rig.report("raw ids past the limits");
}

/// Bad messages whose dead letter would pass the server's payload limit whole (invalid UTF-8
/// becomes three bytes a byte; quotes are escaped): dead-lettered once with the payload cut,
/// never redelivered.
#[tokio::test]
async fn garbage_needing_an_oversized_dead_letter_is_cut_not_redelivered_nats() {
    let mut rig = Rig::start(Shape::Nats, TELEGRAM, &[]).await;
    let js = rig.jetstream().await;
    let near_limit = NATS_MAX_PAYLOAD - 4 * 1024;
    let payloads = [vec![0xFF; near_limit], vec![b'"'; near_limit]];
    for payload in &payloads {
        js.publish("switchboard.in.corpus.big", payload.clone().into()).await.unwrap().await.unwrap();
        let outbound = format!("switchboard.out.telegram.{ALICE}");
        js.publish(outbound, payload.clone().into()).await.unwrap().await.unwrap();
    }
    for flow in [Flow::In, Flow::Out] {
        let letters = rig.wait_dead_letters(flow, payloads.len()).await;
        assert_eq!(letters.len(), payloads.len(), "{flow:?}: {} letters\n{}", letters.len(), rig.logs());
        for letter in &letters {
            assert!(!letter.reason.is_empty());
            assert!(letter.payload.len() < NATS_MAX_PAYLOAD, "{flow:?}: a {}-byte payload copy", letter.payload.len());
        }
    }
    // Every bad message acked (none still waiting for a worker), so none can come round again.
    rig.wait_acked(&["SWITCHBOARD_IN", "SWITCHBOARD_OUT"]).await;
    assert_eq!(rig.dead_letters(Flow::In).await.len(), payloads.len(), "dead-lettered again:\n{}", rig.logs());
    assert!(rig.telegram.sent_messages().is_empty());
    rig.assert_still_healthy().await;
    rig.report("oversized dead letters");
}
