//! The in-process bus of the embedded shape: bounded queues inside one process.
//!
//! A full queue makes publishers wait (backpressure) rather than dropping anything. A delivery
//! that is nak'ed, or dropped without an ack, goes back into its queue. With a [`Journal`]
//! (the embedded daemon always has one), inbound and outbound messages are on disk before
//! `publish` returns and until they are acked, and a restarted bus delivers them again. The
//! journal is the store's database, so a worker may write its reply's journal row and delete
//! its message's row in the transaction that stores the run instead of in transactions of
//! their own ([`StoreJournal`]); a journaled delivery's stream position is its journal row.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{Mutex as AsyncMutex, broadcast, mpsc};

use super::journal::{Journal, JournalEntry, JournalRecord, StoreJournal};
use super::recent::RecentIds;
use super::{Acker, Bus, BusError, Deliveries, Delivery, Events, RawMessage};
use crate::Gauge;
use crate::contract::{DeadLetter, OutboundMessage, RunEvent};
use crate::subject::{DEFAULT_PREFIX, Flow, Subjects};

/// How long a dedupe id is remembered, like JetStream's default duplicate window.
const DEDUPE_WINDOW: Duration = Duration::from_secs(120);
/// How many dead letters are kept for inspection.
const DEAD_LETTERS_KEPT: usize = 1000;
/// How many events a live subscriber may lag behind before it misses some.
const EVENT_BUFFER: usize = 1024;

struct Item {
    subject: String,
    payload: Bytes,
    attempt: u64,
    /// Its row in the journal, removed on ack.
    seq: Option<i64>,
}

/// One work queue: many producers, consumers sharing one receiver.
struct Queue {
    tx: mpsc::Sender<Item>,
    rx: Arc<AsyncMutex<mpsc::Receiver<Item>>>,
}

impl Queue {
    fn new(capacity: usize) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        Self { tx, rx: Arc::new(AsyncMutex::new(rx)) }
    }

    /// Messages sent and not yet received.
    fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    fn deliveries(&self, journal: Option<JournalRows>) -> Deliveries {
        let rx = Arc::clone(&self.rx);
        // Weak, so that the stream ends once the bus is dropped.
        let requeue = self.tx.downgrade();
        futures_util::stream::unfold((rx, requeue, journal), |(rx, requeue, journal)| async move {
            let item = rx.lock().await.recv().await?;
            let row = journal.as_ref().and(item.seq).and_then(|seq| u64::try_from(seq).ok());
            let acker =
                InProcessAcker { item: Some(item.clone_meta()), requeue: requeue.clone(), journal: journal.clone() };
            let delivery = Delivery::new(item.subject, item.payload, item.attempt, Box::new(acker));
            let delivery = match row {
                Some(row) => delivery.with_stream_seq(row),
                None => delivery,
            };
            Some((Ok(delivery), (rx, requeue, journal)))
        })
        .boxed()
    }
}

impl Item {
    fn clone_meta(&self) -> Item {
        Item { subject: self.subject.clone(), payload: self.payload.clone(), attempt: self.attempt, seq: self.seq }
    }
}

/// The journal as acks see it: the rows to remove, less those a consumer's own transaction
/// removed already (see [`StoreJournal::committed`]), whose ack writes nothing.
#[derive(Clone)]
struct JournalRows {
    journal: Arc<dyn Journal>,
    removed_by_consumers: Arc<Mutex<HashSet<i64>>>,
}

impl JournalRows {
    async fn remove(&self, seq: i64) -> Result<(), BusError> {
        if self.removed_by_consumers.lock().unwrap_or_else(PoisonError::into_inner).remove(&seq) {
            return Ok(());
        }
        self.journal.remove(seq).await.map_err(|err| BusError::Ack(err.to_string()))
    }
}

/// Puts its delivery back in the queue unless it was acked.
struct InProcessAcker {
    item: Option<Item>,
    requeue: mpsc::WeakSender<Item>,
    journal: Option<JournalRows>,
}

