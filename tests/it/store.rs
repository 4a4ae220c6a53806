//! The stores against real databases, SQLite files and PostgreSQL databases: what a worker
//! and an operator can observe. What holds for either runs on both ([`on_both_stores!`]);
//! what is about files (opening, migrating, two processes on one file) on SQLite.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, SqliteConnection};
use switchboard::config::QueueMode;
use switchboard::provider::{ChatMessage, ToolCall};
use switchboard::store::sqlite::SqliteStore;
use switchboard::store::{
    Conversation, HistorySummary, RunClaim, RunOutcome, RunStatus, RunStore, SessionInfo, SessionPrefs, SessionStore,
    Store, StoreError,
};
use switchboard_channels::contract::{OutboundKind, OutboundMessage, Usage};

use crate::stores::on_both_stores;

const SESSION: &str = "telegram:42";

fn reply(run_id: &str, content: &str) -> OutboundMessage {
    let mut reply = OutboundMessage {
        id: format!("{run_id}:reply"),
        in_reply_to: Some("in-1".into()),
        channel: "telegram".into(),
        chat_id: "42".into(),
        thread_id: Some("7".into()),
        content: content.into(),
        kind: OutboundKind::Reply,
        ..OutboundMessage::default()
    };
    reply.metadata.insert("run_id".into(), json!(run_id));
    reply
}

fn completed(run_id: &str, question: &str, answer: &str) -> RunOutcome {
    RunOutcome {
        status: RunStatus::Completed,
        transcript: vec![ChatMessage::user(question), ChatMessage::assistant(answer, Vec::new())],
        reply: Some(reply(run_id, answer)),
        error: None,
        usage: Usage::new(120, 30),
        model: "test-model".into(),
        cost_usd: Some(0.0042),
        iterations: 1,
        context_tokens: 0,
        billing: None,
        memory_scope: None,
    }
}

async fn claim_new(store: &dyn Store, inbound_id: &str, session: &str) -> String {
    match store.claim_run(inbound_id, session).await.unwrap() {
        RunClaim::New { run_id } => run_id,
        other => panic!("expected a new run, got {other:?}"),
    }
}

/// Runs one whole turn: claim, finish with a question and its answer.
async fn answered(store: &dyn Store, inbound_id: &str, session: &str, n: usize) -> String {
    let run_id = claim_new(store, inbound_id, session).await;
    let outcome = completed(&run_id, &format!("q{n}"), &format!("a{n}"));
    store.finish_run(&run_id, &outcome).await.unwrap();
    run_id
}

async fn raw_connection(path: &Path) -> SqliteConnection {
    SqliteConnectOptions::new().filename(path).connect().await.unwrap()
}

/// Exactly one claimant wins; everyone else resumes the same run, one attempt each.
fn assert_one_new(claims: Vec<Result<RunClaim, StoreError>>) {
    let mut new = Vec::new();
    let mut attempts = Vec::new();
    let mut run_ids = Vec::new();
    for claim in claims {
        match claim.unwrap() {
            RunClaim::New { run_id } => {
                new.push(run_id.clone());
                run_ids.push(run_id);
            }
            RunClaim::Resumed { run_id, attempt } => {
                attempts.push(attempt);
                run_ids.push(run_id);
            }
            other => panic!("unexpected claim {other:?}"),
        }
    }
    assert_eq!(new.len(), 1, "exactly one claim must create the run");
    assert!(run_ids.iter().all(|id| *id == new[0]), "all claims must name the same run");
    attempts.sort_unstable();
    assert_eq!(attempts, (2..=50).collect::<Vec<u32>>(), "no attempt may be counted twice");
}

