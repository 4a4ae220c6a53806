//! The NATS JetStream bus of the distributed shape.
//!
//! Inbound and outbound messages go to work-queue streams (`<PREFIX>_IN`, `<PREFIX>_OUT`) and
//! are taken through durable pull consumers with explicit acks, so several processes share the
//! work and an unacked delivery comes back after `ack_wait`. Events are plain core NATS
//! messages: nothing stores them. Dead letters go to a bounded limits stream (`<PREFIX>_DEAD`).
//!
//! Consumers pull in batches of at most what the caller still has room for (its capacity
//! less the deliveries it holds unsettled), one request at a time: a message fetched beyond
//! that would sit in a busy worker's buffer with its `ack_wait` running, and come back to
//! another worker while the first one still has it queued. A caller that names no capacity
//! pulls one message at a time.

mod order;
mod puller;
mod servers;
mod streams;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::message::PublishMessage as Publish;
use async_nats::jetstream::{self, AckKind};
use async_nats::{Client, ConnectErrorKind, ConnectOptions, Event};
use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;

use self::streams::StreamNames;
use super::{Acker, Bus, BusError, Deliveries, Delivery, Events, RawMessage, StoredInbound, StreamOrder};
use crate::contract::{DeadLetter, RunEvent};
use crate::subject::{DEFAULT_PREFIX, Flow, Subjects, encode_token};

/// Dead letters read back per pull request.
const DEAD_LETTER_BATCH: usize = 256;
/// First and longest pause between attempts to reach a server that is not up yet.
const CONNECT_RETRY_MIN: Duration = Duration::from_millis(250);
const CONNECT_RETRY_MAX: Duration = Duration::from_secs(5);

/// How the NATS bus names and tunes its streams and consumers.
#[derive(Debug, Clone)]
pub struct NatsOptions {
    /// Subject prefix; stream names are derived from it (`sb.prod` → `SB_PROD_IN`).
    pub prefix: String,
    /// How long an inbound delivery may stay unacked before JetStream gives it to another
    /// worker. Workers send progress every third of it while they hold a message, so it can be
    /// short, and a dead worker's messages come back soon.
    pub ack_wait: Duration,
    /// The same for outbound deliveries. Adapters send no progress while they deliver a reply
    /// (rate limits may hold one back for a while), so it stays long.
    pub outbound_ack_wait: Duration,
    /// How long a `Nats-Msg-Id` is remembered for deduplication (set when streams are created).
    pub duplicate_window: Duration,
    /// Unacked deliveries per consumer, across all its subscribers.
    pub max_ack_pending: i64,
    /// Deliveries of one outbound message before JetStream stops redelivering it. Inbound
    /// messages are redelivered without limit: a message waiting for an older one of its chat
    /// is handed back many times, and one JetStream stopped delivering would stay in the stream
    /// and hold its chat up for good. Workers ack or dead-letter what they cannot process.
    pub max_deliver: i64,
    /// Durable name of the consumer the workers share.
    pub worker_consumer: String,
    /// How long one pull request waits on the server for a message before it is renewed.
    pub pull_wait: Duration,
    /// How long an outbound message waits for its adapter before the server drops it (zero:
    /// forever). Set on the outbound stream at every start.
    pub outbound_max_age: Duration,
    /// Keep trying while the server cannot be reached at start (a process started before NATS
    /// at boot) instead of failing at once. Wrong credentials or TLS settings still fail at once.
    pub wait_for_server: bool,
}

impl Default for NatsOptions {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            ack_wait: Duration::from_secs(6),
            outbound_ack_wait: Duration::from_secs(30),
            duplicate_window: Duration::from_secs(120),
            max_ack_pending: 20_000,
            max_deliver: 10,
            worker_consumer: "workers".to_owned(),
            pull_wait: Duration::from_secs(5),
            outbound_max_age: Duration::from_secs(3600),
            wait_for_server: true,
        }
    }
}