impl InProcessAcker {
    fn requeue_after(&mut self, delay: Option<Duration>) {
        let Some(mut item) = self.item.take() else { return };
        item.attempt += 1;
        let Some(tx) = self.requeue.upgrade() else {
            tracing::debug!("in-process bus closed before a redelivery");
            return;
        };
        // Spawned so that a full queue never blocks the consumer that gives the message back.
        tokio::spawn(async move {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            if tx.send(item).await.is_err() {
                tracing::debug!("in-process bus closed before a redelivery");
            }
        });
    }
}

#[async_trait]
impl Acker for InProcessAcker {
    async fn ack(&mut self) -> Result<(), BusError> {
        let Some(item) = self.item.take() else { return Ok(()) };
        match (&self.journal, item.seq) {
            (Some(journal), Some(seq)) => journal.remove(seq).await,
            _ => Ok(()),
        }
    }

    async fn nak(&mut self, delay: Option<Duration>) -> Result<(), BusError> {
        self.requeue_after(delay);
        Ok(())
    }

    async fn progress(&self) -> Result<(), BusError> {
        Ok(())
    }

    fn needs_progress(&self) -> bool {
        false
    }
}

impl Drop for InProcessAcker {
    fn drop(&mut self) {
        if self.item.is_some() && tokio::runtime::Handle::try_current().is_ok() {
            self.requeue_after(None);
        }
    }
}

/// The in-process bus. Cheap to share behind an `Arc`.
pub struct InProcessBus {
    subjects: Subjects,
    capacity: usize,
    inbound: Queue,
    outbound: Mutex<HashMap<String, Arc<Queue>>>,
    /// Run events as they were published: no subscriber decodes what another encoded.
    events: broadcast::Sender<Arc<RunEvent>>,
    seen: Mutex<RecentIds>,
    dead: Mutex<HashMap<&'static str, VecDeque<DeadLetter>>>,
    journal: Option<Arc<dyn Journal>>,
    /// Journal rows of deliveries a consumer removed in its own transaction, until acked.
    removed_by_consumers: Arc<Mutex<HashSet<i64>>>,
}

impl InProcessBus {
    /// A bus whose queues hold at most `capacity` messages each.
    pub fn new(capacity: usize) -> Self {
        let subjects = Subjects::new(DEFAULT_PREFIX).unwrap_or_else(|_| unreachable!("the default prefix is valid"));
        Self {
            subjects,
            capacity,
            inbound: Queue::new(capacity),
            outbound: Mutex::new(HashMap::new()),
            events: broadcast::channel(EVENT_BUFFER).0,
            seen: Mutex::new(RecentIds::new(DEDUPE_WINDOW)),
            dead: Mutex::new(HashMap::new()),
            journal: None,
            removed_by_consumers: Arc::default(),
        }
    }

    /// A bus that keeps inbound and outbound messages in `journal` until they are acked, and
    /// first queues again whatever the journal still holds from before a restart.
    pub async fn with_journal(capacity: usize, journal: Arc<dyn Journal>) -> Result<Self, BusError> {
        let pending = journal.pending().await.map_err(|err| BusError::Setup(err.to_string()))?;
        let bus = Self { journal: Some(journal), ..Self::new(capacity) };
        if !pending.is_empty() {
            tracing::info!(count = pending.len(), "redelivering messages accepted before the last stop");
        }
        bus.requeue_recovered(pending);
        Ok(bus)
    }

    /// Queues recovered messages from a task per queue, in the journal's order (a chat's
    /// messages stay in order), so more of them than fit do not block start-up.
    fn requeue_recovered(&self, pending: Vec<JournalEntry>) {
        let mut by_queue: Vec<(mpsc::Sender<Item>, Vec<Item>)> = Vec::new();
        for entry in pending {
            let tx = match entry.flow {
                Flow::In => self.inbound.tx.clone(),
                _ => self.outbound_queue(&entry.channel).tx.clone(),
            };
            let item = Item { subject: entry.subject, payload: entry.payload, attempt: 2, seq: Some(entry.seq) };
            match by_queue.iter_mut().find(|(queue, _)| queue.same_channel(&tx)) {
                Some((_, items)) => items.push(item),
                None => by_queue.push((tx, vec![item])),
            }
        }
        for (tx, items) in by_queue {
            tokio::spawn(async move {
                for item in items {
                    if tx.send(item).await.is_err() {
                        tracing::debug!("in-process bus closed before a recovered message was queued");
                        return;
                    }
                }
            });
        }
    }

