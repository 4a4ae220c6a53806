//! The message bus: how adapters and workers reach each other.
//!
//! Two implementations pass one behaviour suite (`tests/bus_suite.rs`): [`in_process::InProcessBus`]
//! for the embedded single-process shape and `nats::NatsBus` (feature `nats`) on JetStream
//! for the distributed shape. Callers see only this trait.
//!
//! Inbound and outbound messages are work queues with explicit acknowledgement: each delivery
//! goes to one consumer, which must [`Delivery::ack`] it once it is done with it, or
//! [`Delivery::nak`] it to have it delivered again. A delivery dropped without either is
//! delivered again too. Events are fire-and-forget broadcasts for live views.

pub mod in_process;
pub mod journal;
#[cfg(feature = "nats")]
pub mod nats;
pub mod order;
mod recent;
pub mod screen;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::contract::{DeadLetter, InboundMessage, MAX_MESSAGE_ID_BYTES, OutboundMessage, RunEvent};
use crate::subject::{Flow, SubjectError};
pub use journal::StoreJournal;
pub use order::{StoredInbound, StreamOrder};

#[derive(Debug, Error)]
pub enum BusError {
    #[error("cannot connect to the bus at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("the NATS server at {0} has no JetStream; start it with `-js` (nats-server -js)")]
    NoJetStream(String),
    #[error("bus setup failed: {0}")]
    Setup(String),
    #[error("publish to {subject} failed: {reason}")]
    Publish { subject: String, reason: String },
    #[error("receiving from the bus failed: {0}")]
    Receive(String),
    #[error("acknowledging a delivery failed: {0}")]
    Ack(String),
    #[error("cannot encode message: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(transparent)]
    Subject(#[from] SubjectError),
    #[error("the bus refuses a message for {subject}: {reason}")]
    Refused { subject: String, reason: String },
    #[error("a message of {size} bytes for {subject} exceeds the bus's limit of {max} bytes")]
    TooLarge { subject: String, size: usize, max: usize },
    #[error("the bus is closed")]
    Closed,
}

impl BusError {
    /// True when trying again cannot help: the message itself is what the bus refuses (an id
    /// too long for a subject, a payload over the server's limit). Anything else (a lost
    /// connection, a server restarting) may pass on a later attempt.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            BusError::Encode(_) | BusError::Subject(_) | BusError::Refused { .. } | BusError::TooLarge { .. }
        )
    }
}

/// Refuses ids that cannot travel on the bus: a channel or chat id too long for a subject, or a
/// dedupe id too long for, or not allowed in, a message header. Both buses check the same, so
/// a message the in-process bus takes would also pass on NATS.
pub(crate) fn check_publish(channel: &str, chat_id: &str, dedupe_id: Option<&str>) -> Result<(), BusError> {
    crate::subject::check_ids(channel, chat_id)?;
    let Some(id) = dedupe_id else { return Ok(()) };
    let refused = |reason: String| BusError::Refused { subject: format!("{channel}:{chat_id}"), reason };
    if id.len() > MAX_MESSAGE_ID_BYTES {
        return Err(refused(format!("the message id is {} bytes long; the limit is {MAX_MESSAGE_ID_BYTES}", id.len())));
    }
    // Header values cannot hold line breaks.
    if id.chars().any(char::is_control) {
        return Err(refused("the message id contains control characters".to_owned()));
    }
    Ok(())
}

/// A flow as the metrics name it. Events are never redelivered nor dead-lettered; they would
/// count with outbound.
pub(crate) fn flow_label(flow: Flow) -> crate::meters::FlowLabel {
    match flow {
        Flow::In => crate::meters::FlowLabel::inbound,
        Flow::Out | Flow::Events => crate::meters::FlowLabel::outbound,
    }
}

/// What a consumer does with a delivery when it is finished with it.
#[async_trait]
pub trait Acker: Send + Sync {
    async fn ack(&mut self) -> Result<(), BusError>;
    async fn nak(&mut self, delay: Option<Duration>) -> Result<(), BusError>;
    /// Tells the bus the consumer is still working, so the delivery is not given to another.
    async fn progress(&self) -> Result<(), BusError>;

    /// Whether [`Acker::progress`] tells the bus anything: false where a delivery is never
    /// given to another consumer while it is held (the in-process bus), so the holder need not
    /// keep a timer for it.
    fn needs_progress(&self) -> bool {
        true
    }
}

