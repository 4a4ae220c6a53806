//! The in-process bus with its SQLite journal: what was accepted survives a crash of the
//! process (simulated by dropping bus and store without acking) and is delivered again.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use switchboard::store::Database;
use switchboard::store::sqlite::SqliteStore;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
use switchboard_channels::{Bus, BusExt, Deliveries, Delivery};

async fn open(path: &std::path::Path) -> (Arc<dyn Database>, InProcessBus) {
    let store = Arc::new(SqliteStore::open(path).await.unwrap());
    let bus = InProcessBus::with_journal(16, store.clone()).await.unwrap();
    (store, bus)
}

async fn take(deliveries: &mut Deliveries) -> Delivery {
    tokio::time::timeout(Duration::from_secs(5), deliveries.next()).await.expect("nothing delivered").unwrap().unwrap()
}

async fn nothing_in(deliveries: &mut Deliveries) {
    let next = tokio::time::timeout(Duration::from_millis(300), deliveries.next()).await;
    assert!(next.is_err(), "unexpected delivery");
}

fn inbound(text: &str) -> InboundMessage {
    InboundMessage::user("telegram", "-100", Sender::default(), text)
}

fn outbound(id: &str) -> OutboundMessage {
    OutboundMessage {
        id: id.into(),
        channel: "telegram".into(),
        chat_id: "-100".into(),
        content: "hi".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn unacked_messages_are_delivered_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let (store, bus) = open(&path).await;
    let msg = inbound("accepted before the crash");
    bus.publish_inbound(&msg).await.unwrap();
    bus.publish_outbound(&outbound("reply-1")).await.unwrap();
    // Taken but not acked when the process dies.
    let mut inbox = bus.inbound().await.unwrap();
    let taken = take(&mut inbox).await;
    std::mem::forget(taken);
    drop((inbox, bus));
    store.close().await;

    let (store, bus) = open(&path).await;
    let mut inbox = bus.inbound().await.unwrap();
    let again: InboundMessage = take(&mut inbox).await.decode().unwrap();
    assert_eq!(again, msg);
    let mut outbox = bus.outbound("telegram").await.unwrap();
    let reply = take(&mut outbox).await;
    assert_eq!(reply.decode::<OutboundMessage>().unwrap().id, "reply-1");
    reply.ack().await.unwrap();
    drop((inbox, outbox, bus));
    store.close().await;

    // The acked reply is gone for good; the unacked inbound message comes back once more.
    let (_store, bus) = open(&path).await;
    let mut outbox = bus.outbound("telegram").await.unwrap();
    nothing_in(&mut outbox).await;
    let mut inbox = bus.inbound().await.unwrap();
    take(&mut inbox).await.ack().await.unwrap();
    nothing_in(&mut inbox).await;
}

#[tokio::test]
async fn a_pending_message_id_is_accepted_once_even_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let msg = inbound("once");
    let (store, bus) = open(&path).await;
    bus.publish_inbound(&msg).await.unwrap();
    drop(bus);
    store.close().await;

    let (_store, bus) = open(&path).await;
    // The adapter republishes after its own restart (say, Telegram re-sent the update).
    bus.publish_inbound(&msg).await.unwrap();
    let mut inbox = bus.inbound().await.unwrap();
    take(&mut inbox).await.ack().await.unwrap();
    nothing_in(&mut inbox).await;
}

/// Acks that arrive together are deleted together (one statement for all that waited), and
/// each returns only once its own row is gone: none is delivered again after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_acked_at_once_are_all_gone_after_a_restart() {
    use switchboard_channels::bus::journal::Journal;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    // Room for every reply at once: nothing is taken until all are published.
    let bus = InProcessBus::with_journal(512, store.clone()).await.unwrap();
    for n in 0..300 {
        bus.publish_outbound(&outbound(&format!("reply-{n}"))).await.unwrap();
    }
    bus.publish_outbound(&outbound("left-unacked")).await.unwrap();
    let mut outbox = bus.outbound("telegram").await.unwrap();
    let mut taken = Vec::new();
    for _ in 0..301 {
        taken.push(take(&mut outbox).await);
    }
    let unacked = taken.pop().unwrap();
    assert_eq!(unacked.decode::<OutboundMessage>().unwrap().id, "left-unacked");
    let acks = taken.into_iter().map(|delivery| tokio::spawn(delivery.ack()));
    for ack in futures_util::future::join_all(acks).await {
        ack.unwrap().unwrap();
    }
    // Every acked row is gone the moment its ack returned.
    let pending = store.pending().await.unwrap();
    assert_eq!(pending.len(), 1, "{} rows left", pending.len());
    std::mem::forget(unacked);
    drop((outbox, bus));
    store.close().await;

    let (_store, bus) = open(&path).await;
    let mut outbox = bus.outbound("telegram").await.unwrap();
    let again = take(&mut outbox).await;
    assert_eq!(again.decode::<OutboundMessage>().unwrap().id, "left-unacked");
    nothing_in(&mut outbox).await;
}

