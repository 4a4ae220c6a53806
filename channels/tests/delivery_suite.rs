#![cfg(any(feature = "telegram", feature = "discord"))]
//! One suite for the shared delivery core (`switchboard_channels::delivery`): each behaviour is
//! a generic async function run once against the fake Telegram Bot API and once against the
//! fake Discord, wired the way each channel's `start` wires its outbound and live tasks (replies
//! from a real `InProcessBus`). What only one platform does (Telegram's HTML and its fallbacks,
//! Discord's 2000-character limit and nonces, …) is tested in `delivery_suite/<platform>.rs`.
//!
//! Waits are on the fake's recorded calls, under timeouts. Where a test proves that something
//! was *not* sent, it waits for a signal that the thing would have happened by then: the
//! deliveries it published were all settled (acked or naked: see [`Settled`]), a later
//! message to the same chat arrived (messages of one chat are delivered in order), or another
//! run's typing ticked on.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed unwrap is a failed test")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::json;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::bus::{Acker, Events};
use switchboard_channels::contract::{RunEventBody, Usage};
use switchboard_channels::subject::Flow;
use switchboard_channels::{Bus, BusError, BusExt, Deliveries, Delivery, OutboundMessage, RunEvent};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const PATIENCE: Duration = Duration::from_secs(4);
/// Typing repeats this often in these tests.
const TYPING_INTERVAL: Duration = Duration::from_millis(100);
/// How many typing intervals a stopped run is watched for further typing.
const TYPING_TICKS_WATCHED: usize = 4;

/// A message the fake recorded as sent, in the terms both platforms share.
#[derive(Debug, Clone, PartialEq)]
struct Sent {
    /// Where it landed: the chat, or a thread of it (see [`FakePlatform::THREAD_PLACE`]).
    place: String,
    id: u64,
    /// The message it quotes (Telegram) or references (Discord).
    quote: Option<u64>,
    /// Its text exactly as sent, markup included.
    text: String,
    /// How the text is marked up, when the platform is told (Telegram's `parse_mode`).
    format: Option<String>,
    /// Whether the quoted author is notified, when the platform is told (Discord's
    /// `allowed_mentions.replied_user`).
    notifies_quoted: Option<bool>,
}

/// An edit of a sent message the fake recorded (answered or failed).
#[derive(Debug, Clone)]
struct Edit {
    at: Instant,
    place: String,
    message: u64,
    text: String,
    format: Option<String>,
    failed: bool,
}

/// A failure the fake answers a send with.
#[derive(Debug, Clone, Copy)]
enum Trouble {
    /// A server error, retried after a short backoff.
    ServerError,
    /// A refusal no retry changes (the bot blocked, permissions missing).
    Refusal,
    /// A failure that holds the chat's sending back for about a second.
    Holdup,
}

/// One platform's fake, as the shared suite drives it.
trait FakePlatform: Sized + 'static {
    /// The channel's name on the bus.
    const CHANNEL: &'static str;
    const GROUP: &'static str;
    const PRIVATE: &'static str;
    /// A thread (forum topic) of `GROUP`.
    const THREAD: &'static str;
    /// Where a message to `THREAD` lands, as [`Sent::place`] says it.
    const THREAD_PLACE: &'static str;
    /// What stands between the chat and the thread in a session key.
    const THREAD_IN_KEY: &'static str;
    /// A chat id the platform cannot send to.
    const UNADDRESSABLE: &'static str;
    /// The format a reply's Markdown is sent in, and how it shows bold text.
    const MARKUP: Option<&'static str>;
    const BOLD: [&'static str; 2];
    /// [`Sent::notifies_quoted`] of a quoting reply or draft.
    const QUOTE_NOTIFIES: Option<bool>;

    async fn start() -> Self;
    /// Spawns the channel's outbound and live tasks against this fake.
    fn spawn(&self, tasks: Tasks);

    fn sent(&self) -> Vec<Sent>;
    /// Calls to the send method, failed ones included.
    fn send_calls(&self) -> usize;
    /// Makes the next send(s) fail; returns how many calls will fail.
    fn fail_next_send(&self, trouble: Trouble) -> usize;
    /// Makes the next edit fail in a way that ends the streamed draft.
    fn break_next_edit(&self);
    fn edit_calls(&self) -> Vec<Edit>;
    /// The messages deleted, as (place, id).
    fn deleted(&self) -> Vec<(String, u64)>;
    /// The places of the typing indications sent.
    fn typing(&self) -> Vec<String>;
}

