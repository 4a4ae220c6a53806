//! One behaviour suite for every `Bus`: each behaviour is a generic async function run once
//! against `InProcessBus` and once against `NatsBus` on its own `nats-server` (feature `nats`).
//!
//! Every await that could hang is under a timeout, so a broken bus fails a test instead of
//! stalling the suite.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed unwrap is a failed test")]

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::contract::{DeadLetter, Sender};
use switchboard_channels::subject::{DEFAULT_PREFIX, Flow, Subjects};
use switchboard_channels::{
    Bus, BusExt, Deliveries, Delivery, InboundMessage, OutboundMessage, RunEvent, RunEventBody,
};

/// Upper bound for anything that should happen promptly.
const PATIENCE: Duration = Duration::from_secs(10);
/// How long we watch for a message that must not come (on top of any redelivery delay).
const QUIET: Duration = Duration::from_millis(300);

/// A bus under test, and what a test needs to know about its timing.
struct Harness {
    bus: Arc<dyn Bus>,
    /// How long after an unacked delivery is dropped it may take to come back.
    redelivery: Duration,
    #[cfg(feature = "nats")]
    _server: Option<switchboard_testkit::nats::NatsServer>,
}

fn in_process() -> Harness {
    Harness {
        bus: Arc::new(InProcessBus::new(16)),
        redelivery: Duration::ZERO,
        #[cfg(feature = "nats")]
        _server: None,
    }
}

async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut).await.unwrap_or_else(|_| panic!("timed out after {limit:?}: {what}"))
}

async fn take(deliveries: &mut Deliveries) -> Delivery {
    within(PATIENCE, "waiting for a delivery", deliveries.next()).await.expect("stream ended").expect("delivery failed")
}

/// Asserts that nothing is delivered for `quiet`.
async fn assert_nothing(deliveries: &mut Deliveries, quiet: Duration) {
    if let Ok(Some(extra)) = tokio::time::timeout(quiet, deliveries.next()).await {
        panic!("unexpected delivery: {extra:?}");
    }
}

fn inbound(chat: &str, content: &str) -> InboundMessage {
    InboundMessage::user("telegram", chat, Sender { id: "u1".into(), name: "Ann".into(), is_bot: false }, content)
}

fn outbound(channel: &str, chat: &str, content: &str) -> OutboundMessage {
    OutboundMessage {
        id: switchboard_channels::contract::new_id(),
        channel: channel.into(),
        chat_id: chat.into(),
        content: content.into(),
        ..OutboundMessage::default()
    }
}

fn content_of(delivery: &Delivery) -> String {
    delivery.decode::<InboundMessage>().expect("inbound JSON").content
}

async fn publish(h: &Harness, msg: &InboundMessage) {
    within(PATIENCE, "publishing", h.bus.publish_inbound(msg)).await.expect("publish");
}

// ---------------------------------------------------------------------------------------------
// Behaviours shared by every bus.

async fn ack_removes_the_message(h: Harness) {
    let mut deliveries = h.bus.inbound().await.expect("inbound");
    publish(&h, &inbound("c1", "hello")).await;
    let first = take(&mut deliveries).await;
    assert_eq!((content_of(&first), first.attempt), ("hello".to_owned(), 1));
    within(PATIENCE, "ack", first.ack()).await.expect("ack");
    assert_nothing(&mut deliveries, h.redelivery + QUIET).await;
}

async fn nak_redelivers_with_next_attempt(h: Harness) {
    let mut deliveries = h.bus.inbound().await.expect("inbound");
    publish(&h, &inbound("c1", "again")).await;
    let first = take(&mut deliveries).await;
    within(PATIENCE, "nak", first.nak(None)).await.expect("nak");
    let second = take(&mut deliveries).await;
    assert_eq!((content_of(&second), second.attempt), ("again".to_owned(), 2));
    let delay = Duration::from_millis(300);
    within(PATIENCE, "nak with delay", second.nak(Some(delay))).await.expect("nak");
    let naked_at = std::time::Instant::now();
    let third = take(&mut deliveries).await;
    assert!(naked_at.elapsed() >= delay - Duration::from_millis(50), "redelivered before the delay");
    assert_eq!(third.attempt, 3);
    within(PATIENCE, "ack", third.ack()).await.expect("ack");
}

async fn progress_keeps_the_delivery(h: Harness) {
    let mut a = h.bus.inbound().await.expect("inbound a");
    let mut b = h.bus.inbound().await.expect("inbound b");
    publish(&h, &inbound("c1", "long run")).await;
    let held = take(&mut a).await;
    let tick = (h.redelivery / 4).max(Duration::from_millis(50));
    let keep_alive = async {
        loop {
            tokio::time::sleep(tick).await;
            within(PATIENCE, "progress", held.progress()).await.expect("progress");
        }
    };
    // Two redelivery periods pass without the message going to the other subscriber.
    tokio::select! {
        extra = b.next() => panic!("redelivered despite progress: {extra:?}"),
        () = keep_alive => unreachable!(),
        () = tokio::time::sleep(h.redelivery * 2 + QUIET) => {}
    }
    within(PATIENCE, "ack", held.ack()).await.expect("ack");
}