/// The JetStream bus. Cheap to share behind an `Arc`; the client reconnects by itself.
pub struct NatsBus {
    client: Client,
    js: jetstream::Context,
    subjects: Subjects,
    streams: StreamNames,
    opts: NatsOptions,
}

impl NatsBus {
    /// Connects and creates (or updates) the streams. While the server cannot be reached, tries
    /// again with a log line per failure (unless `opts.wait_for_server` is off); fails at once if
    /// the server refuses us or lacks JetStream. Once connected, the client reconnects by itself.
    pub async fn connect(url: &str, opts: NatsOptions) -> Result<NatsBus, BusError> {
        let subjects = Subjects::new(&opts.prefix)?;
        let shown = redact_url(url);
        let client = connect_client(url, &shown, opts.wait_for_server).await?;
        let js = jetstream::new(client.clone());
        let streams = StreamNames::new(subjects.prefix());
        streams::ensure_streams(&js, &subjects, &streams, &opts, &shown).await?;
        tracing::info!(url = %shown, prefix = %subjects.prefix(), "connected to the NATS bus");
        Ok(NatsBus { client, js, subjects, streams, opts })
    }

    /// The underlying client, for health checks and leases built on the same connection.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The most a message may weigh, headers included: the server's limit, from its INFO.
    fn max_payload(&self) -> usize {
        self.client.server_info().max_payload
    }

    /// Refuses a message the server would refuse, before it is sent.
    fn check_size(&self, subject: &str, payload: usize, dedupe_id: usize) -> Result<(), BusError> {
        // `NATS/1.0\r\nNats-Msg-Id: <id>\r\n\r\n`, with room to spare.
        let size = payload + if dedupe_id > 0 { dedupe_id + 32 } else { 0 };
        let max = self.max_payload();
        if size > max {
            return Err(BusError::TooLarge { subject: subject.to_owned(), size, max });
        }
        Ok(())
    }

    /// Creates the durable consumer, or updates the settings a running one may change.
    async fn consumer(&self, stream: &str, name: &str, filter: String, flow: Flow) -> Result<PullConsumer, BusError> {
        let (ack_wait, max_deliver) = match flow {
            Flow::In => (self.opts.ack_wait, -1),
            _ => (self.opts.outbound_ack_wait, self.opts.max_deliver),
        };
        let config = pull::Config {
            durable_name: Some(name.to_owned()),
            filter_subject: filter,
            ack_policy: AckPolicy::Explicit,
            ack_wait,
            max_ack_pending: self.opts.max_ack_pending,
            max_deliver,
            ..pull::Config::default()
        };
        self.js.create_consumer_on_stream(config, stream).await.map_err(|err| {
            let hint = if err.to_string().contains("workqueue") {
                format!(
                    " (a work-queue stream takes one consumer per subject: list them with `nats consumer ls {stream}`)"
                )
            } else {
                String::new()
            };
            BusError::Setup(format!("cannot create consumer `{name}` on stream {stream}: {err}{hint}"))
        })
    }

    /// The subject to publish on, once the ids and the size pass: checked before anything is
    /// sent, as nats-server drops the connection of a client whose protocol line is too long,
    /// and with it every delivery the process holds.
    fn checked_subject(
        &self,
        flow: Flow,
        channel: &str,
        chat_id: &str,
        dedupe_id: Option<&str>,
        payload_len: usize,
    ) -> Result<String, BusError> {
        super::check_publish(channel, chat_id, dedupe_id)?;
        let subject = self.subjects.chat(flow, channel, chat_id);
        self.check_size(&subject, payload_len, dedupe_id.map_or(0, str::len))?;
        Ok(subject)
    }

    async fn publish_stored(&self, subject: String, publish: Publish) -> Result<(), BusError> {
        let failed = |reason: String| BusError::Publish { subject: subject.clone(), reason };
        let pending = self.js.send_publish(subject.clone(), publish).await.map_err(|e| failed(e.to_string()))?;
        // The publish ack is the durability point: the message is in the stream.
        let ack = pending.await.map_err(|e| failed(e.to_string()))?;
        if ack.duplicate {
            tracing::debug!(%subject, "duplicate publish ignored");
        }
        Ok(())
    }
}