    /// The journal as this bus's deliveries ack against it, when there is one.
    fn journal_rows(&self) -> Option<JournalRows> {
        let journal = Arc::clone(self.journal.as_ref()?);
        Some(JournalRows { journal, removed_by_consumers: Arc::clone(&self.removed_by_consumers) })
    }

    fn outbound_queue(&self, channel: &str) -> Arc<Queue> {
        let mut queues = self.outbound.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(queues.entry(channel.to_owned()).or_insert_with(|| Arc::new(Queue::new(self.capacity))))
    }

    /// True when `id` was already published within the dedupe window; otherwise, when
    /// `remember`, records it as published now.
    fn seen_recently(&self, id: &str, remember: bool) -> bool {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(id, now) {
            return true;
        }
        if remember {
            seen.record(id, now);
        }
        false
    }

    /// Inbound messages, at most `capacity` of them, journaled in one write and queued in order.
    async fn publish_journaled_inbound(
        &self,
        journal: &Arc<dyn Journal>,
        group: &[RawMessage],
    ) -> Result<(), BusError> {
        let (mut records, mut dedupe_keys) = (Vec::with_capacity(group.len()), Vec::with_capacity(group.len()));
        for message in group {
            super::check_publish(&message.channel, &message.chat_id, message.dedupe_id.as_deref())?;
            let dedupe_key = message.dedupe_id.as_ref().map(|id| format!("{}:{id}", flow_key(Flow::In)));
            if dedupe_key.as_ref().is_some_and(|key| self.seen_recently(key, false)) {
                tracing::debug!(channel = %message.channel, chat_id = %message.chat_id, "duplicate publish ignored");
                continue;
            }
            let record = JournalRecord {
                flow: Flow::In,
                channel: message.channel.clone(),
                subject: self.subjects.chat(Flow::In, &message.channel, &message.chat_id),
                dedupe_id: message.dedupe_id.clone(),
                payload: message.payload.clone(),
            };
            records.push(record);
            dedupe_keys.push(dedupe_key);
        }
        if records.is_empty() {
            return Ok(());
        }
        // Room first, as for one message: a publish cancelled while waiting has written nothing.
        let closed = || BusError::Publish { subject: String::new(), reason: "the bus is closed".into() };
        let mut permits = self.inbound.tx.reserve_many(records.len()).await.map_err(|_| closed())?;
        let seqs = journal
            .append_many(&records)
            .await
            .map_err(|err| BusError::Publish { subject: String::new(), reason: err.to_string() })?;
        for ((record, dedupe_key), seq) in records.into_iter().zip(dedupe_keys).zip(seqs) {
            let Some(seq) = seq else {
                tracing::debug!(subject = %record.subject, "duplicate publish ignored (still pending)");
                continue;
            };
            if let Some(key) = dedupe_key {
                self.seen_recently(&key, true);
            }
            let item = Item { subject: record.subject, payload: record.payload, attempt: 1, seq: Some(seq) };
            // As many permits as records were reserved, so one is left for each written row.
            if let Some(permit) = permits.next() {
                permit.send(item);
            }
        }
        Ok(())
    }

    /// Writes the message to the journal; `None` when the journal already holds its dedupe id.
    async fn journal_append(
        &self,
        journal: &Arc<dyn Journal>,
        flow: Flow,
        channel: &str,
        subject: &str,
        dedupe_id: Option<&str>,
        payload: &Bytes,
    ) -> Result<Option<i64>, BusError> {
        journal
            .append(flow, channel, subject, dedupe_id, payload)
            .await
            .map_err(|err| BusError::Publish { subject: subject.to_owned(), reason: err.to_string() })
    }
}

