//! The store's memory does not grow with its file: SQLite's page caches stay within their
//! configured size.
//!
//! Its own test binary (and process under nextest): SQLite's memory counters are per process.

use std::sync::Arc;

use switchboard::provider::ChatMessage;
use switchboard::store::Database;
use switchboard::store::sqlite::SqliteStore;
use switchboard::store::{RunClaim, RunOutcome, RunStatus};
use switchboard_channels::contract::Usage;

const SESSIONS: usize = 64;
const TURNS_PER_SESSION: usize = 40;
/// About 2 KB per answer: with the questions and the runs, the file grows past 10 MB, five
/// times what four connections may cache.
const ANSWER_BYTES: usize = 2_000;

/// What SQLite holds in all, after every session's history was read through every connection:
/// four page caches of 512 KiB, the schema and the prepared statements. SQLite's default
/// caches (2,000 KiB each) would hold over 8 MiB after these reads.
const MEMORY_BOUND: i64 = 4 * 1024 * 1024;

fn outcome(question: &str, answer: &str) -> RunOutcome {
    RunOutcome {
        status: RunStatus::Completed,
        transcript: vec![ChatMessage::user(question), ChatMessage::assistant(answer, Vec::new())],
        reply: None,
        error: None,
        usage: Usage::new(120, 30),
        model: "test-model".into(),
        cost_usd: None,
        iterations: 1,
        context_tokens: 0,
        billing: None,
        memory_scope: None,
    }
}

async fn fill(store: &Arc<dyn Database>) {
    let answer = "the answer goes on. ".repeat(ANSWER_BYTES / 20);
    for turn in 0..TURNS_PER_SESSION {
        for session in 0..SESSIONS {
            let key = format!("api:chat-{session}");
            let RunClaim::New { run_id } = store.claim_run(&format!("in-{session}-{turn}"), &key).await.unwrap() else {
                panic!("every inbound id is new");
            };
            store.finish_run(&run_id, &outcome(&format!("question {turn}"), &answer)).await.unwrap();
        }
    }
}

/// SQLite's counter `op` (current value).
fn sqlite_status(op: i32) -> i64 {
    let (mut current, mut highwater) = (0i64, 0i64);
    // SAFETY: sqlite3_status64 writes two integers through valid pointers; it is thread-safe.
    let rc = unsafe { libsqlite3_sys::sqlite3_status64(op, &mut current, &mut highwater, 0) };
    assert_eq!(rc, libsqlite3_sys::SQLITE_OK);
    current
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn page_caches_stay_bounded_as_the_file_grows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.db");
    let store: Arc<dyn Database> = Arc::new(SqliteStore::open(&path).await.unwrap());
    fill(&store).await;
    let file_bytes = std::fs::metadata(&path).unwrap().len()
        + std::fs::metadata(dir.path().join("switchboard.db-wal")).map_or(0, |m| m.len());
    assert!(file_bytes > 10_000_000, "the database is {file_bytes} bytes; the test needs one larger than the caches");

    // Read every session's history from several tasks at once, twice, so that every pooled
    // connection reads and, without writes in between, keeps what it read.
    for _ in 0..2 {
        let readers: Vec<_> = (0..8)
            .map(|reader| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    for session in (reader..SESSIONS).step_by(8) {
                        let history = store.history(&format!("api:chat-{session}"), 1_000).await.unwrap();
                        assert_eq!(history.len(), 2 * TURNS_PER_SESSION);
                    }
                })
            })
            .collect();
        for reader in readers {
            reader.await.unwrap();
        }
    }

    let used = sqlite_status(libsqlite3_sys::SQLITE_STATUS_MEMORY_USED);
    assert!(used < MEMORY_BOUND, "SQLite holds {used} bytes after reading a {file_bytes}-byte database");
}