/// One message taken from an inbound or outbound queue, not yet acknowledged.
pub struct Delivery {
    /// The full subject the message was published on.
    pub subject: String,
    pub payload: Bytes,
    /// 1 on the first delivery, more on redeliveries.
    pub attempt: u64,
    /// The message's position in its stream, on buses that number them (NATS).
    pub stream_seq: Option<u64>,
    acker: Box<dyn Acker>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery").field("subject", &self.subject).field("attempt", &self.attempt).finish()
    }
}

impl Delivery {
    pub fn new(subject: String, payload: Bytes, attempt: u64, acker: Box<dyn Acker>) -> Self {
        Self { subject, payload, attempt, stream_seq: None, acker }
    }

    /// The same delivery, numbered by its stream.
    pub fn with_stream_seq(mut self, seq: u64) -> Self {
        self.stream_seq = Some(seq);
        self
    }

    /// Decodes the payload as JSON.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.payload)
    }

    /// Done: the message is removed from the queue.
    pub async fn ack(mut self) -> Result<(), BusError> {
        self.acker.ack().await
    }

    /// Not done: deliver the message again, after `delay` if given.
    pub async fn nak(mut self, delay: Option<Duration>) -> Result<(), BusError> {
        self.acker.nak(delay).await
    }

    /// Still working on it.
    pub async fn progress(&self) -> Result<(), BusError> {
        self.acker.progress().await
    }

    /// Splits the delivery into its data and its acknowledgement handle, so that a task can
    /// hold the handle (sending progress, then ack or nak) while the data is worked on.
    pub fn into_parts(self) -> (DeliveryInfo, Box<dyn Acker>) {
        let info = DeliveryInfo {
            subject: self.subject,
            payload: self.payload,
            attempt: self.attempt,
            stream_seq: self.stream_seq,
        };
        (info, self.acker)
    }
}

/// The data of a delivery, without its acknowledgement handle.
#[derive(Debug, Clone)]
pub struct DeliveryInfo {
    pub subject: String,
    pub payload: Bytes,
    pub attempt: u64,
    pub stream_seq: Option<u64>,
}

/// A stream of deliveries; it ends when the bus closes.
pub type Deliveries = BoxStream<'static, Result<Delivery, BusError>>;

/// A stream of run events.
pub type Events = BoxStream<'static, RunEvent>;