fn flow_key(flow: Flow) -> &'static str {
    match flow {
        Flow::In => "in",
        Flow::Out => "out",
        Flow::Events => "events",
    }
}

#[async_trait]
impl Bus for InProcessBus {
    async fn publish_raw(
        &self,
        flow: Flow,
        channel: &str,
        chat_id: &str,
        dedupe_id: Option<&str>,
        payload: Bytes,
    ) -> Result<(), BusError> {
        super::check_publish(channel, chat_id, dedupe_id)?;
        let subject = self.subjects.chat(flow, channel, chat_id);
        if flow == Flow::Events {
            if let Some(event) = decode_event(&payload) {
                self.send_event(event);
            }
            return Ok(());
        }
        let tx = match flow {
            Flow::In => self.inbound.tx.clone(),
            _ => self.outbound_queue(channel).tx.clone(),
        };
        // Wait for room before recording the dedupe id: a publish cancelled while the queue is
        // full must not make its retry look like a duplicate (the message would be lost).
        let closed = || BusError::Publish { subject: subject.clone(), reason: "the bus is closed".into() };
        let permit = tx.reserve().await.map_err(|_| closed())?;
        let dedupe_key = dedupe_id.map(|id| format!("{}:{id}", flow_key(flow)));
        let Some(journal) = &self.journal else {
            if dedupe_key.is_some_and(|key| self.seen_recently(&key, true)) {
                tracing::debug!(%subject, "duplicate publish ignored");
                return Ok(());
            }
            permit.send(Item { subject, payload, attempt: 1, seq: None });
            return Ok(());
        };
        // Remember the id only once the message is on disk, so a failed write can be retried.
        if dedupe_key.as_ref().is_some_and(|key| self.seen_recently(key, false)) {
            tracing::debug!(%subject, "duplicate publish ignored");
            return Ok(());
        }
        let Some(seq) = self.journal_append(journal, flow, channel, &subject, dedupe_id, &payload).await? else {
            tracing::debug!(%subject, "duplicate publish ignored (still pending)");
            return Ok(());
        };
        if let Some(key) = dedupe_key {
            self.seen_recently(&key, true);
        }
        permit.send(Item { subject, payload, attempt: 1, seq: Some(seq) });
        Ok(())
    }

    async fn publish_raw_many(&self, flow: Flow, messages: Vec<RawMessage>) -> Result<(), BusError> {
        match &self.journal {
            // Only the journal's write is worth saving; inbound messages share one queue.
            Some(journal) if flow == Flow::In => {
                for group in messages.chunks(self.capacity.max(1)) {
                    self.publish_journaled_inbound(journal, group).await?;
                }
                Ok(())
            }
            _ => super::publish_each(self, flow, messages).await,
        }
    }

    fn store_journal(self: Arc<Self>) -> Option<Arc<dyn StoreJournal>> {
        let journaled = self.journal.is_some();
        journaled.then_some(self as Arc<dyn StoreJournal>)
    }

    async fn inbound(&self) -> Result<Deliveries, BusError> {
        Ok(self.inbound.deliveries(self.journal_rows()))
    }

    async fn outbound(&self, channel: &str) -> Result<Deliveries, BusError> {
        Ok(self.outbound_queue(channel).deliveries(self.journal_rows()))
    }

