//! The two commits against a real SQLite store and the in-process bus journaling in it: what
//! each leaves in the journal, and that an ack after the one-transaction commit writes nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::bus::journal::{Journal, JournalEntry, JournalError, JournalRecord};
use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
use switchboard_channels::subject::Flow;
use switchboard_channels::{Bus, BusExt, Delivery};

use super::{CommitPort, JournalInStore, StoreThenPublish};
use crate::store::sqlite::SqliteStore;
use crate::store::{RunClaim, RunOutcome, RunStore};

/// The store's journal, counting the removals acks ask for.
struct CountingJournal {
    store: Arc<SqliteStore>,
    removals: AtomicUsize,
}

#[async_trait]
impl Journal for CountingJournal {
    async fn append(
        &self,
        flow: Flow,
        channel: &str,
        subject: &str,
        dedupe_id: Option<&str>,
        payload: &[u8],
    ) -> Result<Option<i64>, JournalError> {
        self.store.append(flow, channel, subject, dedupe_id, payload).await
    }

    async fn append_many(&self, records: &[JournalRecord]) -> Result<Vec<Option<i64>>, JournalError> {
        self.store.append_many(records).await
    }

    async fn remove(&self, seq: i64) -> Result<(), JournalError> {
        self.removals.fetch_add(1, Ordering::SeqCst);
        self.store.remove(seq).await
    }

    async fn pending(&self) -> Result<Vec<JournalEntry>, JournalError> {
        self.store.pending().await
    }
}

struct Embedded {
    store: Arc<SqliteStore>,
    journal: Arc<CountingJournal>,
    bus: Arc<InProcessBus>,
    _dir: tempfile::TempDir,
}

async fn embedded() -> Embedded {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let journal = Arc::new(CountingJournal { store: Arc::clone(&store), removals: AtomicUsize::new(0) });
    let bus = Arc::new(InProcessBus::with_journal(16, Arc::clone(&journal) as _).await.unwrap());
    Embedded { store, journal, bus, _dir: dir }
}

async fn next(deliveries: &mut switchboard_channels::Deliveries) -> Delivery {
    tokio::time::timeout(Duration::from_secs(5), deliveries.next()).await.unwrap().unwrap().unwrap()
}

/// A message taken from the bus and its run claimed, with the answer the run gives.
async fn answered(setup: &Embedded) -> (InboundMessage, Delivery, String, RunOutcome) {
    let msg = InboundMessage::user("telegram", "42", Sender::default(), "hello");
    setup.bus.publish_inbound(&msg).await.unwrap();
    let delivery = next(&mut setup.bus.inbound().await.unwrap()).await;
    let RunClaim::New { run_id } = setup.store.claim_run(&msg.id, "telegram:42").await.unwrap() else {
        panic!("a new message's run is new");
    };
    let reply = OutboundMessage {
        id: format!("{run_id}:reply"),
        channel: "telegram".into(),
        chat_id: "42".into(),
        content: "hi there".into(),
        ..Default::default()
    };
    (msg, delivery, run_id, RunOutcome::answered(reply))
}

#[tokio::test]
async fn in_one_transaction_the_message_row_goes_the_reply_row_comes_and_the_ack_writes_nothing() {
    let setup = embedded().await;
    let bus: Arc<dyn Bus> = setup.bus.clone();
    let journal = Arc::clone(&bus).store_journal().expect("an in-process bus with a journal offers it");
    let commit = JournalInStore::new(journal, Arc::clone(&bus), setup.store.clone());
    let (msg, delivery, run_id, outcome) = answered(&setup).await;
    commit.finish(&msg, &run_id, &outcome, delivery.stream_seq).await.unwrap_or_else(|_| panic!("committed"));
    delivery.ack().await.unwrap();
    assert_eq!(setup.journal.removals.load(Ordering::SeqCst), 0, "the ack deleted the row again");
    let pending = setup.store.pending().await.unwrap();
    assert_eq!(pending.iter().map(|entry| entry.flow).collect::<Vec<_>>(), [Flow::Out]);
    let sent = next(&mut bus.outbound("telegram").await.unwrap()).await;
    assert_eq!(sent.decode::<OutboundMessage>().unwrap().content, "hi there");
    sent.ack().await.unwrap();
    assert_eq!(setup.journal.removals.load(Ordering::SeqCst), 1, "the reply's ack removes its row");
    assert!(setup.store.pending().await.unwrap().is_empty());
}

#[tokio::test]
async fn stored_then_published_the_ack_removes_the_message_row() {
    let setup = embedded().await;
    let bus: Arc<dyn Bus> = setup.bus.clone();
    let commit = StoreThenPublish::new(Arc::clone(&bus), setup.store.clone());
    let (msg, delivery, run_id, outcome) = answered(&setup).await;
    commit.finish(&msg, &run_id, &outcome, delivery.stream_seq).await.unwrap_or_else(|_| panic!("committed"));
    delivery.ack().await.unwrap();
    assert_eq!(setup.journal.removals.load(Ordering::SeqCst), 1);
    let run = setup.store.recent_runs(1).await.unwrap().remove(0);
    assert!(run.reply_delivered, "the published reply is marked sent");
    let sent = next(&mut bus.outbound("telegram").await.unwrap()).await;
    assert_eq!(sent.decode::<OutboundMessage>().unwrap().content, "hi there");
}

#[tokio::test]
async fn a_bus_without_a_journal_in_the_store_offers_none_and_no_stream_order() {
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(4));
    assert!(Arc::clone(&bus).store_journal().is_none());
    assert!(bus.stream_order().is_none());
}