async fn dropped_delivery_is_redelivered(h: Harness) {
    let mut deliveries = h.bus.inbound().await.expect("inbound");
    publish(&h, &inbound("c1", "crash")).await;
    drop(take(&mut deliveries).await);
    let again = within(h.redelivery + PATIENCE, "redelivery", deliveries.next())
        .await
        .expect("stream ended")
        .expect("delivery");
    assert_eq!((content_of(&again), again.attempt), ("crash".to_owned(), 2));
    within(PATIENCE, "ack", again.ack()).await.expect("ack");
}

async fn duplicate_publish_is_delivered_once(h: Harness) {
    let mut deliveries = h.bus.inbound().await.expect("inbound");
    let msg = inbound("c1", "once");
    publish(&h, &msg).await;
    publish(&h, &msg).await;
    // Same id in the other flow is another message.
    let reply = OutboundMessage { id: msg.id.clone(), ..outbound("telegram", "c1", "reply") };
    within(PATIENCE, "publish outbound", h.bus.publish_outbound(&reply)).await.expect("publish");
    within(PATIENCE, "ack", take(&mut deliveries).await.ack()).await.expect("ack");
    assert_nothing(&mut deliveries, QUIET).await;
    let mut out = h.bus.outbound("telegram").await.expect("outbound");
    assert_eq!(take(&mut out).await.decode::<OutboundMessage>().expect("json").content, "reply");
}

/// A batch (a chat platform's getUpdates answer) arrives whole, each message once, and each
/// chat's messages in the order given.
async fn a_batch_is_delivered_once_in_order_per_chat(h: Harness) {
    let mut deliveries = h.bus.inbound().await.expect("inbound");
    let mut batch: Vec<InboundMessage> =
        (0..15).map(|n| inbound(&format!("c{}", n % 3), &format!("c{} #{}", n % 3, n / 3))).collect();
    batch.insert(7, batch[2].clone());
    within(PATIENCE, "publishing a batch", h.bus.publish_inbound_many(&batch)).await.expect("publish");
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..15 {
        let delivery = take(&mut deliveries).await;
        seen.push(content_of(&delivery));
        within(PATIENCE, "ack", delivery.ack()).await.expect("ack");
    }
    assert_nothing(&mut deliveries, QUIET).await;
    for chat in ["c0", "c1", "c2"] {
        let of_chat: Vec<&String> = seen.iter().filter(|content| content.starts_with(chat)).collect();
        let expected: Vec<String> = (0..5).map(|n| format!("{chat} #{n}")).collect();
        assert_eq!(of_chat, expected.iter().collect::<Vec<_>>(), "all delivered: {seen:?}");
    }
}

async fn subscribers_share_the_work(h: Harness) {
    let mut a = h.bus.inbound().await.expect("inbound a");
    let mut b = h.bus.inbound().await.expect("inbound b");
    let sent: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    for content in &sent {
        publish(&h, &inbound("c1", content)).await;
    }
    // While `a` holds one message unacked, `b` must get another one.
    let (first_a, first_b) = (take(&mut a).await, take(&mut b).await);
    assert_ne!(content_of(&first_a), content_of(&first_b));
    let mut seen = vec![content_of(&first_a), content_of(&first_b)];
    within(PATIENCE, "ack", first_a.ack()).await.expect("ack");
    within(PATIENCE, "ack", first_b.ack()).await.expect("ack");
    while seen.len() < sent.len() {
        let next = within(PATIENCE, "draining", futures_util::future::select(a.next(), b.next())).await;
        let delivery = next.factor_first().0.expect("stream ended").expect("delivery");
        seen.push(content_of(&delivery));
        within(PATIENCE, "ack", delivery.ack()).await.expect("ack");
    }
    assert_nothing(&mut a, QUIET).await;
    assert_nothing(&mut b, QUIET).await;
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), sent.len(), "a message went to two subscribers: {seen:?}");
    assert_eq!(unique, sent.iter().collect());
}