/// What the channel's outbound and live tasks take.
struct Tasks {
    /// Drafts are streamed, edited at most this often, and typing is off; without it, typing
    /// repeats every [`TYPING_INTERVAL`].
    stream_interval: Option<Duration>,
    replies: Deliveries,
    events: Events,
    shutdown: CancellationToken,
}

/// Counts the deliveries the outbound side settled (acked or naked), so that a test can wait
/// until everything it published was handled before it asserts that something was not sent.
struct Settled {
    inner: Box<dyn Acker>,
    count: watch::Sender<usize>,
}

#[async_trait]
impl Acker for Settled {
    async fn ack(&mut self) -> Result<(), BusError> {
        let result = self.inner.ack().await;
        self.count.send_modify(|n| *n += 1);
        result
    }

    async fn nak(&mut self, delay: Option<Duration>) -> Result<(), BusError> {
        let result = self.inner.nak(delay).await;
        self.count.send_modify(|n| *n += 1);
        result
    }

    async fn progress(&self) -> Result<(), BusError> {
        self.inner.progress().await
    }
}

fn counting_settled(replies: Deliveries, count: watch::Sender<usize>) -> Deliveries {
    replies
        .map(move |delivery| {
            let (info, inner) = delivery?.into_parts();
            let acker = Settled { inner, count: count.clone() };
            Ok(Delivery::new(info.subject, info.payload, info.attempt, Box::new(acker)))
        })
        .boxed()
}

/// The fake, the bus, and the outbound and live tasks of the channel.
struct Harness<P> {
    fake: P,
    bus: Arc<InProcessBus>,
    settled: watch::Sender<usize>,
    shutdown: CancellationToken,
}

