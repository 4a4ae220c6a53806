//! What several processes (on one host with SQLite, on several with PostgreSQL) see when they
//! share one store, and the parts of the store the suite in `store.rs` does not reach: users,
//! sub-agents, heartbeats, the memory index and the in-process bus's journal. Each test runs
//! on both stores, the concurrent ones through two handles.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use switchboard::config::{Identity, Level};
use switchboard::provider::ChatMessage;
use switchboard::store::heartbeat::SlotClaim;
use switchboard::store::lock::LockMode;
use switchboard::store::memory_index::{MemoryChunk, MemoryQuery};
use switchboard::store::subagents::{Created, NewSubagent};
use switchboard::store::{Database, RunClaim, RunKind, RunOutcome, StoreError};
use switchboard_channels::bus::journal::JournalRecord;
use switchboard_channels::contract::{ChatAddress, Usage};
use switchboard_channels::subject::Flow;

use crate::stores::{completed, on_both_stores};

/// `n` tasks at once, alternately on `a` and `b`, each doing `work` with its number.
async fn on_two<T, F, Fut>(a: &Arc<dyn Database>, b: &Arc<dyn Database>, n: usize, work: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(Arc<dyn Database>, usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let tasks: Vec<_> = (0..n).map(|i| tokio::spawn(work(Arc::clone(if i % 2 == 0 { a } else { b }), i))).collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

/// Takes the lock once its last holder is gone. A PostgreSQL lock goes when the server sees
/// its connection closed, a moment after the holder dropped it.
async fn lock_soon(store: &Arc<dyn Database>, mode: LockMode) -> switchboard::store::lock::DatabaseLock {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match store.lock(mode).await {
            Ok(lock) => return lock,
            Err(StoreError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(err) => panic!("{err}"),
        }
    }
}

fn child(n: usize) -> NewSubagent {
    NewSubagent {
        id: format!("sub-{n}"),
        parent_session: "telegram:42".into(),
        parent_agent: "main".into(),
        chat: ChatAddress { channel: "telegram".into(), chat_id: "42".into(), thread_id: None, is_group: false },
        session: None,
        label: format!("child {n}"),
        on_behalf_of: None,
        task: "look it up".into(),
        worker: format!("worker-{}", n % 2),
    }
}

/// Finishes a turn written in the memory scope `scope`.
async fn remembered(store: &dyn Database, inbound: &str, scope: &str, question: &str, answer: &str) {
    let RunClaim::New { run_id } = store.claim_run(inbound, "telegram:42").await.unwrap() else { panic!("not new") };
    let exchange = vec![ChatMessage::user(question), ChatMessage::assistant(answer, Vec::new())];
    let outcome = RunOutcome { memory_scope: Some(scope.into()), ..completed(exchange) };
    store.finish_run(&run_id, &outcome).await.unwrap();
}

on_both_stores! {
    /// Commands and messages settled without a turn are recorded (a redelivery finds them
    /// finished) but are not listed as runs: nothing called the model. Claimed at once, so
    /// that SQLite's grouped claim carries each one's kind too.
    async fn only_model_runs_are_listed_though_commands_are_recorded(fresh) {
        let kinds = [RunKind::Turn, RunKind::Command, RunKind::NoTurn, RunKind::Command];
        let claims = kinds.into_iter().enumerate().map(|(i, kind)| {
            let store = Arc::clone(&fresh.store);
            tokio::spawn(async move { store.claim_run_as(&format!("in-{i}"), "api:me", kind).await.unwrap() })
        });
        for claim in claims.collect::<Vec<_>>() {
            let RunClaim::New { run_id } = claim.await.unwrap() else { panic!("not new") };
            let outcome = RunOutcome { iterations: 0, usage: Usage::default(), ..completed(Vec::new()) };
            fresh.store.finish_run(&run_id, &outcome).await.unwrap();
        }
        let runs = fresh.store.recent_runs(10).await.unwrap();
        assert_eq!(runs.iter().map(|run| (run.inbound_id.as_str(), run.kind)).collect::<Vec<_>>(), [("in-0", RunKind::Turn)]);
        let again = fresh.store.claim_run_as("in-1", "api:me", RunKind::Command).await.unwrap();
        assert!(matches!(again, RunClaim::Finished { .. }), "{again:?}");
    }

    /// A stranger's first messages handled by two workers at once make one user, not two.
    async fn first_messages_through_two_handles_make_one_user(fresh) {
        let (a, b) = (Arc::clone(&fresh.store), fresh.another().await);
        let ids = on_two(&a, &b, 20, |store, _| async move {
            store.resolve_user(&Identity::new("telegram", "42"), "Alice", Level::Guest).await.unwrap().id
        })
        .await;
        assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
        assert_eq!(a.list_users("2026-11").await.unwrap().len(), 1);
    }

    /// The cap on a session's live sub-agents holds when two workers spawn at once.
    async fn the_sub_agent_cap_holds_across_handles(fresh) {
        let (a, b) = (Arc::clone(&fresh.store), fresh.another().await);
        let now = Utc::now();
        let lease = now + chrono::Duration::minutes(5);
        let created = on_two(&a, &b, 20, move |store, n| async move {
            store.create_subagent(&child(n), 5, now, lease).await.unwrap()
        })
        .await;
        assert_eq!(created.iter().filter(|c| **c == Created::Queued).count(), 5, "{created:?}");
        assert_eq!(b.subagents_of("telegram:42").await.unwrap().len(), 5);
    }

    /// Of two schedulers that read the same heartbeat slot, one claims it.
    async fn a_heartbeat_slot_is_claimed_once_across_handles(fresh) {
        let (a, b) = (Arc::clone(&fresh.store), fresh.another().await);
        let first = Utc.with_ymd_and_hms(2026, 11, 27, 8, 0, 0).unwrap();
        let state = a.heartbeat_state("main", first).await.unwrap();
        assert_eq!(b.heartbeat_state("main", first + chrono::Duration::hours(1)).await.unwrap(), state);
        let won = on_two(&a, &b, 10, move |store, _| async move {
            let claim = SlotClaim {
                agent: "main",
                slot: first,
                next: first + chrono::Duration::minutes(30),
                now: first,
                outcome: "sent",
            };
            store.claim_heartbeat_slot(&claim).await.unwrap()
        })
        .await;
        assert_eq!(won.iter().filter(|won| **won).count(), 1);
        assert_eq!(a.heartbeat_state("main", first).await.unwrap().next_at, first + chrono::Duration::minutes(30));
    }

    /// Memory files are found by any word and by a word's start, better matches first, and
    /// are gone once replaced or forgotten; other workspaces never show.
    async fn memory_files_are_searched_replaced_and_forgotten(fresh) {
        let store = Arc::clone(&fresh.store);
        let chunk = |line: u32, text: &str| MemoryChunk { start_line: line, end_line: line, text: text.into() };
        store.index_memory_file("/a", "MEMORY.md", "1", &[chunk(1, "Zebra"), chunk(3, "Lion and zebra")]).await.unwrap();
        store.index_memory_file("/b", "MEMORY.md", "1", &[chunk(7, "zebra")]).await.unwrap();
        store.index_memory_file("/a", "USER.md", "1", &[chunk(2, "The owner likes zebras")]).await.unwrap();
        let search = |root: &'static str, words: &'static [&'static str]| {
            let store = Arc::clone(&store);
            async move {
                let paths = ["MEMORY.md".to_owned(), "USER.md".to_owned()];
                let terms: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
                let query = MemoryQuery { root, paths: &paths, scope: None, terms: &terms, limit: 10 };
                let hits = store.search_memory(&query).await.unwrap();
                hits.into_iter().map(|hit| (hit.path, hit.start_line, hit.snippet)).collect::<Vec<_>>()
            }
        };
        let hits = search("/a", &["zebra", "lion"]).await;
        assert_eq!(hits[0].0.as_str(), "MEMORY.md");
        assert_eq!(hits[0].1, 3, "the chunk with both words ranks first: {hits:?}");
        assert!(hits[0].2.contains("**Lion**") && hits[0].2.contains("**zebra**"), "{hits:?}");
        assert_eq!(hits.len(), 3, "a word's start finds `zebras` too: {hits:?}");
        assert_eq!(store.memory_fingerprint("/a", "MEMORY.md").await.unwrap().as_deref(), Some("1"));

        store.index_memory_file("/a", "MEMORY.md", "2", &[chunk(5, "Only a lion now")]).await.unwrap();
        let hits = search("/a", &["zebra"]).await;
        assert_eq!(hits.iter().map(|hit| hit.0.as_str()).collect::<Vec<_>>(), ["USER.md"]);
        store.forget_memory_file("/a", "USER.md").await.unwrap();
        assert!(search("/a", &["zebra"]).await.is_empty());
        assert_eq!(search("/b", &["zebra"]).await.len(), 1);
    }

    /// Past turns of a memory scope are found by search, marked as the agent's words or not,
    /// and read back as a conversation; another scope's turns never show.
    async fn conversations_of_a_scope_are_indexed_and_read_back(fresh) {
        let store = Arc::clone(&fresh.store);
        remembered(&*store, "in-1", "main/owner", "Where did I park?", "On level three, by the lift.").await;
        remembered(&*store, "in-2", "main/guest", "Where is the lift?", "Behind you.").await;
        store.index_conversations("/a", "main/owner").await.unwrap();
        // Indexing again adds nothing.
        store.index_conversations("/a", "main/owner").await.unwrap();
        let terms = ["lift".to_owned()];
        let query = MemoryQuery { root: "/a", paths: &[], scope: Some("main/owner"), terms: &terms, limit: 10 };
        let hits = store.search_memory(&query).await.unwrap();
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert!(hits[0].by_agent && hits[0].path == "conversation/telegram:42", "{hits:?}");
        let from = i64::try_from(hits[0].start_line).unwrap() - 1;
        let messages = store.conversation_messages("main/owner", "telegram:42", from, 10).await.unwrap();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].text.contains("Where did I park?") && messages[1].text.contains("level three"));
    }

    /// The in-process bus's journal keeps what was accepted in order, refuses a second copy
    /// of a pending message, and forgets what was removed.
    async fn the_journal_keeps_pending_messages_in_order_once(fresh) {
        let store = Arc::clone(&fresh.store);
        let record = |n: u32, dedupe: &str| JournalRecord {
            flow: Flow::In,
            channel: "telegram".into(),
            subject: "sb.in.telegram.42".into(),
            dedupe_id: Some(dedupe.into()),
            payload: format!("{{\"n\":{n}}}").into_bytes().into(),
        };
        let first = store.append(Flow::In, "telegram", "sb.in.telegram.42", Some("m-1"), b"{\"n\":1}").await.unwrap();
        let batch = store.append_many(&[record(2, "m-2"), record(1, "m-1"), record(3, "m-3")]).await.unwrap();
        assert!(first.is_some());
        assert!(batch[0].is_some() && batch[1].is_none() && batch[2].is_some(), "{batch:?}");
        let pending = store.pending().await.unwrap();
        let payloads: Vec<_> = pending.iter().map(|entry| String::from_utf8(entry.payload.to_vec()).unwrap()).collect();
        assert_eq!(payloads, ["{\"n\":1}", "{\"n\":2}", "{\"n\":3}"]);
        store.remove(pending[0].seq).await.unwrap();
        assert_eq!(store.pending().await.unwrap().len(), 2);
        // Removed, so the same id may be journaled again.
        assert!(store.append_many(&[record(1, "m-1")]).await.unwrap()[0].is_some());
    }

    /// One embedded daemon per database, or any number of NATS workers, on any host.
    async fn the_database_lock_is_exclusive_or_shared(fresh) {
        let (a, b) = (Arc::clone(&fresh.store), fresh.another().await);
        let first = a.lock(LockMode::Shared).await.unwrap();
        let second = b.lock(LockMode::Shared).await.unwrap();
        let refused = b.lock(LockMode::Exclusive).await.unwrap_err();
        assert!(matches!(refused, StoreError::InUse { .. }), "{refused}");
        assert!(refused.to_string().contains("in use"), "{refused}");
        drop((first, second));
        let exclusive = lock_soon(&a, LockMode::Exclusive).await;
        assert!(matches!(b.lock(LockMode::Shared).await, Err(StoreError::InUse { .. })));
        assert!(matches!(b.lock(LockMode::Exclusive).await, Err(StoreError::InUse { .. })));
        drop(exclusive);
        lock_soon(&b, LockMode::Exclusive).await;
    }
}