async fn outbound_is_isolated_per_channel(h: Harness) {
    let mut telegram = h.bus.outbound("telegram").await.expect("outbound telegram");
    let mut discord = h.bus.outbound("discord").await.expect("outbound discord");
    for msg in [outbound("discord", "d1", "for discord"), outbound("telegram", "t1", "for telegram")] {
        within(PATIENCE, "publish", h.bus.publish_outbound(&msg)).await.expect("publish");
    }
    let got = take(&mut telegram).await;
    assert_eq!(got.decode::<OutboundMessage>().expect("json").content, "for telegram");
    within(PATIENCE, "ack", got.ack()).await.expect("ack");
    assert_nothing(&mut telegram, QUIET).await;
    let got = take(&mut discord).await;
    assert_eq!(got.decode::<OutboundMessage>().expect("json").content, "for discord");
    within(PATIENCE, "ack", got.ack()).await.expect("ack");
}

fn event(channel: &str, chat: &str, run_id: &str) -> RunEvent {
    RunEvent {
        v: 1,
        run_id: run_id.into(),
        session_key: format!("{channel}:{chat}"),
        channel: channel.into(),
        chat_id: chat.into(),
        inbound_id: None,
        thread_id: None,
        reply_to: None,
        at: chrono::Utc::now(),
        body: RunEventBody::Chunk { text: "hi".into() },
    }
}

async fn events_are_filtered_by_chat(h: Harness) {
    let mut one_chat = h.bus.events("api", Some("me")).await.expect("events");
    let mut all_chats = h.bus.events("api", None).await.expect("events");
    for ev in [event("api", "other", "r-other"), event("web", "me", "r-web")] {
        within(PATIENCE, "publish event", h.bus.publish_event(&ev)).await.expect("publish");
    }
    let garbage = Bytes::from_static(b"not json");
    within(PATIENCE, "publish", h.bus.publish_raw(Flow::Events, "api", "me", None, garbage)).await.expect("publish");
    within(PATIENCE, "publish event", h.bus.publish_event(&event("api", "me", "r-me"))).await.expect("publish");
    let got = within(PATIENCE, "event", one_chat.next()).await.expect("events ended");
    assert_eq!(got.run_id, "r-me", "the undecodable event and other chats are skipped");
    assert_eq!(got.body, RunEventBody::Chunk { text: "hi".into() });
    for want in ["r-other", "r-me"] {
        assert_eq!(within(PATIENCE, "event", all_chats.next()).await.expect("events ended").run_id, want);
    }
}

async fn dead_letters_are_kept_with_reason(h: Harness) {
    let letter = |n: u32| DeadLetter {
        subject: format!("switchboard.in.telegram.c{n}"),
        reason: format!("bad JSON {n}"),
        payload: "{".into(),
        ..DeadLetter::default()
    };
    for (flow, n) in [(Flow::In, 1), (Flow::Out, 2), (Flow::In, 3)] {
        within(PATIENCE, "dead letter", h.bus.dead_letter(flow, &letter(n))).await.expect("dead letter");
    }
    let all = within(PATIENCE, "dead letters", h.bus.dead_letters(Flow::In, 10)).await.expect("read");
    let fields = |l: &DeadLetter| (l.subject.clone(), l.reason.clone(), l.payload.clone());
    assert_eq!(
        all.iter().map(fields).collect::<Vec<_>>(),
        [letter(1), letter(3)].iter().map(fields).collect::<Vec<_>>()
    );
    let last = within(PATIENCE, "dead letters", h.bus.dead_letters(Flow::In, 1)).await.expect("read");
    assert_eq!(last.iter().map(|l| l.reason.as_str()).collect::<Vec<_>>(), ["bad JSON 3"]);
    let out = within(PATIENCE, "dead letters", h.bus.dead_letters(Flow::Out, 10)).await.expect("read");
    assert_eq!(out.iter().map(|l| l.reason.as_str()).collect::<Vec<_>>(), ["bad JSON 2"]);
}

async fn odd_chat_ids_round_trip(h: Harness) {
    let ids = ["a.b", "with space", "*", ">", "a.*.>", "ünïcødé 😀", "", "~~", "$SYS"];
    let mut deliveries = h.bus.inbound().await.expect("inbound");
    for id in ids {
        publish(&h, &inbound(id, id)).await;
    }
    let subjects = Subjects::new(DEFAULT_PREFIX).expect("prefix");
    let mut got = HashSet::new();
    for _ in ids {
        let delivery = take(&mut deliveries).await;
        let (flow, channel, chat) = subjects.parse_chat(&delivery.subject).expect("parsable subject");
        let msg: InboundMessage = delivery.decode().expect("json");
        assert_eq!((flow, channel.as_str(), chat.as_str()), (Flow::In, "telegram", msg.chat_id.as_str()));
        got.insert(chat);
        within(PATIENCE, "ack", delivery.ack()).await.expect("ack");
    }
    assert_eq!(got, ids.iter().map(|s| (*s).to_owned()).collect());
}