/// A batch of inbound messages (a getUpdates answer) is journaled in one write, larger than the
/// queue in groups of what fits: each message is queued once, in order, a duplicate within the
/// batch or of a message still pending is dropped, and a crash before the acks loses none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_inbound_messages_is_queued_in_order_once_and_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let (store, bus) = open(&path).await;
    let pending = inbound("published alone, still pending");
    bus.publish_inbound(&pending).await.unwrap();
    let mut batch: Vec<InboundMessage> = (0..40).map(|n| inbound(&format!("message {n}"))).collect();
    batch.insert(20, batch[3].clone());
    batch.push(pending.clone());
    let mut inbox = bus.inbound().await.unwrap();
    // The queue holds 16: the batch goes in only as fast as the worker takes its messages.
    let publish = tokio::spawn(async move {
        bus.publish_inbound_many(&batch).await.unwrap();
        bus
    });
    let mut contents = Vec::new();
    for _ in 0..41 {
        let delivery = take(&mut inbox).await;
        contents.push(delivery.decode::<InboundMessage>().unwrap().content);
        std::mem::forget(delivery);
    }
    let bus = publish.await.unwrap();
    nothing_in(&mut inbox).await;
    let expected: Vec<String> =
        std::iter::once(pending.content.clone()).chain((0..40).map(|n| format!("message {n}"))).collect();
    assert_eq!(contents, expected);
    drop((inbox, bus));
    store.close().await;

    let (_store, bus) = open(&path).await;
    let mut inbox = bus.inbound().await.unwrap();
    let mut again = Vec::new();
    for _ in 0..41 {
        let delivery = take(&mut inbox).await;
        again.push(delivery.decode::<InboundMessage>().unwrap().content);
        delivery.ack().await.unwrap();
    }
    nothing_in(&mut inbox).await;
    assert_eq!(again, expected);
}

/// Messages published at once by many tasks share writes, and each is matched to its own
/// row: acking half of them deletes exactly those, and only the other half comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_publishes_each_get_their_own_journal_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    let bus = Arc::new(InProcessBus::with_journal(512, store.clone()).await.unwrap());
    let publishes = (0..200).map(|n| {
        let bus = Arc::clone(&bus);
        tokio::spawn(async move { bus.publish_inbound(&inbound(&format!("message {n}"))).await })
    });
    for publish in futures_util::future::join_all(publishes).await {
        publish.unwrap().unwrap();
    }
    let mut inbox = bus.inbound().await.unwrap();
    let mut kept = Vec::new();
    for _ in 0..200 {
        let delivery = take(&mut inbox).await;
        let content = delivery.decode::<InboundMessage>().unwrap().content;
        let n: u32 = content.trim_start_matches("message ").parse().unwrap();
        if n.is_multiple_of(2) {
            delivery.ack().await.unwrap();
        } else {
            kept.push(content);
            std::mem::forget(delivery);
        }
    }
    drop((inbox, bus));
    store.close().await;

    let (_store, bus) = open(&path).await;
    let mut inbox = bus.inbound().await.unwrap();
    let mut again = Vec::new();
    for _ in 0..100 {
        let delivery = take(&mut inbox).await;
        again.push(delivery.decode::<InboundMessage>().unwrap().content);
        delivery.ack().await.unwrap();
    }
    nothing_in(&mut inbox).await;
    kept.sort();
    again.sort();
    assert_eq!(again, kept);
}
