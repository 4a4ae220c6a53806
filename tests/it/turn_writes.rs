//! What a turn writes in the embedded shape, and that it still loses and duplicates nothing: the
//! reply's journal row, the "reply sent" mark and the answered message's journal row go in
//! the transaction that stores the run; a crash on either side of it leaves either the message
//! to answer again or the reply to deliver, never both and never neither. A session's history
//! kept in memory follows every change, including one made by another process on the file.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use switchboard::provider::ChatMessage;
use switchboard::store::Database;
use switchboard::store::sqlite::SqliteStore;
use switchboard::store::{BusWrites, RunClaim, RunOutcome, RunStatus};
use switchboard_channels::bus::StoreJournal;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::contract::{InboundMessage, OutboundKind, OutboundMessage, Sender, Usage};
use switchboard_channels::{Bus, BusExt, Deliveries, Delivery};

const SESSION: &str = "telegram:-100";

async fn open(path: &Path) -> (Arc<dyn Database>, InProcessBus) {
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

fn outcome(run_id: &str, question: &str, answer: &str) -> RunOutcome {
    let reply = OutboundMessage {
        id: format!("{run_id}:reply"),
        channel: "telegram".into(),
        chat_id: "-100".into(),
        content: answer.into(),
        kind: OutboundKind::Reply,
        ..OutboundMessage::default()
    };
    RunOutcome {
        status: RunStatus::Completed,
        transcript: vec![ChatMessage::user(question), ChatMessage::assistant(answer, Vec::new())],
        reply: Some(reply),
        error: None,
        usage: Usage::new(10, 3),
        model: "m".into(),
        cost_usd: None,
        iterations: 1,
        context_tokens: 0,
        billing: None,
        memory_scope: None,
    }
}

async fn claim_new(store: &Arc<dyn Database>, inbound_id: &str) -> String {
    match store.claim_run(inbound_id, SESSION).await.unwrap() {
        RunClaim::New { run_id } => run_id,
        other => panic!("expected a new run, got {other:?}"),
    }
}

#[tokio::test]
async fn a_crash_after_the_finishing_transaction_delivers_the_reply_and_does_not_answer_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let (store, bus) = open(&path).await;
    let msg = InboundMessage::user("telegram", "-100", Sender::default(), "hello");
    bus.publish_inbound(&msg).await.unwrap();
    let mut inbox = bus.inbound().await.unwrap();
    let (info, acker) = take(&mut inbox).await.into_parts();
    let answered_row = info.stream_seq.expect("a journaled delivery's position is its journal row");
    let run_id = claim_new(&store, &msg.id).await;
    let finished = outcome(&run_id, "hello", "hi there");
    let record = bus.outbound_record(finished.reply.as_ref().unwrap()).unwrap();
    let writes = BusWrites { reply: Some(&record), answered_row: Some(answered_row as i64) };
    let reply_row = store.finish_run_journaled(&run_id, &finished, &writes).await.unwrap();
    assert!(reply_row.is_some());
    // The process dies before it queues the reply or settles the delivery.
    std::mem::forget(acker);
    drop((inbox, bus));
    store.close().await;

    let (store, bus) = open(&path).await;
    let mut inbox = bus.inbound().await.unwrap();
    nothing_in(&mut inbox).await;
    let mut outbox = bus.outbound("telegram").await.unwrap();
    let delivery = take(&mut outbox).await;
    assert_eq!(delivery.decode::<OutboundMessage>().unwrap().content, "hi there");
    delivery.ack().await.unwrap();
    nothing_in(&mut outbox).await;
    let run = store.recent_runs(1).await.unwrap().remove(0);
    assert_eq!((run.status, run.reply_delivered), (RunStatus::Completed, true));
}

#[tokio::test]
async fn a_refused_finish_writes_nothing_and_the_message_stays_to_answer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let (store, bus) = open(&path).await;
    let msg = InboundMessage::user("telegram", "-100", Sender::default(), "hello");
    bus.publish_inbound(&msg).await.unwrap();
    let mut inbox = bus.inbound().await.unwrap();
    let (info, acker) = take(&mut inbox).await.into_parts();
    let run_id = claim_new(&store, &msg.id).await;
    store.finish_run(&run_id, &outcome(&run_id, "hello", "first")).await.unwrap();
    // A second worker that resumed the run finishes too late: refused, and neither its reply
    // nor the deletion of the message's row is written.
    let late = outcome(&run_id, "hello", "second");
    let record = bus.outbound_record(late.reply.as_ref().unwrap()).unwrap();
    let answered_row = info.stream_seq.map(|row| row as i64);
    let writes = BusWrites { reply: Some(&record), answered_row };
    assert!(store.finish_run_journaled(&run_id, &late, &writes).await.is_err());
    std::mem::forget(acker);
    drop((inbox, bus));
    store.close().await;

    let (store, bus) = open(&path).await;
    let mut inbox = bus.inbound().await.unwrap();
    let again: InboundMessage = take(&mut inbox).await.decode().unwrap();
    assert_eq!(again.id, msg.id);
    nothing_in(&mut bus.outbound("telegram").await.unwrap()).await;
    let history = store.conversation(SESSION, 50).await.unwrap().history;
    assert_eq!(history.last().map(|m| m.content.as_str()), Some("first"));
}

#[tokio::test]
async fn the_history_in_memory_follows_changes_made_by_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let here: Arc<dyn Database> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let there: Arc<dyn Database> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let run = claim_new(&here, "in-1").await;
    here.finish_run(&run, &outcome(&run, "q1", "a1")).await.unwrap();
    let texts = |c: &switchboard::store::Conversation| c.history.iter().map(|m| m.content.clone()).collect::<Vec<_>>();
    assert_eq!(texts(&here.conversation(SESSION, 50).await.unwrap()), ["q1", "a1"]);

    // A turn of this process is appended to its copy; one of another process is read anew.
    let run = claim_new(&here, "in-2").await;
    here.finish_run(&run, &outcome(&run, "q2", "a2")).await.unwrap();
    let run = claim_new(&there, "in-3").await;
    there.finish_run(&run, &outcome(&run, "q3", "a3")).await.unwrap();
    assert_eq!(texts(&here.conversation(SESSION, 50).await.unwrap()), ["q1", "a1", "q2", "a2", "q3", "a3"]);
    assert_eq!(texts(&here.conversation(SESSION, 3).await.unwrap()), ["a2", "q3", "a3"]);

    // `/new` there; a compaction there: both seen here.
    there.archive_session(SESSION).await.unwrap();
    assert!(here.conversation(SESSION, 50).await.unwrap().history.is_empty());
    let run = claim_new(&here, "in-4").await;
    here.finish_run(&run, &outcome(&run, "q4", "a4")).await.unwrap();
    let run = claim_new(&here, "in-5").await;
    here.finish_run(&run, &outcome(&run, "q5", "a5")).await.unwrap();
    let rows = there.history_rows(SESSION, 50).await.unwrap();
    assert!(there.begin_compaction(SESSION).await.unwrap());
    there.finish_compaction(SESSION, "they said q4", rows[1].0).await.unwrap();
    let after = here.conversation(SESSION, 50).await.unwrap();
    assert_eq!(texts(&after), ["q5", "a5"]);
    assert_eq!(after.summary.map(|summary| summary.text).as_deref(), Some("they said q4"));
}