/// An id too long for a subject is refused before anything is sent, with an error that says
/// trying again will not help; the bus stays usable and nothing of the refused message arrives.
async fn over_long_ids_are_refused_as_permanent(h: Harness) {
    use switchboard_channels::contract::{MAX_CHANNEL_BYTES, MAX_CHAT_ID_BYTES, MAX_MESSAGE_ID_BYTES};
    let mut deliveries = h.bus.inbound().await.expect("inbound");
    let long_chat = "x".repeat(4016);
    let err = h.bus.publish_inbound(&inbound(&long_chat, "too long")).await.expect_err("refused");
    assert!(err.is_permanent(), "{err}");
    assert!(err.to_string().contains(&format!("limit is {MAX_CHAT_ID_BYTES} bytes")), "{err}");
    let reply = OutboundMessage { id: "o1".into(), channel: "api".into(), chat_id: long_chat, ..Default::default() };
    assert!(h.bus.publish_outbound(&reply).await.expect_err("refused").is_permanent());
    let mut long_channel = inbound("c", "x");
    long_channel.channel = "c".repeat(MAX_CHANNEL_BYTES + 1);
    assert!(h.bus.publish_inbound(&long_channel).await.expect_err("refused").is_permanent());
    let mut long_id = inbound("c", "x");
    long_id.id = "i".repeat(MAX_MESSAGE_ID_BYTES + 1);
    assert!(h.bus.publish_inbound(&long_id).await.expect_err("refused").is_permanent());
    // At the limit, every byte escaped in the subject: accepted and delivered.
    let at_limit = "é".repeat(MAX_CHAT_ID_BYTES / 2);
    publish(&h, &inbound(&at_limit, "just fits")).await;
    let delivery = take(&mut deliveries).await;
    assert_eq!(delivery.decode::<InboundMessage>().expect("json").content, "just fits");
    within(PATIENCE, "ack", delivery.ack()).await.expect("ack");
    assert_nothing(&mut deliveries, QUIET).await;
}

macro_rules! shared_suite {
    ($($behaviour:ident),* $(,)?) => {
        mod in_process_bus {
            $(#[tokio::test] async fn $behaviour() { super::$behaviour(super::in_process()).await })*
        }
        #[cfg(feature = "nats")]
        mod nats_bus {
            $(#[tokio::test] async fn $behaviour() { super::$behaviour(super::nats::harness().await).await })*
        }
    };
}

shared_suite!(
    ack_removes_the_message,
    nak_redelivers_with_next_attempt,
    progress_keeps_the_delivery,
    dropped_delivery_is_redelivered,
    duplicate_publish_is_delivered_once,
    a_batch_is_delivered_once_in_order_per_chat,
    subscribers_share_the_work,
    outbound_is_isolated_per_channel,
    events_are_filtered_by_chat,
    dead_letters_are_kept_with_reason,
    odd_chat_ids_round_trip,
    over_long_ids_are_refused_as_permanent,
);

// ---------------------------------------------------------------------------------------------
// In-process bus only.

#[tokio::test]
async fn memory_full_queue_makes_publishers_wait() {
    let bus = Arc::new(InProcessBus::new(2));
    let mut deliveries = bus.inbound().await.expect("inbound");
    for n in 0..2 {
        within(PATIENCE, "publish", bus.publish_inbound(&inbound("c", &format!("m{n}")))).await.expect("publish");
    }
    let third = tokio::spawn({
        let bus = Arc::clone(&bus);
        async move { bus.publish_inbound(&inbound("c", "m2")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!third.is_finished(), "the third publish did not wait for room");
    let first = take(&mut deliveries).await;
    within(PATIENCE, "third publish", third).await.expect("task").expect("publish");
    within(PATIENCE, "ack", first.ack()).await.expect("ack");
}

#[tokio::test]
async fn memory_cancelled_publish_can_be_retried() {
    let bus = InProcessBus::new(1);
    let mut deliveries = bus.inbound().await.expect("inbound");
    bus.publish_inbound(&inbound("c", "fills the queue")).await.expect("publish");
    let msg = inbound("c", "retried");
    let cancelled = tokio::time::timeout(Duration::from_millis(100), bus.publish_inbound(&msg)).await;
    assert!(cancelled.is_err(), "the publish should have waited for room");
    within(PATIENCE, "ack", take(&mut deliveries).await.ack()).await.expect("ack");
    within(PATIENCE, "retry", bus.publish_inbound(&msg)).await.expect("publish");
    assert_eq!(content_of(&take(&mut deliveries).await), "retried");
}

#[tokio::test]
async fn memory_deliveries_end_when_the_bus_is_dropped() {
    let bus = InProcessBus::new(4);
    let mut deliveries = bus.inbound().await.expect("inbound");
    drop(bus);
    assert!(within(PATIENCE, "end of stream", deliveries.next()).await.is_none());
}

// ---------------------------------------------------------------------------------------------
// NATS only.

#[cfg(feature = "nats")]
#[path = "bus_suite/nats.rs"]
mod nats;