/// A message for a stream, with its dedupe id as JetStream's message id.
fn stored_message(dedupe_id: Option<&str>, payload: Bytes) -> Publish {
    let publish = Publish::build().payload(payload);
    match dedupe_id {
        Some(id) => publish.message_id(id),
        None => publish,
    }
}

/// `messages` in rounds: a chat's first message in the first round, its second in the
/// second, and so on; each round in the order given.
fn rounds_by_chat(messages: Vec<RawMessage>) -> Vec<Vec<RawMessage>> {
    let mut rounds: Vec<Vec<RawMessage>> = Vec::new();
    let mut seen: std::collections::HashMap<(String, String), usize> = std::collections::HashMap::new();
    for message in messages {
        let count = seen.entry((message.channel.clone(), message.chat_id.clone())).or_default();
        if rounds.len() <= *count {
            rounds.push(Vec::new());
        }
        rounds[*count].push(message);
        *count += 1;
    }
    rounds
}

#[async_trait]
impl Bus for NatsBus {
    async fn publish_raw(
        &self,
        flow: Flow,
        channel: &str,
        chat_id: &str,
        dedupe_id: Option<&str>,
        payload: Bytes,
    ) -> Result<(), BusError> {
        let subject = self.checked_subject(flow, channel, chat_id, dedupe_id, payload.len())?;
        if flow == Flow::Events {
            return self
                .client
                .publish(subject.clone(), payload)
                .await
                .map_err(|err| BusError::Publish { subject, reason: err.to_string() });
        }
        self.publish_stored(subject, stored_message(dedupe_id, payload)).await
    }

    async fn publish_raw_many(&self, flow: Flow, messages: Vec<RawMessage>) -> Result<(), BusError> {
        if flow == Flow::Events {
            return super::publish_each(self, flow, messages).await;
        }
        // Sent without waiting for each ack, a round at a time: a round holds at most one
        // message per chat, so a failed publish cannot let a chat's later message in first.
        for round in rounds_by_chat(messages) {
            let mut pending = Vec::with_capacity(round.len());
            for message in round {
                let dedupe_id = message.dedupe_id.as_deref();
                let subject =
                    self.checked_subject(flow, &message.channel, &message.chat_id, dedupe_id, message.payload.len())?;
                let failed = |err: async_nats::jetstream::context::PublishError| BusError::Publish {
                    subject: subject.clone(),
                    reason: err.to_string(),
                };
                let ack = self.js.send_publish(subject.clone(), stored_message(dedupe_id, message.payload)).await;
                pending.push((subject.clone(), ack.map_err(failed)?));
            }
            for (subject, ack) in pending {
                let ack =
                    ack.await.map_err(|err| BusError::Publish { subject: subject.clone(), reason: err.to_string() })?;
                if ack.duplicate {
                    tracing::debug!(%subject, "duplicate publish ignored");
                }
            }
        }
        Ok(())
    }

    async fn inbound(&self) -> Result<Deliveries, BusError> {
        self.inbound_within(1).await
    }

    async fn inbound_within(&self, capacity: usize) -> Result<Deliveries, BusError> {
        // No filter: the stream holds only inbound subjects, and a work-queue stream allows
        // one unfiltered consumer, which all workers share.
        let consumer =
            self.consumer(&self.streams.inbound, &self.opts.worker_consumer, String::new(), Flow::In).await?;
        puller::deliveries(self.js.clone(), consumer, self.opts.pull_wait, capacity).await
    }

    async fn outbound(&self, channel: &str) -> Result<Deliveries, BusError> {
        self.outbound_within(channel, 1).await
    }

