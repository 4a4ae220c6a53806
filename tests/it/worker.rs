//! The worker on the in-process bus with a real SQLite store and the OpenAI-compatible
//! provider against a scripted model server: ordering, dedupe, dead letters, stale messages
//! and shutdown.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::json;

use crate::common::start;
use switchboard::worker::{QueueSettings, WorkerSettings};
use switchboard_channels::contract::{InboundMessage, OutboundMessage, RunEventBody, Sender};
use switchboard_channels::subject::Flow;
use switchboard_channels::{BusExt, Deliveries};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

fn msg(chat: &str, content: &str) -> InboundMessage {
    from("u1", chat, content)
}

/// A message of person `sender`: one person's messages sent together make one burst (one
/// turn); these tests want a turn per message, so theirs come from different people.
fn from(sender: &str, chat: &str, content: &str) -> InboundMessage {
    InboundMessage::user(
        "test",
        chat,
        Sender { id: sender.into(), name: sender.to_uppercase(), is_bot: false },
        content,
    )
}

async fn next_reply(out: &mut Deliveries) -> OutboundMessage {
    let delivery = tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("no reply").unwrap().unwrap();
    let reply = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    reply
}

/// No debounce: a message starts its turn at once, unless it is one of a burst still coming in.
fn no_debounce() -> WorkerSettings {
    WorkerSettings { queue: QueueSettings { debounce: Duration::ZERO, ..Default::default() }, ..Default::default() }
}

async fn no_more_replies(out: &mut Deliveries) {
    if let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_millis(500), out.next()).await {
        panic!("unexpected reply {:?}", String::from_utf8_lossy(&d.payload));
    }
}

#[tokio::test]
async fn one_session_runs_in_order_and_sessions_run_in_parallel() {
    let llm = FakeLlm::start().await;
    for _ in 0..4 {
        llm.push(Scripted::Delay(Duration::from_millis(400), Box::new(Scripted::Text("ok".into()))));
    }
    let h = start(no_debounce(), llm).await;
    let mut out = h.bus.outbound("test").await.unwrap();
    let started = Instant::now();
    for (sender, chat, text) in [("u1", "a", "a1"), ("u2", "b", "b1"), ("u3", "a", "a2"), ("u4", "b", "b2")] {
        h.bus.publish_inbound(&from(sender, chat, text)).await.unwrap();
    }
    let mut order = Vec::new();
    for _ in 0..4 {
        let reply = next_reply(&mut out).await;
        order.push(reply.chat_id.clone());
    }
    // Two sessions of two 400 ms turns each: ~800 ms in parallel, 1600 ms if serialized.
    assert!(started.elapsed() < Duration::from_millis(1400), "sessions did not run in parallel");
    let requests = h.llm.requests();
    let user_texts = |i: usize| switchboard_testkit::fake_llm::user_texts(&requests[i]);
    let seen: Vec<String> = (0..4).map(|i| user_texts(i).pop().unwrap()).collect();
    let pos = |s: &str| seen.iter().position(|x| x == s).unwrap();
    assert!(pos("a1") < pos("a2") && pos("b1") < pos("b2"), "{seen:?}");
    // a2's call saw a1's finished turn: runs of one session never overlap.
    let a2 = user_texts(pos("a2"));
    assert!(a2.iter().any(|text| text == "a1"), "{a2:?}");
    assert_eq!(order.len(), 4);
}

#[tokio::test]
async fn redelivered_message_is_answered_once() {
    let h = start(WorkerSettings::default(), FakeLlm::start().await).await;
    let mut out = h.bus.outbound("test").await.unwrap();
    let m = msg("dup", "once please");
    let payload = Bytes::from(serde_json::to_vec(&m).unwrap());
    // Published twice without a bus dedupe id: the store's run record must catch it.
    for _ in 0..2 {
        h.bus.publish_raw(Flow::In, "test", "dup", None, payload.clone()).await.unwrap();
    }
    let reply = next_reply(&mut out).await;
    assert_eq!(reply.content, "echo: once please");
    assert_eq!(reply.in_reply_to.as_deref(), Some(m.id.as_str()));
    no_more_replies(&mut out).await;
    assert_eq!(h.llm.requests().len(), 1);
    let runs = h.store.recent_runs(10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].reply_delivered);
}