/// The bus as adapters and workers use it.
#[async_trait]
pub trait Bus: Send + Sync + 'static {
    /// Publishes raw bytes on `<prefix>.<flow>.<channel>.<chat>`. `dedupe_id`, when given, makes
    /// a second publish with the same id within the dedupe window a no-op. Returns once the bus
    /// has durably accepted the message (as durable as this bus gets).
    async fn publish_raw(
        &self,
        flow: Flow,
        channel: &str,
        chat_id: &str,
        dedupe_id: Option<&str>,
        payload: Bytes,
    ) -> Result<(), BusError>;

    /// Publishes several messages of one flow in order, as one write where the bus can (a
    /// chat platform's batch of updates). Returns once all are accepted. On an error some may
    /// have been accepted; publishing them again is safe, as each has its dedupe id.
    async fn publish_raw_many(&self, flow: Flow, messages: Vec<RawMessage>) -> Result<(), BusError> {
        publish_each(self, flow, messages).await
    }

    /// Takes inbound messages of every channel. Several subscribers share the work.
    async fn inbound(&self) -> Result<Deliveries, BusError>;

    /// [`Bus::inbound`] for a consumer that holds up to `capacity` deliveries at once (taken,
    /// not yet acked or nakked). A bus that fetches from a server in batches (NATS) fetches no
    /// more than the consumer has room for, so none waits in a buffer with its `ack_wait`
    /// running; [`Bus::inbound`] fetches one at a time, when it is asked for.
    async fn inbound_within(&self, capacity: usize) -> Result<Deliveries, BusError> {
        let _ = capacity;
        self.inbound().await
    }

    /// Takes outbound messages for one channel. Several subscribers share the work.
    async fn outbound(&self, channel: &str) -> Result<Deliveries, BusError>;

    /// [`Bus::outbound`] for a consumer that holds up to `capacity` deliveries at once.
    async fn outbound_within(&self, channel: &str, capacity: usize) -> Result<Deliveries, BusError> {
        let _ = capacity;
        self.outbound(channel).await
    }

    /// Live run events of one channel, optionally of one chat. Best effort: a slow subscriber
    /// may miss events, and events published while nobody listens are gone.
    async fn events(&self, channel: &str, chat_id: Option<&str>) -> Result<Events, BusError>;

    /// Sets aside a message that cannot be processed, with the reason.
    async fn dead_letter(&self, flow: Flow, letter: &DeadLetter) -> Result<(), BusError>;

    /// Dead letters published so far that are still kept (newest last), for operators and tests.
    async fn dead_letters(&self, flow: Flow, limit: usize) -> Result<Vec<DeadLetter>, BusError>;

    /// This bus as one whose journal is the store's database (the in-process bus of the
    /// embedded shape, with its journal), for a consumer that commits its work and the bus's
    /// writes in one transaction. `None` on other buses.
    fn store_journal(self: Arc<Self>) -> Option<Arc<dyn StoreJournal>> {
        None
    }

    /// This bus as a stream several processes consume (JetStream), for a consumer that keeps
    /// a chat's order across them. `None` on buses that deliver in order by themselves.
    fn stream_order(self: Arc<Self>) -> Option<Arc<dyn StreamOrder>> {
        None
    }

    /// What this bus keeps in this process's memory, for the metrics endpoint. Nothing on
    /// buses whose state lives on a server.
    fn gauges(&self) -> Vec<crate::Gauge> {
        Vec::new()
    }

    /// How many messages wait on the bus's server (stored, not yet acked), for the metrics
    /// endpoint. Nothing on buses that report their queues through [`Bus::gauges`].
    async fn queue_depths(&self) -> Result<Vec<crate::Gauge>, BusError> {
        Ok(Vec::new())
    }

    /// Publishes a run event: encoded for [`Bus::publish_raw`], unless the bus hands events
    /// to its subscribers as they are (the in-process bus).
    async fn publish_event(&self, event: &RunEvent) -> Result<(), BusError> {
        let payload = to_payload(event)?;
        self.publish_raw(Flow::Events, &event.channel, &event.chat_id, None, payload).await
    }
}

/// A message for [`Bus::publish_raw_many`].
#[derive(Debug, Clone)]
pub struct RawMessage {
    pub channel: String,
    pub chat_id: String,
    pub dedupe_id: Option<String>,
    pub payload: Bytes,
}

/// [`Bus::publish_raw_many`] one message at a time, for buses with nothing better.
pub(crate) async fn publish_each<B: Bus + ?Sized>(
    bus: &B,
    flow: Flow,
    messages: Vec<RawMessage>,
) -> Result<(), BusError> {
    for message in messages {
        let dedupe_id = message.dedupe_id.as_deref();
        bus.publish_raw(flow, &message.channel, &message.chat_id, dedupe_id, message.payload).await?;
    }
    Ok(())
}

/// Typed publishing on top of [`Bus::publish_raw`].
#[async_trait]
pub trait BusExt: Bus {
    async fn publish_inbound(&self, msg: &InboundMessage) -> Result<(), BusError> {
        let payload = to_payload(msg)?;
        self.publish_raw(Flow::In, &msg.channel, &msg.chat_id, Some(&msg.id), payload).await
    }

    /// Publishes `msgs` in order, as one write where the bus can (see [`Bus::publish_raw_many`]).
    async fn publish_inbound_many(&self, msgs: &[InboundMessage]) -> Result<(), BusError> {
        let messages = msgs
            .iter()
            .map(|msg| {
                Ok(RawMessage {
                    channel: msg.channel.clone(),
                    chat_id: msg.chat_id.clone(),
                    dedupe_id: Some(msg.id.clone()),
                    payload: to_payload(msg)?,
                })
            })
            .collect::<Result<Vec<_>, BusError>>()?;
        self.publish_raw_many(Flow::In, messages).await
    }

    async fn publish_outbound(&self, msg: &OutboundMessage) -> Result<(), BusError> {
        let payload = to_payload(msg)?;
        self.publish_raw(Flow::Out, &msg.channel, &msg.chat_id, Some(&msg.id), payload).await
    }
}

impl<B: Bus + ?Sized> BusExt for B {}

fn to_payload<T: Serialize>(value: &T) -> Result<Bytes, BusError> {
    Ok(Bytes::from(serde_json::to_vec(value)?))
}