    async fn outbound_within(&self, channel: &str, capacity: usize) -> Result<Deliveries, BusError> {
        crate::subject::check_ids(channel, "")?;
        let name = format!("out-{}", encode_token(channel));
        let filter = self.subjects.channel_wildcard(Flow::Out, channel);
        let consumer = self.consumer(&self.streams.outbound, &name, filter, Flow::Out).await?;
        puller::deliveries(self.js.clone(), consumer, self.opts.pull_wait, capacity).await
    }

    async fn events(&self, channel: &str, chat_id: Option<&str>) -> Result<Events, BusError> {
        // A subscription's protocol line carries the subject too.
        let subject = match chat_id {
            Some(chat) => self.subjects.checked_chat(Flow::Events, channel, chat)?,
            None => self.subjects.channel_wildcard(Flow::Events, channel),
        };
        let subscriber = self.client.subscribe(subject).await.map_err(|e| BusError::Receive(e.to_string()))?;
        // Once the server has answered a ping it has the subscription: no event published
        // after this returns is missed.
        self.client.flush().await.map_err(|e| BusError::Receive(e.to_string()))?;
        Ok(subscriber.filter_map(|msg| std::future::ready(decode_event(&msg.payload))).boxed())
    }

    async fn dead_letter(&self, flow: Flow, letter: &DeadLetter) -> Result<(), BusError> {
        let subject = self.subjects.dead_letter(flow);
        let max = self.max_payload();
        let (encoded, truncated) = letter.encode_within(max).ok_or_else(|| BusError::TooLarge {
            subject: subject.clone(),
            size: letter.payload.len(),
            max,
        })?;
        let size = encoded.len();
        self.publish_stored(subject, Publish::build().payload(Bytes::from(encoded))).await?;
        // Only now: the letter is in the stream.
        crate::meters::meters().dead_lettered(super::flow_label(flow));
        tracing::warn!(subject = %letter.subject, reason = %letter.reason, payload_bytes = letter.payload.len(),
            truncated, dead_letter_bytes = size, "message dead-lettered");
        Ok(())
    }

    fn stream_order(self: Arc<Self>) -> Option<Arc<dyn StreamOrder>> {
        Some(self)
    }

    async fn queue_depths(&self) -> Result<Vec<crate::Gauge>, BusError> {
        let stored = |name: String| async move {
            let stream = self.js.get_stream(&name).await.map_err(|err| BusError::Receive(format!("{name}: {err}")))?;
            Ok::<_, BusError>(usize::try_from(stream.cached_info().state.messages).unwrap_or(usize::MAX))
        };
        let inbound = stored(self.streams.inbound.clone()).await?;
        let outbound = stored(self.streams.outbound.clone()).await?;
        Ok(vec![
            crate::Gauge::new(
                "bus_inbound_stored",
                "Inbound messages in the JetStream work queue: waiting, or taken by a worker and not yet acked",
                inbound,
            ),
            crate::Gauge::new(
                "bus_outbound_stored",
                "Outbound messages in the JetStream work queue: waiting for their adapter, or being delivered",
                outbound,
            ),
        ])
    }

    async fn dead_letters(&self, flow: Flow, limit: usize) -> Result<Vec<DeadLetter>, BusError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        read_dead_letters(&self.js, &self.streams.dead, self.subjects.dead_letter(flow), limit).await
    }
}

/// The first connection. A server that is not up yet (connection refused, timed out, name not
/// resolved) is tried again with backoff when `retry`; anything else is a setup error to report.
/// The login written in the URL is sent as the client's login (see `servers`).
async fn connect_client(url: &str, shown: &str, retry: bool) -> Result<Client, BusError> {
    let servers = servers::parse(url)
        .map_err(|err| BusError::Connect { url: shown.to_owned(), reason: redact_in(&err.to_string(), url) })?;
    let mut delay = CONNECT_RETRY_MIN;
    let mut attempt = 1u32;
    loop {
        let mut options = ConnectOptions::new().name("switchboard").event_callback(log_event(shown.to_owned()));
        if let Some(login) = &servers.login {
            options = login.apply(options);
        }
        let err = match options.connect(servers.addrs.as_slice()).await {
            Ok(client) => return Ok(client),
            Err(err) => err,
        };
        let reason = redact_in(&err.to_string(), url);
        let unreachable =
            matches!(err.kind(), ConnectErrorKind::Io | ConnectErrorKind::TimedOut | ConnectErrorKind::Dns);
        if !retry || !unreachable {
            return Err(BusError::Connect { url: shown.to_owned(), reason });
        }
        tracing::warn!(url = %shown, attempt, %reason, retry_in_ms = delay.as_millis(),
            "cannot reach the NATS server; trying again");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(CONNECT_RETRY_MAX);
        attempt = attempt.saturating_add(1);
    }
}