#[tokio::test]
async fn malformed_messages_are_dead_lettered_and_the_worker_goes_on() {
    let h = start(WorkerSettings::default(), FakeLlm::start().await).await;
    let mut out = h.bus.outbound("test").await.unwrap();
    h.bus.publish_raw(Flow::In, "test", "x", None, Bytes::from_static(b"{not json")).await.unwrap();
    h.bus.publish_raw(Flow::In, "test", "x", None, Bytes::from(json!({"channel": "test"}).to_string())).await.unwrap();
    h.bus.publish_inbound(&msg("x", "still there?")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "echo: still there?");
    let dead = h.bus.dead_letters(Flow::In, 10).await.unwrap();
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead[0].reason.contains("not a valid InboundMessage"), "{}", dead[0].reason);
    assert_eq!(dead[0].payload, "{not json");
    assert!(dead[1].reason.contains("`id` must not be empty"), "{}", dead[1].reason);
}

/// An attachment of a kind nobody knows is refused like the other invalid fields, with the
/// reason, and the chat goes on.
#[tokio::test]
async fn an_unknown_media_kind_is_dead_lettered() {
    let h = start(WorkerSettings::default(), FakeLlm::start().await).await;
    let mut out = h.bus.outbound("test").await.unwrap();
    let sticker = json!({"id": "s1", "channel": "test", "chat_id": "x", "sender": {"id": "u1"},
        "content": "look", "media": [{"kind": "sticker", "path": "s.webp"}]});
    h.bus.publish_raw(Flow::In, "test", "x", Some("s1"), Bytes::from(sticker.to_string())).await.unwrap();
    h.bus.publish_inbound(&msg("x", "still there?")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "echo: still there?");
    no_more_replies(&mut out).await;
    let dead = h.bus.dead_letters(Flow::In, 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].reason.contains("`media.kind` \"sticker\""), "{}", dead[0].reason);
}

/// Users are keyed `<channel>:<sender.id>`: a user message without a sender would be charged
/// to one nameless user shared by everyone who sends one, so it is refused with the reason.
/// A system message has no sender of its own and is answered.
#[tokio::test]
async fn user_message_without_sender_is_dead_lettered_system_message_is_not() {
    let h = start(WorkerSettings::default(), FakeLlm::start().await).await;
    let mut out = h.bus.outbound("test").await.unwrap();
    let nameless = InboundMessage::user("test", "x", Sender::default(), "who am I?");
    h.bus.publish_inbound(&nameless).await.unwrap();
    let system = json!({"id": "cron:1:1", "channel": "test", "chat_id": "x", "kind": "system", "content": "tick"});
    h.bus.publish_raw(Flow::In, "test", "x", Some("cron:1:1"), Bytes::from(system.to_string())).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "echo: tick");
    no_more_replies(&mut out).await;
    assert_eq!(h.llm.requests().len(), 1, "the nameless message reached the model");
    let dead = h.bus.dead_letters(Flow::In, 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].reason.contains("sender.id"), "{}", dead[0].reason);
    assert!(dead[0].payload.contains("who am I?"), "{}", dead[0].payload);
}

#[tokio::test]
async fn messages_too_old_are_dropped_not_answered() {
    let h = start(
        WorkerSettings { max_message_age: Duration::from_secs(60), ..Default::default() },
        FakeLlm::start().await,
    )
    .await;
    let mut out = h.bus.outbound("test").await.unwrap();
    let mut old = msg("old", "from yesterday");
    old.received_at = chrono::Utc::now() - chrono::Duration::hours(2);
    h.bus.publish_inbound(&old).await.unwrap();
    h.bus.publish_inbound(&msg("old", "fresh")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "echo: fresh");
    no_more_replies(&mut out).await;
    assert_eq!(h.llm.requests().len(), 1);
}