    async fn events(&self, channel: &str, chat_id: Option<&str>) -> Result<Events, BusError> {
        let rx = self.events.subscribe();
        let (channel, chat_id) = (channel.to_owned(), chat_id.map(str::to_owned));
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(item) => return Some((item, rx)),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "event subscriber fell behind");
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .filter_map(move |event| {
            let wanted = event.channel == channel && chat_id.as_ref().is_none_or(|c| *c == event.chat_id);
            std::future::ready(wanted.then(|| RunEvent::clone(&event)))
        });
        Ok(stream.boxed())
    }

    async fn publish_event(&self, event: &RunEvent) -> Result<(), BusError> {
        super::check_publish(&event.channel, &event.chat_id, None)?;
        self.send_event(event.clone());
        Ok(())
    }

    async fn dead_letter(&self, flow: Flow, letter: &DeadLetter) -> Result<(), BusError> {
        tracing::warn!(subject = %letter.subject, reason = %letter.reason, "message dead-lettered");
        let mut dead = self.dead.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = dead.entry(flow_key(flow)).or_default();
        if kept.len() == DEAD_LETTERS_KEPT {
            kept.pop_front();
        }
        kept.push_back(letter.clone());
        crate::meters::meters().dead_lettered(super::flow_label(flow));
        Ok(())
    }

    async fn dead_letters(&self, flow: Flow, limit: usize) -> Result<Vec<DeadLetter>, BusError> {
        let dead = self.dead.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = dead.get(flow_key(flow)).map(|q| q.iter().cloned().collect::<Vec<_>>()).unwrap_or_default();
        Ok(kept[kept.len().saturating_sub(limit)..].to_vec())
    }

    fn gauges(&self) -> Vec<Gauge> {
        let dedupe_ids = self.seen.lock().unwrap_or_else(PoisonError::into_inner).len();
        let dead_letters: usize =
            self.dead.lock().unwrap_or_else(PoisonError::into_inner).values().map(VecDeque::len).sum();
        let outbound: usize =
            self.outbound.lock().unwrap_or_else(PoisonError::into_inner).values().map(|q| q.queued()).sum();
        vec![
            Gauge::new(
                "bus_dedupe_ids",
                "Message ids the in-process bus remembers (those of the last 2 minutes)",
                dedupe_ids,
            ),
            Gauge::new(
                "bus_dead_letters",
                "Dead letters the in-process bus keeps (at most 1000 per flow)",
                dead_letters,
            ),
            Gauge::new(
                "bus_inbound_queued",
                "Inbound messages waiting in the in-process bus (at most bus_options.queue_capacity)",
                self.inbound.queued(),
            ),
            Gauge::new(
                "bus_outbound_queued",
                "Outbound messages waiting in the in-process bus (at most bus_options.queue_capacity per channel)",
                outbound,
            ),
        ]
    }
}

#[async_trait]
impl StoreJournal for InProcessBus {
    fn outbound_record(&self, msg: &OutboundMessage) -> Result<JournalRecord, BusError> {
        super::check_publish(&msg.channel, &msg.chat_id, Some(&msg.id))?;
        Ok(JournalRecord {
            flow: Flow::Out,
            channel: msg.channel.clone(),
            subject: self.subjects.chat(Flow::Out, &msg.channel, &msg.chat_id),
            dedupe_id: Some(msg.id.clone()),
            payload: Bytes::from(serde_json::to_vec(msg)?),
        })
    }

    async fn committed(&self, answered: Option<u64>, reply: Option<(JournalRecord, i64)>) -> Result<(), BusError> {
        if let Some(row) = answered.and_then(|row| i64::try_from(row).ok()) {
            self.removed_by_consumers.lock().unwrap_or_else(PoisonError::into_inner).insert(row);
        }
        let Some((record, seq)) = reply else { return Ok(()) };
        let tx = match record.flow {
            Flow::In => self.inbound.tx.clone(),
            _ => self.outbound_queue(&record.channel).tx.clone(),
        };
        if let Some(id) = &record.dedupe_id {
            self.seen_recently(&format!("{}:{id}", flow_key(record.flow)), true);
        }
        let item = Item { subject: record.subject, payload: record.payload, attempt: 1, seq: Some(seq) };
        // The row is on disk already: if the bus closes first, the next start delivers it.
        tx.send(item).await.map_err(|_| BusError::Publish {
            subject: String::new(),
            reason: "the bus is closed; the message is delivered after the restart".into(),
        })
    }
}

impl InProcessBus {
    fn send_event(&self, event: RunEvent) {
        // No subscriber is not an error: events are for whoever happens to watch.
        let _ = self.events.send(Arc::new(event));
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