impl<P> Drop for Harness<P> {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start<P: FakePlatform>() -> Harness<P> {
    start_with(None).await
}

/// With drafts streamed, edited at most every `interval_ms`, and typing off.
async fn start_streaming<P: FakePlatform>(interval_ms: u64) -> Harness<P> {
    start_with(Some(Duration::from_millis(interval_ms))).await
}

async fn start_with<P: FakePlatform>(stream_interval: Option<Duration>) -> Harness<P> {
    let fake = P::start().await;
    let bus = Arc::new(InProcessBus::new(64));
    let (settled, shutdown) = (watch::Sender::new(0), CancellationToken::new());
    let replies = counting_settled(bus.outbound(P::CHANNEL).await.unwrap(), settled.clone());
    let events = bus.events(P::CHANNEL, None).await.unwrap();
    fake.spawn(Tasks { stream_interval, replies, events, shutdown: shutdown.clone() });
    Harness { fake, bus, settled, shutdown }
}

/// Polls `ready` until it holds; fails the test after [`PATIENCE`].
async fn until(what: &str, ready: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !ready() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn reply<P: FakePlatform>(id: &str, chat: &str, content: &str) -> OutboundMessage {
    let channel = P::CHANNEL;
    OutboundMessage {
        id: id.into(),
        in_reply_to: Some(format!("{channel}:{chat}:42")),
        channel: channel.into(),
        chat_id: chat.into(),
        content: content.into(),
        reply_to: Some("42".into()),
        ..OutboundMessage::default()
    }
}

fn event<P: FakePlatform>(chat: &str, thread: Option<&str>, body: RunEventBody) -> RunEvent {
    let channel = P::CHANNEL;
    RunEvent {
        v: 1,
        run_id: "run-1".into(),
        session_key: format!(
            "{channel}:{chat}{}",
            thread.map(|t| format!("{}{t}", P::THREAD_IN_KEY)).unwrap_or_default()
        ),
        channel: channel.into(),
        chat_id: chat.into(),
        inbound_id: Some(format!("{channel}:{chat}:42")),
        // As the worker addresses it: the inbound message's thread and platform message id.
        thread_id: thread.map(str::to_owned),
        reply_to: Some("42".into()),
        at: chrono::Utc::now(),
        body,
    }
}

fn chunk<P: FakePlatform>(chat: &str, text: &str) -> RunEvent {
    event::<P>(chat, None, RunEventBody::Chunk { text: text.into() })
}

fn texts(sent: &[Sent]) -> Vec<&str> {
    sent.iter().map(|m| m.text.as_str()).collect()
}

impl<P: FakePlatform> Harness<P> {
    async fn publish(&self, msg: &OutboundMessage) {
        self.bus.publish_outbound(msg).await.unwrap();
    }

    async fn publish_raw(&self, chat: &str, payload: Bytes) {
        self.bus.publish_raw(Flow::Out, P::CHANNEL, chat, None, payload).await.unwrap();
    }

    async fn emit(&self, event: &RunEvent) {
        self.bus.publish_event(event).await.unwrap();
    }

    /// Waits until `n` messages were sent successfully, and returns them.
    async fn sent(&self, n: usize) -> Vec<Sent> {
        until(&format!("{n} sent messages"), || self.fake.sent().len() >= n).await;
        self.fake.sent()
    }

    /// Waits until the outbound side settled `n` deliveries.
    async fn settled(&self, n: usize) {
        let mut settled = self.settled.subscribe();
        let waited =
            tokio::time::timeout(PATIENCE, settled.wait_for(|count| *count >= n)).await.is_ok_and(|w| w.is_ok());
        assert!(waited, "{} of {n} deliveries settled", *settled.borrow());
    }

    async fn edit_calls(&self, n: usize) -> Vec<Edit> {
        until(&format!("{n} edits"), || self.fake.edit_calls().len() >= n).await;
        self.fake.edit_calls()
    }

    fn typing_in(&self, place: &str) -> usize {
        self.fake.typing().iter().filter(|typed| *typed == place).count()
    }

    /// Proves that typing in `place` stopped: a run started in `witness` (another chat) types
    /// [`TYPING_TICKS_WATCHED`] more times, one typing interval after another, while `place`
    /// types no more.
    async fn assert_typing_stopped(&self, place: &str, witness: &str) {
        self.emit(&event::<P>(witness, None, RunEventBody::Started)).await;
        // By the witness's third call, a call to `place` already on its way has landed.
        until("the witness typing", || self.typing_in(witness) >= 3).await;
        let stopped_at = self.typing_in(place);
        until("the witness typing on", || self.typing_in(witness) >= 3 + TYPING_TICKS_WATCHED).await;
        assert_eq!(self.typing_in(place), stopped_at, "typing went on in {place}");
    }
}

// ---------------------------------------------------------------------------------------------
// Replies.

async fn a_thread_reply_quotes_the_trigger_in_its_thread<P: FakePlatform>() {
    let h = start::<P>().await;
    h.publish(&OutboundMessage { thread_id: Some(P::THREAD.into()), ..reply::<P>("r1", P::GROUP, "hello group") })
        .await;
    let sent = h.sent(1).await;
    assert_eq!(sent[0].place, P::THREAD_PLACE);
    assert_eq!(sent[0].quote, Some(42));
    assert_eq!(sent[0].text, "hello group");
}

async fn a_private_reply_does_not_quote<P: FakePlatform>() {
    let h = start::<P>().await;
    h.publish(&reply::<P>("r1", P::PRIVATE, "hello you")).await;
    let sent = h.sent(1).await;
    assert_eq!(sent[0].place, P::PRIVATE, "in the chat itself, no thread");
    assert_eq!(sent[0].quote, None);
    assert_eq!(sent[0].text, "hello you");
}

async fn server_errors_are_retried_and_the_message_sent_once<P: FakePlatform>() {
    let h = start::<P>().await;
    let failing = h.fake.fail_next_send(Trouble::ServerError);
    h.publish(&reply::<P>("r1", P::PRIVATE, "eventually")).await;
    h.publish(&reply::<P>("r2", P::PRIVATE, "barrier")).await;
    let sent = h.sent(2).await;
    assert_eq!(texts(&sent), ["eventually", "barrier"]);
    assert_eq!(h.fake.send_calls(), failing + 2);
}

async fn a_redelivered_reply_is_not_sent_twice<P: FakePlatform>() {
    let h = start::<P>().await;
    let msg = reply::<P>("run-1:reply", P::PRIVATE, "only once");
    h.publish(&msg).await;
    h.sent(1).await;
    // The same id again, past the bus's own publish dedupe: as after a worker's redelivery.
    h.publish_raw(P::PRIVATE, Bytes::from(serde_json::to_vec(&msg).unwrap())).await;
    h.publish(&reply::<P>("r2", P::PRIVATE, "barrier")).await;
    let sent = h.sent(2).await;
    h.settled(3).await;
    assert_eq!(texts(&h.fake.sent()), ["only once", "barrier"], "{sent:#?}");
}

async fn suppressed_empty_and_unaddressable_replies_send_nothing<P: FakePlatform>() {
    let h = start::<P>().await;
    let mut suppressed = reply::<P>("r1", P::PRIVATE, "");
    suppressed.metadata.insert("suppressed".into(), json!(true));
    h.publish(&suppressed).await;
    h.publish(&reply::<P>("r2", P::PRIVATE, "   ")).await;
    h.publish(&reply::<P>("r3", P::UNADDRESSABLE, "lost")).await;
    h.publish_raw(P::PRIVATE, Bytes::from_static(b"{not json")).await;
    h.publish(&reply::<P>("r4", P::PRIVATE, "barrier")).await;
    // The unaddressable one is another chat's, so the barrier does not order it: all five settled.
    h.settled(5).await;
    assert_eq!(h.fake.send_calls(), 1);
    assert_eq!(texts(&h.fake.sent()), ["barrier"]);
}

async fn a_refused_reply_is_given_up_without_retrying<P: FakePlatform>() {
    let h = start::<P>().await;
    h.fake.fail_next_send(Trouble::Refusal);
    h.publish(&reply::<P>("r1", P::GROUP, "unwanted")).await;
    h.publish(&reply::<P>("r2", P::GROUP, "barrier")).await;
    h.sent(1).await;
    h.settled(2).await;
    assert_eq!(texts(&h.fake.sent()), ["barrier"]);
    assert_eq!(h.fake.send_calls(), 2, "the refused message was tried once");
}

async fn a_slow_chat_does_not_hold_up_another<P: FakePlatform>() {
    let h = start::<P>().await;
    h.fake.fail_next_send(Trouble::Holdup);
    h.publish(&reply::<P>("r1", P::GROUP, "slow")).await;
    until("the first send", || h.fake.send_calls() >= 1).await;
    h.publish(&reply::<P>("r2", P::PRIVATE, "fast")).await;
    let sent = h.sent(2).await;
    assert_eq!(texts(&sent), ["fast", "slow"]);
}

// ---------------------------------------------------------------------------------------------
// Typing.

async fn typing_repeats_in_a_thread_while_the_run_lasts_and_stops_when_it_completes<P: FakePlatform>() {
    let h = start::<P>().await;
    h.emit(&event::<P>(P::GROUP, Some(P::THREAD), RunEventBody::Started)).await;
    until("typing 3 times", || h.fake.typing().len() >= 3).await;
    let typing = h.fake.typing();
    assert!(typing.iter().all(|place| place == P::THREAD_PLACE), "{typing:?}");
    let completed = RunEventBody::completed("done", Usage::default(), "m", None);
    h.emit(&event::<P>(P::GROUP, Some(P::THREAD), completed)).await;
    h.assert_typing_stopped(P::THREAD_PLACE, P::PRIVATE).await;
}

async fn typing_stops_when_the_run_fails<P: FakePlatform>() {
    let h = start::<P>().await;
    h.emit(&event::<P>(P::GROUP, None, RunEventBody::Started)).await;
    until("typing twice", || h.typing_in(P::GROUP) >= 2).await;
    h.emit(&event::<P>(P::GROUP, None, RunEventBody::Failed { error: "stopped".into() })).await;
    h.assert_typing_stopped(P::GROUP, P::PRIVATE).await;
}

async fn typing_stops_when_the_reply_is_delivered<P: FakePlatform>() {
    let h = start::<P>().await;
    h.emit(&event::<P>(P::PRIVATE, None, RunEventBody::Started)).await;
    until("typing twice", || h.typing_in(P::PRIVATE) >= 2).await;
    h.publish(&reply::<P>("r1", P::PRIVATE, "here")).await;
    h.sent(1).await;
    h.assert_typing_stopped(P::PRIVATE, P::GROUP).await;
}

// ---------------------------------------------------------------------------------------------
// Streamed drafts.

async fn a_streamed_reply_is_edited_in_place_and_finished_as_the_reply<P: FakePlatform>() {
    let h = start_streaming::<P>(300).await;
    let words = ["Hello", " there", ", this", " is", " **a", " streamed**", " reply"];
    for _ in 0..3 {
        for word in words {
            h.emit(&chunk::<P>(P::GROUP, word)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let streamed = h.edit_calls(2).await.len();
    h.publish(&reply::<P>("r1", P::GROUP, "Hello there, this is **a streamed** reply")).await;
    let edits = h.edit_calls(streamed + 1).await;

    let sent = h.fake.sent();
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0].quote, Some(42), "a draft quotes like the reply");
    assert_eq!(sent[0].notifies_quoted, P::QUOTE_NOTIFIES);
    assert_eq!(sent[0].format, None, "a draft is plain text");
    assert!(edits.iter().all(|edit| !edit.failed), "{edits:#?}");
    let (last, streaming_edits) = edits.split_last().unwrap();
    for pair in streaming_edits.windows(2) {
        assert!(pair[1].at.duration_since(pair[0].at) >= Duration::from_millis(280), "edits too close");
    }
    assert_eq!((last.place.as_str(), last.message), (P::GROUP, sent[0].id));
    assert_eq!(last.format.as_deref(), P::MARKUP);
    let [open, close] = P::BOLD;
    assert_eq!(last.text, format!("Hello there, this is {open}a streamed{close} reply"));
}

async fn a_failed_stream_edit_falls_back_to_a_normal_reply<P: FakePlatform>() {
    let h = start_streaming::<P>(200).await;
    h.fake.break_next_edit();
    h.emit(&chunk::<P>(P::GROUP, "Draft")).await;
    h.sent(1).await;
    h.emit(&chunk::<P>(P::GROUP, " text")).await;
    h.edit_calls(1).await;
    h.emit(&chunk::<P>(P::GROUP, " more")).await;
    h.publish(&reply::<P>("r1", P::GROUP, "Final **text**")).await;
    let sent = h.sent(2).await;
    until("the draft deleted", || !h.fake.deleted().is_empty()).await;
    h.settled(1).await;

    let [open, close] = P::BOLD;
    assert_eq!(texts(&sent), ["Draft".to_owned(), format!("Final {open}text{close}")]);
    assert_eq!(sent[0].quote, Some(42), "a draft quotes like the reply");
    assert_eq!(sent[1].quote, Some(42));
    assert_eq!(h.fake.deleted(), [(P::GROUP.to_owned(), sent[0].id)]);
    let edits = h.fake.edit_calls();
    assert!(edits.len() == 1 && edits[0].failed, "no edits after the failed one: {edits:#?}");
}

/// Runs each shared behaviour against one platform's fake, as `mod shared` of the platform's
/// module (tests named `telegram::shared::…`, `discord::shared::…`).
macro_rules! shared_suite {
    ($fake:ident) => {
        shared_suite!($fake:
            a_thread_reply_quotes_the_trigger_in_its_thread,
            a_private_reply_does_not_quote,
            server_errors_are_retried_and_the_message_sent_once,
            a_redelivered_reply_is_not_sent_twice,
            suppressed_empty_and_unaddressable_replies_send_nothing,
            a_refused_reply_is_given_up_without_retrying,
            a_slow_chat_does_not_hold_up_another,
            typing_repeats_in_a_thread_while_the_run_lasts_and_stops_when_it_completes,
            typing_stops_when_the_run_fails,
            typing_stops_when_the_reply_is_delivered,
            a_streamed_reply_is_edited_in_place_and_finished_as_the_reply,
            a_failed_stream_edit_falls_back_to_a_normal_reply,
        );
    };
    ($fake:ident: $($behaviour:ident),* $(,)?) => {
        mod shared {
            $(#[tokio::test] async fn $behaviour() { crate::$behaviour::<super::$fake>().await })*
        }
    };
}

#[cfg(feature = "telegram")]
#[path = "delivery_suite/telegram.rs"]
mod telegram;

#[cfg(feature = "discord")]
#[path = "delivery_suite/discord.rs"]
mod discord;