#[tokio::test]
async fn shutdown_finishes_running_turns_and_returns_queued_ones() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Delay(Duration::from_millis(600), Box::new(Scripted::Text("finished".into()))));
    let settings = WorkerSettings { shutdown_grace: Duration::from_secs(5), ..no_debounce() };
    let h = start(settings, llm).await;
    let mut out = h.bus.outbound("test").await.unwrap();
    h.bus.publish_inbound(&from("u1", "s", "first")).await.unwrap();
    h.bus.publish_inbound(&from("u2", "s", "second")).await.unwrap();
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    h.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), h.worker).await.unwrap().unwrap();
    assert_eq!(next_reply(&mut out).await.content, "finished");
    // The queued message was given back to the bus, not run and not lost.
    let mut inbound = h.bus.inbound().await.unwrap();
    let back = tokio::time::timeout(Duration::from_secs(2), inbound.next()).await.unwrap().unwrap().unwrap();
    let back: InboundMessage = back.decode().unwrap();
    assert_eq!(back.content, "second");
    assert_eq!(h.llm.requests().len(), 1);
}

#[tokio::test]
async fn run_events_tell_what_the_run_did() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::ToolCalls(vec![("current_time".into(), json!({}))]));
    llm.push(Scripted::Text("noon".into()));
    let h = start(WorkerSettings::default(), llm).await;
    let mut events = h.bus.events("test", Some("ev")).await.unwrap();
    let inbound = msg("ev", "time?");
    h.bus.publish_inbound(&inbound).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap().unwrap();
        assert_eq!(event.session_key, "test:ev");
        assert_eq!(event.inbound_id.as_deref(), Some(inbound.id.as_str()));
        let done = matches!(event.body, RunEventBody::Completed { .. } | RunEventBody::Failed { .. });
        seen.push(event.body);
        if done {
            break;
        }
    }
    assert!(matches!(seen[0], RunEventBody::Started), "{seen:?}");
    assert!(matches!(&seen[1], RunEventBody::ToolCall { name, .. } if name == "current_time"), "{seen:?}");
    assert!(matches!(&seen[2], RunEventBody::ToolResult { is_error: false, .. }), "{seen:?}");
    assert!(matches!(seen.last(), Some(RunEventBody::Completed { reply, .. }) if reply == "noon"), "{seen:?}");
}

fn owner_policy() -> switchboard::users::AccessPolicy {
    use switchboard::config::{BudgetsConfig, PermissionsConfig, UsersConfig};
    let users = UsersConfig { owners: vec!["test:u1".into()], ..UsersConfig::default() };
    switchboard::users::AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default())
        .unwrap()
}

#[tokio::test]
async fn the_message_tool_sends_to_another_chat_through_the_bus() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::ToolCalls(vec![(
        "message".into(),
        json!({"content": "Heads up: deploy at 5", "target": "test:ops-room"}),
    )]));
    llm.push(Scripted::Text("Told the ops room.".into()));
    let h = crate::common::start(WorkerSettings { access: owner_policy(), ..WorkerSettings::default() }, llm).await;
    let mut out = h.bus.outbound("test").await.unwrap();
    h.bus.publish_inbound(&msg("me", "tell ops about the deploy")).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let delivery = tokio::time::timeout(Duration::from_secs(10), out.next()).await.unwrap().unwrap().unwrap();
        got.push(delivery.decode::<OutboundMessage>().unwrap());
        delivery.ack().await.unwrap();
    }
    got.sort_by(|a, b| a.chat_id.cmp(&b.chat_id));
    assert_eq!((got[0].chat_id.as_str(), got[0].content.as_str()), ("me", "Told the ops room."));
    assert_eq!((got[1].chat_id.as_str(), got[1].content.as_str()), ("ops-room", "Heads up: deploy at 5"));
    let second = &h.llm.requests()[1];
    let result = second["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["content"], "sent to test:ops-room");
}