// `Nats-Msg-Id` of a stored message is the message's own id, as `docs/bus.md` tells foreign
// publishers to send it, so their publish and ours of one id are deduplicated against each
// other. Inbound and outbound live in separate streams, each with its own duplicate window, so
// the same id in both flows never collides. `check_publish` refuses ids a header cannot hold.

fn to_delivery(message: jetstream::Message, counted: puller::Counted) -> Delivery {
    let info = message.info().ok().map(|info| (u64::try_from(info.delivered).unwrap_or(1), info.stream_sequence));
    let (message, acker) = message.split();
    let (attempt, seq) = info.unwrap_or((1, 0));
    let acker = Box::new(NatsAcker { acker, _counted: counted });
    let delivery = Delivery::new(message.subject.to_string(), message.payload, attempt, acker);
    // Sequences start at 1: 0 means the reply subject could not be read.
    if seq > 0 { delivery.with_stream_seq(seq) } else { delivery }
}

struct NatsAcker {
    acker: jetstream::message::Acker,
    /// Counts the delivery as held by its consumer until it is settled (this is dropped).
    _counted: puller::Counted,
}

#[async_trait]
impl Acker for NatsAcker {
    async fn ack(&mut self) -> Result<(), BusError> {
        // Waits for the server's confirmation, so an acked message is known to be gone.
        self.acker.double_ack_with(AckKind::Ack).await.map_err(|e| BusError::Ack(e.to_string()))
    }

    async fn nak(&mut self, delay: Option<Duration>) -> Result<(), BusError> {
        self.acker.ack_with(AckKind::Nak(delay)).await.map_err(|e| BusError::Ack(e.to_string()))
    }

    async fn progress(&self) -> Result<(), BusError> {
        self.acker.ack_with(AckKind::Progress).await.map_err(|e| BusError::Ack(e.to_string()))
    }
}

/// Reads the last `limit` dead letters of one subject through a short-lived consumer.
async fn read_dead_letters(
    js: &jetstream::Context,
    stream: &str,
    subject: String,
    limit: usize,
) -> Result<Vec<DeadLetter>, BusError> {
    let config = pull::Config {
        filter_subject: subject,
        ack_policy: AckPolicy::None,
        // Cleans up after a reader that died before deleting its consumer.
        inactive_threshold: Duration::from_secs(60),
        ..pull::Config::default()
    };
    let receive = |e: String| BusError::Receive(format!("reading dead letters from {stream}: {e}"));
    let consumer: PullConsumer =
        js.create_consumer_on_stream(config, stream).await.map_err(|e| receive(e.to_string()))?;
    let mut remaining = consumer.cached_info().num_pending;
    let mut kept = std::collections::VecDeque::with_capacity(limit);
    while remaining > 0 {
        let batch = usize::try_from(remaining).map_or(DEAD_LETTER_BATCH, |n| n.min(DEAD_LETTER_BATCH));
        let mut messages = consumer
            .batch()
            .max_messages(batch)
            .expires(Duration::from_secs(2))
            .messages()
            .await
            .map_err(|e| receive(e.to_string()))?;
        let before = remaining;
        while let Some(message) = messages.next().await {
            let message = message.map_err(|e| receive(e.to_string()))?;
            remaining = remaining.saturating_sub(1);
            keep_last(&mut kept, limit, &message.payload);
        }
        if remaining == before {
            break; // Expired without progress: do not spin.
        }
    }
    let name = consumer.cached_info().name.clone();
    if let Err(err) = js.delete_consumer_from_stream(&name, stream).await {
        tracing::debug!(%err, consumer = %name, "could not delete the dead-letter reader");
    }
    Ok(kept.into())
}

