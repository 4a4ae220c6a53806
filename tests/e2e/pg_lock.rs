//! One daemon per PostgreSQL database, also after the connection holding its advisory lock
//! ended (a server restart, a failover, a network cut; here `pg_terminate_backend`): the
//! daemon takes the lock back, turns in flight are answered once, a second `run` started once
//! it has does not start, and a daemon whose lock another process took meanwhile stops.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
use switchboard_channels::{Bus, BusExt};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted, user_texts};
use switchboard_testkit::nats::NatsServer;
use switchboard_testkit::postgres::TempDatabase;
use tokio::task::JoinHandle;

use crate::support::{Daemon, Launch};

/// The daemon's lock ("sb" "db"), as `pg_locks` shows a bigint advisory key: its low half.
const LOCK_OBJID: &str = "1935828066";

/// How long each scripted answer takes: long enough to cut the lock's connection meanwhile.
const ANSWER_DELAY: Duration = Duration::from_millis(1500);

fn launch<'a>(dir: &'a Path, name: &'a str, llm: &FakeLlm, database: &TempDatabase) -> Launch<'a> {
    Launch::new(dir, name, &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_STORE__DATABASE_URL", database.url())
        .env("SWITCHBOARD_STORE__LOCK_CHECK_MS", "100")
}

fn text(n: usize) -> String {
    format!("msg-{n:02}")
}

/// Sends messages `numbers`, each in a chat of its own, whose answers take [`ANSWER_DELAY`].
fn send_slow(daemon: &Daemon, llm: &FakeLlm, numbers: std::ops::Range<usize>) -> Vec<JoinHandle<Option<String>>> {
    numbers
        .map(|n| {
            llm.push_when(&text(n), Scripted::Delay(ANSWER_DELAY, Box::new(Scripted::Text(format!("answer {n}")))));
            let url = daemon.url("/v1/messages");
            tokio::spawn(async move {
                let post =
                    reqwest::Client::new().post(url).json(&json!({"chat_id": format!("c{n}"), "content": text(n)}));
                let response = tokio::time::timeout(Duration::from_secs(20), post.send()).await.ok()?.ok()?;
                let body: serde_json::Value = response.json().await.ok()?;
                body["reply"].as_str().map(str::to_owned)
            })
        })
        .collect()
}

/// The backends holding the daemon's lock, with their `application_name`.
fn lock_holders(database: &TempDatabase) -> String {
    database.sql(&format!(
        "SELECT string_agg(l.pid || ' ' || a.application_name, ',') FROM pg_locks l \
         JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.objid = {LOCK_OBJID} AND l.granted \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ))
}

/// Waits until the lock is held again by a connection other than `before`, named as the lock's.
async fn wait_taken_back(database: &TempDatabase, before: &str, daemon: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = lock_holders(database);
        if !now.is_empty() && now != before {
            assert!(now.ends_with(" switchboard-lock"), "{now}");
            return;
        }
        assert!(Instant::now() < deadline, "the lock was never taken back:\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ends the connection holding the lock, as a server restart or a network cut would.
fn cut_lock_connection(database: &TempDatabase) {
    let ended = database.sql(&format!(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks \
         WHERE locktype = 'advisory' AND objid = {LOCK_OBJID} AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) AS ended"
    ));
    assert_eq!(ended, "1", "no single lock connection to end");
}

/// How many model requests asked each message, by its text.
fn asked(llm: &FakeLlm) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for request in llm.requests() {
        if let Some(last) = user_texts(&request).pop() {
            *counts.entry(last).or_default() += 1;
        }
    }
    counts
}

fn asked_twice(llm: &FakeLlm) -> Vec<(String, usize)> {
    asked(llm).into_iter().filter(|(_, n)| *n > 1).collect()
}

#[tokio::test]
async fn a_cut_lock_connection_is_taken_back_and_every_turn_in_flight_answered_once() {
    let database = TempDatabase::create();
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = launch(dir.path(), "run", &llm, &database).spawn();
    daemon.wait_healthy().await;
    let holder = lock_holders(&database);
    assert!(holder.ends_with(" switchboard-lock"), "the lock's connection is not named: {holder:?}");

    let clients = send_slow(&daemon, &llm, 0..10);
    llm.wait_for_requests(10, Duration::from_secs(10)).await;
    cut_lock_connection(&database);
    wait_taken_back(&database, &holder, &daemon).await;
    // Work goes on once it is back.
    let after = send_slow(&daemon, &llm, 10..12);
    for (n, client) in clients.into_iter().chain(after).enumerate() {
        assert_eq!(client.await.unwrap(), Some(format!("answer {n}")), "client {n}:\n{}", daemon.logs());
    }
    assert_eq!(asked_twice(&llm), [], "a message reached the model twice");
    let logs = daemon.logs();
    assert!(logs.contains("lost the database lock") && logs.contains("took the database lock back"), "{logs}");
    assert!(daemon.is_alive());
}

/// A second `run` started once the first took its lock back (within milliseconds of a cut the
/// server reports; a silent one within `store.lock_check_ms`) refuses to start, and the first
/// answers every client once. One started inside that window may win the lock instead; then
/// the first stops (`a_daemon_whose_lock_was_taken_meanwhile_stops_with_a_clear_error`).
#[tokio::test]
async fn a_second_run_started_after_the_lock_was_taken_back_refuses_to_start() {
    let database = TempDatabase::create();
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut first = launch(dir.path(), "first", &llm, &database).spawn();
    first.wait_healthy().await;
    let holder = lock_holders(&database);
    let clients = send_slow(&first, &llm, 0..5);
    llm.wait_for_requests(5, Duration::from_secs(10)).await;

    cut_lock_connection(&database);
    wait_taken_back(&database, &holder, &first).await;
    let mut second = launch(dir.path(), "second", &llm, &database).spawn();
    let status = second.wait_exit(Duration::from_secs(10)).await;
    assert!(!status.success(), "{status}");
    let said = second.logs();
    assert!(said.contains("in use by another switchboard process"), "{said}");
    let name = database.url().rsplit('/').next().unwrap();
    assert!(said.contains(&format!("database postgres://postgres@127.0.0.1:5432/{name}")), "{said}");

    for (n, client) in clients.into_iter().enumerate() {
        assert_eq!(client.await.unwrap(), Some(format!("answer {n}")), "client {n}:\n{}", first.logs());
    }
    let counts = asked(&llm);
    for n in 0..5 {
        assert_eq!(counts.get(&text(n)), Some(&1), "{counts:?}\n{}", first.logs());
    }
    assert!(first.is_alive(), "{}", first.logs());
    let new_turn = send_slow(&first, &llm, 5..6).pop().unwrap();
    assert_eq!(new_turn.await.unwrap().as_deref(), Some("answer 5"), "{}", first.logs());
}

/// Another process that takes the lock while this daemon's connection is gone (here a `psql`
/// queued for it, which the server hands the lock to as the connection ends): the daemon
/// stops, saying why and what to do.
#[tokio::test]
async fn a_daemon_whose_lock_was_taken_meanwhile_stops_with_a_clear_error() {
    let database = TempDatabase::create();
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = launch(dir.path(), "run", &llm, &database).spawn();
    daemon.wait_healthy().await;
    let url = database.url().to_owned();
    let waiter = std::thread::spawn(move || {
        let sql = format!("SELECT pg_advisory_lock({LOCK_OBJID}); SELECT pg_sleep(3)");
        std::process::Command::new("psql").args([url.as_str(), "-X", "-q", "-c", &sql]).output().unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    while database.sql(waiting) != "1" {
        assert!(Instant::now() < deadline, "psql never queued for the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cut_lock_connection(&database);

    let status = daemon.wait_exit(Duration::from_secs(5)).await;
    assert!(!status.success(), "{status}");
    let logs = daemon.logs();
    let name = database.url().rsplit('/').next().unwrap();
    let said = logs.lines().find(|l| l.starts_with("switchboard: lost the lock on the database"));
    let said = said.unwrap_or_else(|| panic!("no clear error:\n{logs}"));
    assert!(said.contains(name) && said.contains("another switchboard process took it meanwhile"), "{said}");
    assert!(said.contains("Stop the other process") && said.contains("switchboard-lock"), "{said}");
    assert!(waiter.join().unwrap().status.success());
}

/// `switchboard agent` on NATS (the shared lock): the same, with messages pulled from the bus.
#[tokio::test]
async fn a_worker_on_nats_takes_its_shared_lock_back_and_answers_each_message_once() {
    let nats = NatsServer::start().await;
    let database = TempDatabase::create();
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let worker = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_STORE__DATABASE_URL", database.url())
        .env("SWITCHBOARD_STORE__LOCK_CHECK_MS", "100")
        .spawn();
    worker.wait_for_log("worker started").await;
    let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
    let mut replies = bus.outbound("test").await.unwrap();
    let publish = |n: usize| {
        let reply = Scripted::Text(format!("answer {n}"));
        llm.push_when(&text(n), Scripted::Delay(ANSWER_DELAY, Box::new(reply)));
        let sender = Sender { id: "u1".into(), name: "U".into(), is_bot: false };
        InboundMessage::user("test", &format!("c{n}"), sender, &text(n))
    };
    for n in 0..5 {
        bus.publish_inbound(&publish(n)).await.unwrap();
    }
    llm.wait_for_requests(5, Duration::from_secs(10)).await;
    let holder = lock_holders(&database);
    cut_lock_connection(&database);
    wait_taken_back(&database, &holder, &worker).await;
    bus.publish_inbound(&publish(5)).await.unwrap();

    let mut answers = Vec::new();
    while answers.len() < 6 {
        let next = tokio::time::timeout(Duration::from_secs(20), replies.next()).await;
        let delivery = next.unwrap_or_else(|_| panic!("only {answers:?}:\n{}", worker.logs())).unwrap().unwrap();
        let reply: OutboundMessage = delivery.decode().unwrap();
        delivery.ack().await.unwrap();
        answers.push(reply.content);
    }
    answers.sort();
    assert_eq!(answers, (0..6).map(|n| format!("answer {n}")).collect::<Vec<_>>());
    assert_eq!(asked_twice(&llm), [], "a message reached the model twice");
    assert!(worker.logs().contains("took the database lock back"));
}