async fn claim_concurrently(stores: &[Arc<dyn Store>]) -> Vec<Result<RunClaim, StoreError>> {
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = Arc::clone(&stores[i % stores.len()]);
            tokio::spawn(async move { store.claim_run("in-race", SESSION).await })
        })
        .collect();
    let mut claims = Vec::new();
    for task in tasks {
        claims.push(task.await.unwrap());
    }
    claims
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_claims_from_two_stores_on_one_file_make_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    // Opened at the same time, as two processes starting together would: both migrate.
    let (a, b) = tokio::join!(SqliteStore::open(&path), SqliteStore::open(&path));
    let stores: [Arc<dyn Store>; 2] = [Arc::new(a.unwrap()), Arc::new(b.unwrap())];
    let claims = claim_concurrently(&stores).await;
    assert_one_new(claims);
}

async fn finished_runs(store: &dyn Store) -> usize {
    let runs = store.recent_runs(1000).await.unwrap();
    runs.iter().filter(|r| r.status != RunStatus::Running).count()
}

#[tokio::test]
async fn reopening_keeps_everything_and_migrates_once() {
    let dir = tempfile::tempdir().unwrap();
    // A data dir that does not exist yet is created.
    let path = dir.path().join("data").join("nested").join("store.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let run_id = answered(&store, "in-1", SESSION, 1).await;
    store.mark_reply_delivered(&run_id).await.unwrap();
    let pending = claim_new(&store, "in-2", SESSION).await;
    store.close().await;
    let ledger_before = migrations_applied(&path).await;

    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(migrations_applied(&path).await, ledger_before, "migrations must not run again");
    assert_eq!(store.history(SESSION, 10).await.unwrap().len(), 2);
    let RunClaim::Finished { run_id: again, delivered, .. } = store.claim_run("in-1", SESSION).await.unwrap() else {
        panic!("expected the finished run");
    };
    assert_eq!((again, delivered), (run_id, true));
    assert_eq!(store.claim_run("in-2", SESSION).await.unwrap(), RunClaim::Resumed { run_id: pending, attempt: 2 });
}

async fn migrations_applied(path: &Path) -> Vec<(i64, i64)> {
    let mut conn = raw_connection(path).await;
    let rows = sqlx::query_as("SELECT version, applied_at FROM schema_migrations ORDER BY version")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    assert!(!rows.is_empty());
    rows
}

#[tokio::test]
async fn a_database_from_a_newer_build_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    SqliteStore::open(&path).await.unwrap().close().await;
    let mut conn = raw_connection(&path).await;
    sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES (9999, 0)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    let err = SqliteStore::open(&path).await.unwrap_err();
    assert!(matches!(err, StoreError::Migrate { version: 9999, .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("newer switchboard"), "{message}");
}

#[tokio::test]
async fn an_unusable_path_is_a_clear_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    let err = SqliteStore::open(&file.join("store.db")).await.unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err}");
    assert!(err.to_string().contains("not-a-dir"), "{err}");
}