fn keep_last(kept: &mut std::collections::VecDeque<DeadLetter>, limit: usize, payload: &[u8]) {
    match serde_json::from_slice(payload) {
        Ok(letter) => {
            if kept.len() == limit {
                kept.pop_front();
            }
            kept.push_back(letter);
        }
        Err(err) => tracing::warn!(%err, "undecodable dead letter skipped"),
    }
}

#[async_trait]
impl StreamOrder for NatsBus {
    async fn stored_inbound(&self, subject: &str, from: u64) -> Result<Option<StoredInbound>, BusError> {
        order::first_stored(&self.js, &self.streams.inbound, subject, from).await
    }

    async fn discard_inbound(&self, seq: u64) -> Result<(), BusError> {
        order::discard(&self.js, &self.streams.inbound, seq).await
    }
}

fn decode_event(payload: &[u8]) -> Option<RunEvent> {
    match serde_json::from_slice(payload) {
        Ok(event) => Some(event),
        Err(err) => {
            tracing::warn!(%err, "undecodable run event skipped");
            None
        }
    }
}

fn log_event(url: String) -> impl Fn(Event) -> std::future::Ready<()> + Send + Sync + 'static {
    move |event| {
        match event {
            Event::Connected => tracing::info!(%url, "NATS connection (re)established"),
            Event::Disconnected => tracing::warn!(%url, "NATS connection lost; reconnecting"),
            // Only ever after the process let go of the client (shutdown): nothing went wrong.
            Event::Closed => tracing::info!(%url, "NATS connection closed"),
            other => tracing::warn!(%url, event = %other, "NATS client event"),
        }
        std::future::ready(())
    }
}

/// Hides credentials in a server URL (`nats://user:pass@host` → `nats://***@host`); works on
/// comma-separated server lists too.
pub fn redact_url(url: &str) -> String {
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").map_or(("", url), |(s, r)| (s, r));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let sep = if scheme.is_empty() { "" } else { "://" };
    format!("{scheme}{sep}***{}", &rest[at..])
}

/// Errors from the client may quote the URL it was given: never let its credentials through.
fn redact_in(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &redact_url(url));
    for part in url.split(',') {
        let rest = part.split_once("://").map_or(part, |(_, r)| r);
        // A very short user part would blank out unrelated text, and hides nothing secret.
        if let Some((userinfo, _)) = rest.split_once('@')
            && userinfo.len() >= 4
        {
            out = out.replace(userinfo, "***");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chats_messages_go_in_successive_rounds() {
        let message = |chat: &str, n: u8| RawMessage {
            channel: "telegram".into(),
            chat_id: chat.into(),
            dedupe_id: None,
            payload: Bytes::from(vec![n]),
        };
        let batch = vec![message("a", 1), message("b", 2), message("a", 3), message("c", 4), message("a", 5)];
        let rounds: Vec<Vec<u8>> =
            rounds_by_chat(batch).into_iter().map(|round| round.iter().map(|m| m.payload[0]).collect()).collect();
        assert_eq!(rounds, vec![vec![1, 2, 4], vec![3], vec![5]]);
    }

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(redact_url("nats://user:secret@host:4222"), "nats://***@host:4222");
        assert_eq!(redact_url("nats://host:4222"), "nats://host:4222");
        assert_eq!(redact_url("tok@h:1,nats://a:b@h2"), "***@h:1,nats://***@h2");
        let msg = redact_in("failed: nats://user:secret@host:4222 (user:secret)", "nats://user:secret@host:4222");
        assert!(!msg.contains("secret"), "{msg}");
    }
}