/// Many workers (two processes' worth) finishing different runs at once, as a busy daemon does:
/// none may fail with "database is locked".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_turns_from_two_stores_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a = Arc::new(SqliteStore::open(&path).await.unwrap());
    let b = Arc::new(SqliteStore::open(&path).await.unwrap());
    let tasks: Vec<_> = (0..40)
        .map(|n| {
            let store = Arc::clone(if n % 2 == 0 { &a } else { &b });
            tokio::spawn(async move {
                let session = format!("telegram:{}", n % 4);
                let run_id = claim_new(&*store, &format!("in-{n}"), &session).await;
                store.history(&session, 50).await.unwrap();
                let outcome = completed(&run_id, "q", "a");
                store.finish_run(&run_id, &outcome).await.unwrap();
                store.mark_reply_delivered(&run_id).await.unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let runs = a.recent_runs(100).await.unwrap();
    assert_eq!(runs.len(), 40);
    assert!(runs.iter().all(|r| r.status == RunStatus::Completed && r.reply_delivered));
    assert_eq!(b.history("telegram:0", 100).await.unwrap().len(), 20);
}

on_both_stores! {
    async fn first_claim_is_new_and_a_finished_run_replays_its_reply(fresh) {
        let store = Arc::clone(&fresh.store);
        let run_id = claim_new(&*store, "in-1", SESSION).await;
        let outcome = completed(&run_id, "hello", "hi there");
        store.finish_run(&run_id, &outcome).await.unwrap();

        let claim = store.claim_run("in-1", SESSION).await.unwrap();
        // The stored reply comes back whole, with the same id, so redelivering it is idempotent.
        assert_eq!(claim, RunClaim::Finished { run_id: run_id.clone(), reply: outcome.reply.clone(), delivered: false });
        let RunClaim::Finished { reply: Some(reply), .. } = claim else { unreachable!() };
        assert_eq!(reply.id, format!("{run_id}:reply"));
    }

    async fn a_run_without_reply_finishes_with_none(fresh) {
        let store = Arc::clone(&fresh.store);
        let run_id = claim_new(&*store, "in-1", SESSION).await;
        let outcome = RunOutcome { reply: None, ..completed(&run_id, "q", "NO_REPLY") };
        store.finish_run(&run_id, &outcome).await.unwrap();
        let claim = store.claim_run("in-1", SESSION).await.unwrap();
        assert_eq!(claim, RunClaim::Finished { run_id, reply: None, delivered: false });
    }

    async fn claiming_an_unfinished_run_resumes_it_with_the_next_attempt(fresh) {
        let store = Arc::clone(&fresh.store);
        let run_id = claim_new(&*store, "in-1", SESSION).await;
        for attempt in 2..=3 {
            let claim = store.claim_run("in-1", SESSION).await.unwrap();
            assert_eq!(claim, RunClaim::Resumed { run_id: run_id.clone(), attempt });
        }
        let runs = store.recent_runs(10).await.unwrap();
        assert_eq!(runs.len(), 1, "resuming must not create another run");
        assert_eq!(runs[0].attempt, 3);
        assert_eq!(runs[0].status, RunStatus::Running);
    }

    async fn fifty_concurrent_claims_on_one_store_make_one_run(fresh) {
        let store = Arc::clone(&fresh.store);
        let claims = claim_concurrently(&[store]).await;
        assert_one_new(claims);
    }

    /// Claims made at once for different messages share writes; each is a new run of its own,
    /// stored under its message and session.
    async fn concurrent_claims_of_different_messages_are_each_a_new_run(fresh) {
        let store = Arc::clone(&fresh.store);
        let tasks: Vec<_> = (0..100)
            .map(|n| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { store.claim_run(&format!("in-{n}"), &format!("telegram:{}", n % 10)).await })
            })
            .collect();
        let mut run_ids = std::collections::HashMap::new();
        for (n, task) in tasks.into_iter().enumerate() {
            let RunClaim::New { run_id } = task.await.unwrap().unwrap() else { panic!("message {n} was not new") };
            run_ids.insert(run_id, n);
        }
        assert_eq!(run_ids.len(), 100, "every claim names a run of its own");
        let runs = store.recent_runs(200).await.unwrap();
        assert_eq!(runs.len(), 100);
        for run in runs {
            let n = run_ids[&run.run_id];
            assert_eq!((run.inbound_id, run.session_key), (format!("in-{n}"), format!("telegram:{}", n % 10)));
            assert_eq!((run.status, run.attempt), (RunStatus::Running, 1));
        }
        // A second claim of each finds its run.
        let again = store.claim_run("in-7", "telegram:7").await.unwrap();
        assert!(matches!(again, RunClaim::Resumed { attempt: 2, .. }), "{again:?}");
    }

    /// Finishes made at once share a statement, and each stores its own turn: a finish refused
    /// in the group (its run finished before) leaves the others finished and adds nothing.
    async fn concurrent_finishes_each_store_their_own_turn(fresh) {
        let store = Arc::clone(&fresh.store);
        let mut runs = Vec::new();
        for n in 0..40 {
            runs.push(claim_new(&*store, &format!("in-{n}"), &format!("telegram:{}", n % 5)).await);
        }
        store.finish_run(&runs[0], &completed(&runs[0], "q0", "a0")).await.unwrap();
        let tasks: Vec<_> = runs
            .iter()
            .enumerate()
            .map(|(n, run_id)| {
                let (store, run_id) = (Arc::clone(&store), run_id.clone());
                tokio::spawn(async move {
                    store.finish_run(&run_id, &completed(&run_id, &format!("q{n}"), &format!("a{n}"))).await
                })
            })
            .collect();
        for (n, task) in tasks.into_iter().enumerate() {
            match (n, task.await.unwrap()) {
                (0, Err(StoreError::Finish { .. })) | (1.., Ok(())) => {}
                (n, other) => panic!("finish {n}: {other:?}"),
            }
        }
        for chat in 0..5 {
            let history = store.history(&format!("telegram:{chat}"), 100).await.unwrap();
            let mut turns: Vec<(String, String)> =
                history.chunks(2).map(|turn| (turn[0].content.clone(), turn[1].content.clone())).collect();
            turns.sort();
            let mut expected: Vec<(String, String)> =
                (0..40).filter(|n| n % 5 == chat).map(|n| (format!("q{n}"), format!("a{n}"))).collect();
            expected.sort();
            assert_eq!(turns, expected, "session telegram:{chat}");
        }
        let runs = store.recent_runs(100).await.unwrap();
        assert!(runs.iter().all(|run| run.status == RunStatus::Completed && run.usage.input_tokens == 120));
    }

    async fn history_returns_the_latest_messages_oldest_first(fresh) {
        let store = Arc::clone(&fresh.store);
        answered(&*store, "in-1", SESSION, 1).await;
        answered(&*store, "in-other", "discord:9", 9).await;
        let run_id = claim_new(&*store, "in-2", SESSION).await;
        let call = ToolCall { id: "call-1".into(), name: "current_time".into(), arguments: json!({}) };
        let tool_turn = vec![
            ChatMessage::user("q2"),
            ChatMessage::assistant("", vec![call.clone()]),
            ChatMessage::tool_result(&call, "12:00"),
            ChatMessage::assistant("a2", Vec::new()),
        ];
        let outcome = RunOutcome { transcript: tool_turn.clone(), ..completed(&run_id, "", "") };
        store.finish_run(&run_id, &outcome).await.unwrap();

        let all = store.history(SESSION, 100).await.unwrap();
        let mut expected = vec![ChatMessage::user("q1"), ChatMessage::assistant("a1", Vec::new())];
        expected.extend(tool_turn.clone());
        assert_eq!(all, expected, "other sessions' messages must not leak in");
        assert_eq!(store.history(SESSION, 3).await.unwrap(), tool_turn[1..].to_vec());
        assert!(store.history(SESSION, 0).await.unwrap().is_empty());
        assert!(store.history("telegram:unknown", 10).await.unwrap().is_empty());
    }

    async fn finishing_an_unknown_run_fails_and_writes_nothing(fresh) {
        let store = Arc::clone(&fresh.store);
        let run_id = claim_new(&*store, "in-1", SESSION).await;
        let err = store.finish_run("no-such-run", &completed(&run_id, "q", "a")).await.unwrap_err();
        assert!(matches!(err, StoreError::NoSuchRun(ref id) if id == "no-such-run"), "{err}");
        assert!(store.history(SESSION, 10).await.unwrap().is_empty());
        let runs = store.recent_runs(10).await.unwrap();
        assert_eq!((runs.len(), runs[0].status), (1, RunStatus::Running));
        assert!(matches!(store.mark_reply_delivered("no-such-run").await, Err(StoreError::NoSuchRun(_))));
    }

    async fn finishing_twice_is_refused_and_keeps_the_first_result(fresh) {
        let store = Arc::clone(&fresh.store);
        let run_id = answered(&*store, "in-1", SESSION, 1).await;
        let err = store.finish_run(&run_id, &completed(&run_id, "q", "late")).await.unwrap_err();
        assert!(matches!(err, StoreError::Finish { .. }), "{err}");
        assert_eq!(store.history(SESSION, 10).await.unwrap().len(), 2, "the turn must not be duplicated");
        let RunClaim::Finished { reply: Some(reply), .. } = store.claim_run("in-1", SESSION).await.unwrap() else {
            panic!("expected a finished run with a reply");
        };
        assert_eq!(reply.content, "a1");
    }

    async fn finish_run_records_status_usage_and_failure(fresh) {
        let store = Arc::clone(&fresh.store);
        let ok = answered(&*store, "in-1", SESSION, 1).await;
        let bad = claim_new(&*store, "in-2", SESSION).await;
        let failure = RunOutcome {
            status: RunStatus::Failed,
            error: Some("the provider answered HTTP 500".into()),
            iterations: 3,
            context_tokens: 0,
            cost_usd: None,
            ..completed(&bad, "q2", "sorry")
        };
        store.finish_run(&bad, &failure).await.unwrap();

        let runs = store.recent_runs(10).await.unwrap();
        let (failed, done) = (&runs[0], &runs[1]);
        assert_eq!((failed.run_id.as_str(), failed.status), (bad.as_str(), RunStatus::Failed));
        assert_eq!(failed.error.as_deref(), Some("the provider answered HTTP 500"));
        assert_eq!(failed.iterations, 3);
        assert_eq!((done.run_id.as_str(), done.status, done.error.as_deref()), (ok.as_str(), RunStatus::Completed, None));
        assert_eq!(done.usage, Usage::new(120, 30));
        // The cost round-trips, and an unknown one stays unknown (NULL), not zero.
        assert_eq!((done.cost_usd, failed.cost_usd), (Some(0.0042), None));
        assert_eq!(
            (done.model.as_str(), done.inbound_id.as_str(), done.session_key.as_str()),
            ("test-model", "in-1", SESSION)
        );
        let finished_at = done.finished_at.expect("a finished run has a finish time");
        assert!(done.started_at <= finished_at);
        assert!(matches!(store.claim_run("in-2", SESSION).await.unwrap(), RunClaim::Finished { .. }));
    }

    /// A reader never sees a run's transcript without its final status, or the reverse.
    async fn a_finished_turn_becomes_visible_all_at_once(fresh) {
        let store = Arc::clone(&fresh.store);
        let reader = {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for _ in 0..300 {
                    let seen = store.history(SESSION, 1000).await.unwrap().len();
                    let done = finished_runs(&*store).await;
                    assert!(seen <= done * 2, "transcript visible before its run finished");
                    let done = finished_runs(&*store).await;
                    let seen = store.history(SESSION, 1000).await.unwrap().len();
                    assert!(seen >= done * 2, "run finished before its transcript was visible");
                }
            })
        };
        for n in 0..30 {
            answered(&*store, &format!("in-{n}"), SESSION, n).await;
        }
        reader.await.unwrap();
    }

    async fn a_delivered_reply_is_not_offered_again(fresh) {
        let store = Arc::clone(&fresh.store);
        let run_id = answered(&*store, "in-1", SESSION, 1).await;
        store.mark_reply_delivered(&run_id).await.unwrap();
        let RunClaim::Finished { delivered, .. } = store.claim_run("in-1", SESSION).await.unwrap() else {
            panic!("expected a finished run");
        };
        assert!(delivered);
        assert!(store.recent_runs(1).await.unwrap()[0].reply_delivered);
    }

    /// Marks made at once share a statement on SQLite: each marks its own run, and one for a
    /// run that does not exist fails alone.
    async fn concurrent_delivery_marks_each_mark_their_own_run(fresh) {
        let store = Arc::clone(&fresh.store);
        let mut runs = Vec::new();
        for n in 0..30 {
            runs.push(answered(&*store, &format!("in-{n}"), SESSION, n).await);
        }
        let marked: Vec<_> = runs
            .iter()
            .step_by(2)
            .cloned()
            .chain(["no-such-run".to_owned()])
            .map(|run_id| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { (run_id.clone(), store.mark_reply_delivered(&run_id).await) })
            })
            .collect();
        for task in marked {
            let (run_id, result) = task.await.unwrap();
            match run_id.as_str() {
                "no-such-run" => assert!(matches!(result, Err(StoreError::NoSuchRun(_))), "{result:?}"),
                _ => result.unwrap(),
            }
        }
        for run in store.recent_runs(100).await.unwrap() {
            let n: usize = run.inbound_id.trim_start_matches("in-").parse().unwrap();
            assert_eq!(run.reply_delivered, n.is_multiple_of(2), "{}", run.inbound_id);
        }
    }

    async fn recent_runs_lists_newest_first_up_to_the_limit(fresh) {
        let store = Arc::clone(&fresh.store);
        for n in 0..5 {
            claim_new(&*store, &format!("in-{n}"), SESSION).await;
        }
        let inbound = |runs: Vec<switchboard::store::RunRecord>| runs.into_iter().map(|r| r.inbound_id).collect::<Vec<_>>();
        assert_eq!(inbound(store.recent_runs(3).await.unwrap()), ["in-4", "in-3", "in-2"]);
        assert_eq!(store.recent_runs(100).await.unwrap().len(), 5);
        assert!(store.recent_runs(0).await.unwrap().is_empty());
    }

    async fn compaction_hides_covered_rows_and_keeps_the_summary(fresh) {
        let store = Arc::clone(&fresh.store);
        for n in 0..3 {
            answered(&*store, &format!("in-{n}"), SESSION, n).await;
        }
        assert_eq!(store.session_summary(SESSION).await.unwrap(), None);
        let rows = store.history_rows(SESSION, 100).await.unwrap();
        assert_eq!(rows.len(), 6);
        assert!(rows.windows(2).all(|w| w[0].0 < w[1].0), "ids grow with the transcript");

        assert!(store.begin_compaction(SESSION).await.unwrap());
        // A second compaction of the same session is refused while the first runs.
        assert!(!store.begin_compaction(SESSION).await.unwrap());
        store.finish_compaction(SESSION, "first four", rows[3].0).await.unwrap();
        assert_eq!(store.session_summary(SESSION).await.unwrap(), Some(HistorySummary { text: "first four".into(), compactions: 1 }));
        let after = store.history(SESSION, 100).await.unwrap();
        assert_eq!(after, vec![rows[4].1.clone(), rows[5].1.clone()]);

        // The mark is cleared: another compaction may start; an abort changes nothing else.
        assert!(store.begin_compaction(SESSION).await.unwrap());
        store.abort_compaction(SESSION).await.unwrap();
        assert_eq!(store.session_summary(SESSION).await.unwrap(), Some(HistorySummary { text: "first four".into(), compactions: 1 }));
        assert_eq!(store.history(SESSION, 100).await.unwrap().len(), 2);
        assert!(store.begin_compaction(SESSION).await.unwrap());

        // Other sessions are untouched; an unknown session cannot be compacted.
        assert!(!store.begin_compaction("telegram:nobody").await.unwrap());
        let err = store.finish_compaction("telegram:nobody", "x", 1).await.unwrap_err();
        assert!(matches!(err, StoreError::NoSuchSession(_)), "{err}");
    }

    async fn archiving_a_session_hides_its_history_and_restarts_its_token_count(fresh) {
        let store = Arc::clone(&fresh.store);
        assert_eq!(store.session_info("t:new").await.unwrap(), SessionInfo::default());
        answered(&*store, "in-1", "t:arch", 1).await;
        answered(&*store, "in-2", "t:other", 2).await;
        assert_eq!(store.session_info("t:arch").await.unwrap().used.total(), 150);
        store.archive_session("t:arch").await.unwrap();
        assert!(store.history("t:arch", 10).await.unwrap().is_empty());
        assert_eq!(store.session_info("t:arch").await.unwrap().used.total(), 0);
        // Other sessions are untouched; the archived session goes on from here.
        assert_eq!(store.history("t:other", 10).await.unwrap().len(), 2);
        answered(&*store, "in-3", "t:arch", 3).await;
        let history = store.history("t:arch", 10).await.unwrap();
        assert_eq!(history, vec![ChatMessage::user("q3"), ChatMessage::assistant("a3", Vec::new())]);
        assert_eq!(store.session_info("t:arch").await.unwrap().used.total(), 150);
        store.set_queue_mode("t:arch", Some(QueueMode::Collect)).await.unwrap();
        assert_eq!(store.session_info("t:arch").await.unwrap().queue_mode, Some(QueueMode::Collect));
    }

    /// A session's task reads its settings and its head in one row when it starts; its first
    /// turn goes on from that head to what a read of its own gives, summary included.
    async fn a_session_start_reads_the_settings_and_the_head_its_first_turn_goes_on_from(fresh) {
        let store = Arc::clone(&fresh.store);
        let new = store.session_start("t:new").await.unwrap();
        assert_eq!(new.prefs, SessionPrefs::default());
        assert_eq!(store.conversation_from("t:new", 50, new.head).await.unwrap(), Conversation::default());
        for n in 0..3 {
            answered(&*store, &format!("in-{n}"), SESSION, n).await;
        }
        let rows = store.history_rows(SESSION, 100).await.unwrap();
        assert!(store.begin_compaction(SESSION).await.unwrap());
        store.finish_compaction(SESSION, "q0 and q1", rows[3].0).await.unwrap();
        store.set_session_model(SESSION, Some("local/small")).await.unwrap();
        store.set_verbose(SESSION, true).await.unwrap();
        store.set_queue_mode(SESSION, Some(QueueMode::Steer)).await.unwrap();

        let start = store.session_start(SESSION).await.unwrap();
        let prefs = SessionPrefs { queue_mode: Some(QueueMode::Steer), model: Some("local/small".into()), verbose: true };
        assert_eq!(start.prefs, prefs);
        let from_head = store.conversation_from(SESSION, 50, start.head).await.unwrap();
        assert_eq!(from_head, store.conversation(SESSION, 50).await.unwrap());
        assert_eq!(from_head.summary, Some(HistorySummary { text: "q0 and q1".into(), compactions: 1 }));
        assert_eq!(from_head.history, [ChatMessage::user("q2"), ChatMessage::assistant("a2", Vec::new())]);
    }

    async fn a_new_conversation_drops_the_old_summary_and_status_counts_compactions(fresh) {
        let store = Arc::clone(&fresh.store);
        for n in 0..2 {
            answered(&*store, &format!("in-{n}"), SESSION, n).await;
        }
        let rows = store.history_rows(SESSION, 100).await.unwrap();
        assert!(store.begin_compaction(SESSION).await.unwrap());
        store.finish_compaction(SESSION, "old talk", rows[1].0).await.unwrap();
        assert_eq!(store.session_info(SESSION).await.unwrap().compactions, 1);
        store.archive_session(SESSION).await.unwrap();
        assert_eq!(store.session_summary(SESSION).await.unwrap().map(|s| s.text), None);
        assert!(store.history(SESSION, 100).await.unwrap().is_empty());
    }

    async fn a_groups_usage_is_counted_with_its_runs_once_per_run_and_per_month(fresh) {
        let store = Arc::clone(&fresh.store);
        use switchboard::config::{Identity, Level};
        use switchboard::store::users::Billing;
        const GROUP: &str = "telegram:-1001234567890";
        let alice = Identity::new("telegram", "42");
        store.resolve_user(&alice, "Alice", Level::Guest).await.unwrap();
        let billing = |month: &str, group: Option<&str>| {
            Some(Billing { identity: alice.clone(), month: month.into(), group: group.map(str::to_owned) })
        };
        let finish = |inbound: &'static str, billing: Option<Billing>| {
            let store = &*store;
            async move {
                let run_id = claim_new(store, inbound, GROUP).await;
                let outcome = RunOutcome { billing, ..completed(&run_id, "q", "a") };
                store.finish_run(&run_id, &outcome).await.unwrap();
                (run_id, outcome)
            }
        };
        let (run_id, outcome) = finish("in-1", billing("2025-01", Some(GROUP))).await;
        finish("in-2", billing("2025-01", Some(GROUP))).await;
        finish("in-3", billing("2025-02", Some(GROUP))).await;
        // A run in no configured group counts for the person only.
        finish("in-4", billing("2025-01", None)).await;
        // Finishing a finished run again is refused and counts nothing.
        assert!(matches!(store.finish_run(&run_id, &outcome).await, Err(StoreError::Finish { .. })));

        assert_eq!(store.group_usage(GROUP, "2025-01").await.unwrap(), Usage::new(240, 60));
        assert_eq!(store.group_usage(GROUP, "2025-02").await.unwrap(), Usage::new(120, 30));
        assert_eq!(store.group_usage(GROUP, "2025-03").await.unwrap(), Usage::default());
        assert_eq!(store.group_usage("discord:guild:1", "2025-01").await.unwrap(), Usage::default());
        let user = store.resolve_user(&alice, "", Level::Guest).await.unwrap();
        assert_eq!(store.monthly_usage(user.id, "2025-01").await.unwrap(), Usage::new(360, 90));
    }
    async fn cached_tokens_and_a_compactions_side_runs_are_stored_shown_and_billed(fresh) {
        let store = Arc::clone(&fresh.store);
        use switchboard::config::{Identity, Level};
        use switchboard::store::users::Billing;
        use switchboard::store::{RunKind, SideRun};
        let ann = Identity::new("telegram", "42");
        let user = store.resolve_user(&ann, "Ann", Level::User).await.unwrap();
        let billing = Some(Billing { identity: ann.clone(), month: "2026-12".into(), group: None });
        let run_id = claim_new(&*store, "in-1", SESSION).await;
        let usage = Usage::new(5000, 40).with_cache(4500, 300);
        let turn = RunOutcome { usage, context_tokens: 5040, billing: billing.clone(), ..completed(&run_id, "q", "a") };
        store.finish_run(&run_id, &turn).await.unwrap();
        let flush = SideRun {
            kind: RunKind::MemoryFlush,
            session_key: SESSION.into(),
            inbound_id: "in-1:memory_flush".into(),
            status: RunStatus::Completed,
            model: "test-model".into(),
            usage: Usage::new(3000, 100).with_cache(2800, 0),
            cost_usd: Some(0.001),
            iterations: 2,
            error: None,
            started_at: chrono::Utc::now(),
            billing,
        };
        store.record_side_run(&flush).await.unwrap();
        // The same side run recorded again (a retried compaction) counts once.
        store.record_side_run(&flush).await.unwrap();

        let runs = store.recent_runs(10).await.unwrap();
        let kinds: Vec<RunKind> = runs.iter().map(|run| run.kind).collect();
        assert_eq!(kinds, [RunKind::MemoryFlush, RunKind::Turn]);
        assert_eq!(runs[1].usage, usage);
        assert_eq!((runs[0].usage.cache_read_tokens, runs[0].iterations), (2800, 2));
        let info = store.session_info(SESSION).await.unwrap();
        assert_eq!((info.used.input_tokens, info.used.cache_read_tokens, info.used.output_tokens), (8000, 7300, 140));
        let last = info.last_turn.unwrap();
        assert_eq!((last.usage, last.context_tokens), (usage, 5040), "the side run is not the last turn");
        assert!((info.cost_usd.unwrap() - 0.0052).abs() < 1e-9, "{:?}", info.cost_usd);
        let month = store.monthly_usage(user.id, "2026-12").await.unwrap();
        assert_eq!((month.total(), month.cache_read_tokens), (8140, 7300));
    }
}
