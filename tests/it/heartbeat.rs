//! Heartbeats: when a slot fires or is skipped (with a hand-moved clock and direct `tick()`
//! calls), exactly once across two schedulers on one store, and through a real worker on both
//! buses: the owner's direct chat, configured topics and threads, a named agent's own
//! section, and `HEARTBEAT_OK` suppression (which leaves no transcript).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use serde_json::json;
use switchboard::clock::{ManualClock, to_store_precision};
use switchboard::config::{BudgetsConfig, Config, HeartbeatConfig, PermissionsConfig, UsersConfig};
use switchboard::provider::Role;
use switchboard::scheduler::heartbeat::{HeartbeatAgent, HeartbeatOutcome, HeartbeatSettings, Heartbeats, SkipReason};
use switchboard::store::Database;
use switchboard::store::sqlite::SqliteStore;
use switchboard::store::{RunClaim, RunOutcome, RunStatus};
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard_channels::contract::{ChatAddress, InboundKind, InboundMessage, Origin, Sender};
use switchboard_channels::{Bus, BusExt, Deliveries};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

use crate::common::{AgentSpec, BusKind, Setup, TestBus, next_out};

const MINUTE: Duration = Duration::from_secs(60);
const TASKS: &str = "# Heartbeat checklist\n\n- [ ] Tell me when the nightly backup failed\n";
const TEMPLATE: &str = include_str!("../../templates/workspace/HEARTBEAT.md");
/// What the scripted model reports on a heartbeat (an echo of the prompt would end with
/// HEARTBEAT_OK and be suppressed).
const REPORT: &str = "The nightly backup failed.";

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
}

fn settings(target: &str, active: Option<(&str, &str, &str)>) -> HeartbeatSettings {
    let mut config = HeartbeatConfig { target: target.into(), ..HeartbeatConfig::default() };
    if let Some((start, end, zone)) = active {
        config.active_hours.start = start.into();
        config.active_hours.end = end.into();
        config.timezone = zone.into();
    }
    HeartbeatSettings::from_config(&config, "UTC").unwrap()
}

/// For the owner's chat `telegram:42`, every `minutes`.
fn every(minutes: u64) -> HeartbeatSettings {
    let config = HeartbeatConfig { target: "telegram:42".into(), every_minutes: minutes, ..HeartbeatConfig::default() };
    HeartbeatSettings::from_config(&config, "UTC").unwrap()
}

/// A store, an in-process bus, a clock and one agent's workspace, without a worker.
struct Rig {
    dir: tempfile::TempDir,
    store: Arc<dyn Database>,
    bus: Arc<dyn Bus>,
    inbound: Deliveries,
    clock: ManualClock,
}

impl Rig {
    async fn new(start: DateTime<Utc>) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
        let bus = TestBus::start(BusKind::InProcess).await.bus;
        let inbound = bus.inbound().await.unwrap();
        std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
        Rig { dir, store, bus, inbound, clock: ManualClock::new(start) }
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    fn write_tasks(&self, text: &str) {
        std::fs::write(self.workspace().join("HEARTBEAT.md"), text).unwrap();
    }

    fn heartbeats(&self, settings: HeartbeatSettings) -> Heartbeats {
        let agent = HeartbeatAgent { name: "main".into(), workspace: self.workspace(), settings };
        Heartbeats::new(self.store.clone(), self.bus.clone(), self.clock.clock(), vec![agent])
    }

    /// The heartbeat messages published since the last call.
    async fn published(&mut self) -> Vec<InboundMessage> {
        let mut found = Vec::new();
        while let Ok(Some(delivery)) = tokio::time::timeout(Duration::from_millis(150), self.inbound.next()).await {
            let delivery = delivery.unwrap();
            found.push(delivery.decode().unwrap());
            delivery.ack().await.unwrap();
        }
        found
    }
}

async fn tick_one(heartbeats: &Heartbeats) -> HeartbeatOutcome {
    let mut outcomes = heartbeats.tick().await.unwrap();
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    outcomes.remove(0)
}

fn skipped(reason: SkipReason) -> HeartbeatOutcome {
    HeartbeatOutcome::Skipped { agent: "main".into(), reason }
}

fn is_fired(outcome: &HeartbeatOutcome) -> bool {
    matches!(outcome, HeartbeatOutcome::Fired { .. })
}

#[tokio::test]
async fn nothing_to_do_in_heartbeat_md_skips_the_slot() {
    let mut rig = Rig::new(utc("2026-01-15T10:00:00Z")).await;
    let heartbeats = rig.heartbeats(settings("telegram:42", None));
    // The first heartbeat comes one interval after start, not at start.
    assert!(matches!(tick_one(&heartbeats).await, HeartbeatOutcome::NotDue { .. }));
    for file in [None, Some(TEMPLATE), Some("# Done\n- [x] Renew the certificate\n<!-- later:\n- more -->\n")] {
        if let Some(text) = file {
            rig.write_tasks(text);
        }
        rig.clock.advance(30 * MINUTE);
        assert_eq!(tick_one(&heartbeats).await, skipped(SkipReason::NoTasks), "{file:?}");
        assert!(rig.published().await.is_empty(), "{file:?}");
        // The slot is used up: nothing more until the next one.
        assert!(matches!(tick_one(&heartbeats).await, HeartbeatOutcome::NotDue { .. }));
    }
    rig.write_tasks(TASKS);
    rig.clock.advance(30 * MINUTE);
    assert!(is_fired(&tick_one(&heartbeats).await));
    let published = rig.published().await;
    assert_eq!(published.len(), 1);
    let msg = &published[0];
    let slot = utc("2026-01-15T12:00:00Z");
    assert_eq!(msg.id, format!("heartbeat:main:{}", slot.timestamp()));
    assert_eq!((msg.kind, msg.channel.as_str(), msg.chat_id.as_str()), (InboundKind::System, "telegram", "42"));
    let origin = msg.origin.as_ref().unwrap();
    assert_eq!((origin.kind.as_str(), origin.id.as_str()), ("heartbeat", "main"));
    assert_eq!(msg.metadata["agent"], json!("main"));
    assert_eq!(msg.received_at, slot);
    assert!(msg.content.contains("HEARTBEAT.md") && msg.content.contains("HEARTBEAT_OK"), "{}", msg.content);
}

/// One agent whose `HEARTBEAT.md` cannot be read does not keep the others' heartbeats back.
#[tokio::test]
async fn one_agents_failure_does_not_hold_up_the_others() {
    let mut rig = Rig::new(utc("2026-01-15T10:00:00Z")).await;
    rig.write_tasks(TASKS);
    // A directory where the file should be: reading it fails.
    let broken = rig.dir.path().join("broken");
    std::fs::create_dir_all(broken.join("HEARTBEAT.md")).unwrap();
    let agents = vec![
        HeartbeatAgent { name: "broken".into(), workspace: broken, settings: every(30) },
        HeartbeatAgent { name: "main".into(), workspace: rig.workspace(), settings: every(30) },
    ];
    let heartbeats = Heartbeats::new(rig.store.clone(), rig.bus.clone(), rig.clock.clock(), agents);
    heartbeats.tick().await.unwrap();
    rig.clock.advance(30 * MINUTE);
    let err = heartbeats.tick().await.unwrap_err();
    assert!(err.to_string().contains("HEARTBEAT.md"), "{err}");
    let published = rig.published().await;
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(published[0].metadata["agent"], json!("main"));
}

#[tokio::test]
async fn active_hours_are_read_in_their_zone() {
    // Winter: Berlin is UTC+1. The first slot is 21:30 UTC = 22:30 in Berlin.
    let mut rig = Rig::new(utc("2026-01-15T21:00:00Z")).await;
    rig.write_tasks(TASKS);
    let heartbeats = rig.heartbeats(settings("telegram:42", Some(("08:00", "22:00", "Europe/Berlin"))));
    tick_one(&heartbeats).await;
    rig.clock.set(utc("2026-01-15T21:30:00Z"));
    assert_eq!(tick_one(&heartbeats).await, skipped(SkipReason::OutsideActiveHours));
    rig.clock.set(utc("2026-01-16T06:30:00Z")); // 07:30 in Berlin
    assert_eq!(tick_one(&heartbeats).await, skipped(SkipReason::OutsideActiveHours));
    assert!(rig.published().await.is_empty());
    rig.clock.set(utc("2026-01-16T07:30:00Z")); // 08:30 in Berlin
    assert!(is_fired(&tick_one(&heartbeats).await));
    assert_eq!(rig.published().await.len(), 1);
}

#[tokio::test]
async fn a_window_may_span_midnight() {
    let mut rig = Rig::new(utc("2026-01-15T11:30:00Z")).await;
    rig.write_tasks(TASKS);
    let heartbeats = rig.heartbeats(settings("telegram:42", Some(("22:00", "06:00", "UTC"))));
    tick_one(&heartbeats).await;
    rig.clock.set(utc("2026-01-15T12:00:00Z"));
    assert_eq!(tick_one(&heartbeats).await, skipped(SkipReason::OutsideActiveHours));
    rig.clock.set(utc("2026-01-15T23:00:00Z"));
    assert!(is_fired(&tick_one(&heartbeats).await));
    rig.clock.set(utc("2026-01-16T05:30:00Z"));
    assert!(is_fired(&tick_one(&heartbeats).await));
    rig.clock.set(utc("2026-01-16T06:00:00Z"));
    assert_eq!(tick_one(&heartbeats).await, skipped(SkipReason::OutsideActiveHours));
    assert_eq!(rig.published().await.len(), 2);
}

#[tokio::test]
async fn a_busy_target_session_is_tried_again_after_a_minute() {
    let mut rig = Rig::new(utc("2026-01-15T10:00:00Z")).await;
    rig.write_tasks(TASKS);
    let heartbeats = rig.heartbeats(settings("telegram:42", None));
    tick_one(&heartbeats).await;
    let RunClaim::New { run_id } = rig.store.claim_run("telegram:42:1", "telegram:42").await.unwrap() else {
        panic!("a fresh inbound id is a new run")
    };
    rig.clock.advance(30 * MINUTE);
    assert_eq!(tick_one(&heartbeats).await, skipped(SkipReason::Busy));
    rig.clock.advance(MINUTE / 2);
    assert!(matches!(tick_one(&heartbeats).await, HeartbeatOutcome::NotDue { .. }));
    rig.clock.advance(MINUTE / 2);
    assert_eq!(tick_one(&heartbeats).await, skipped(SkipReason::Busy));
    assert!(rig.published().await.is_empty());
    let finished = RunOutcome::without_model(RunStatus::Completed, None, None);
    rig.store.finish_run(&run_id, &finished).await.unwrap();
    rig.clock.advance(MINUTE);
    assert!(is_fired(&tick_one(&heartbeats).await));
    assert_eq!(rig.published().await.len(), 1);
}

#[tokio::test]
async fn without_an_owner_direct_chat_there_is_no_target() {
    let mut rig = Rig::new(utc("2026-01-15T10:00:00Z")).await;
    rig.write_tasks(TASKS);
    let heartbeats = rig.heartbeats(settings("owner", None));
    tick_one(&heartbeats).await;
    rig.clock.advance(30 * MINUTE);
    assert_eq!(tick_one(&heartbeats).await, skipped(SkipReason::NoTarget));
    assert!(rig.published().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedulers_on_one_store_send_one_message_per_slot() {
    let mut rig = Rig::new(utc("2026-01-15T10:00:00Z")).await;
    rig.write_tasks(TASKS);
    let other_store = Arc::new(SqliteStore::open(&rig.dir.path().join("s.db")).await.unwrap());
    let first = Arc::new(rig.heartbeats(settings("telegram:42", None)));
    let agent =
        HeartbeatAgent { name: "main".into(), workspace: rig.workspace(), settings: settings("telegram:42", None) };
    let second = Arc::new(Heartbeats::new(other_store, rig.bus.clone(), rig.clock.clock(), vec![agent]));
    // Each on its own task, so on a multi-threaded runtime they really race.
    let both = || {
        let (a, b) = (Arc::clone(&first), Arc::clone(&second));
        async move {
            let (a, b) =
                tokio::join!(tokio::spawn(async move { a.tick().await }), tokio::spawn(async move { b.tick().await }));
            a.unwrap().unwrap().into_iter().chain(b.unwrap().unwrap()).collect::<Vec<_>>()
        }
    };
    assert!(both().await.iter().all(|o| matches!(o, HeartbeatOutcome::NotDue { .. })));
    let mut ids = Vec::new();
    for _ in 0..4 {
        rig.clock.advance(30 * MINUTE);
        let outcomes = both().await;
        assert_eq!(outcomes.iter().filter(|o| is_fired(o)).count(), 1, "{outcomes:?}");
        ids.extend(rig.published().await.into_iter().map(|msg| msg.id));
    }
    assert_eq!(ids.len(), 4, "{ids:?}");
    ids.dedup();
    assert_eq!(ids.len(), 4, "{ids:?}");
}

#[tokio::test]
async fn a_run_left_running_by_a_crashed_worker_stops_blocking_heartbeats_after_the_message_age() {
    // The store stamps runs by the real clock, so the hand clock starts at the real time.
    let rig = Rig::new(crate::common::real_now()).await;
    rig.write_tasks(TASKS);
    let heartbeats = rig.heartbeats(every(30)).with_max_message_age(Duration::from_secs(3600));
    tick_one(&heartbeats).await;
    // A run that never finishes: its worker died and its message is never redelivered.
    let claim = rig.store.claim_run("telegram:42:1", &owner_chat().session_key()).await.unwrap();
    assert!(matches!(claim, RunClaim::New { .. }), "{claim:?}");
    rig.clock.advance(30 * MINUTE);
    let busy = skipped(SkipReason::Busy);
    assert_eq!(tick_one(&heartbeats).await, busy, "a recent running run makes the session busy");
    rig.clock.advance(29 * MINUTE);
    assert_eq!(tick_one(&heartbeats).await, busy, "59 minutes old");
    rig.clock.advance(2 * MINUTE);
    let outcome = tick_one(&heartbeats).await;
    assert!(is_fired(&outcome), "an hour-old run is abandoned: {outcome:?}");
}

#[tokio::test]
async fn a_shortened_interval_brings_the_next_heartbeat_forward() {
    let rig = Rig::new(crate::common::real_now()).await;
    rig.write_tasks(TASKS);
    let start = to_store_precision((rig.clock.clock())());
    let next_at = |outcome: HeartbeatOutcome| match outcome {
        HeartbeatOutcome::NotDue { next_at, .. } => next_at,
        other => panic!("not due expected: {other:?}"),
    };
    let daily = rig.heartbeats(every(1440));
    assert_eq!(next_at(tick_one(&daily).await), start + chrono::Duration::days(1));
    rig.clock.advance(10 * MINUTE);
    assert_eq!(next_at(tick_one(&daily).await), start + chrono::Duration::days(1), "a day is within a day");
    // The owner changes `every_minutes` from 1440 to 30 and restarts.
    let half_hourly = rig.heartbeats(every(30));
    let now = to_store_precision((rig.clock.clock())());
    assert_eq!(next_at(tick_one(&half_hourly).await), now + chrono::Duration::minutes(30));
    rig.clock.advance(30 * MINUTE);
    let outcome = tick_one(&half_hourly).await;
    assert!(is_fired(&outcome), "{outcome:?}");
    assert_eq!(next_at(tick_one(&half_hourly).await), now + chrono::Duration::minutes(60));
}

// ---- Through a real worker, on both buses ----

/// The worker's settings: the owner is `telegram:42`.
fn worker_settings() -> WorkerSettings {
    let users = UsersConfig { owners: vec!["telegram:42".into()], ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    WorkerSettings { access, ..WorkerSettings::default() }
}

/// A worker for `agents` (only the built-in tools) on a bus of `kind`.
fn worker_setup(kind: BusKind, agents: Vec<AgentSpec>) -> Setup {
    Setup { settings: worker_settings(), agents, message_tool: false, ..Setup::new(kind) }
}

fn owner_chat() -> ChatAddress {
    ChatAddress { channel: "telegram".into(), chat_id: "42".into(), thread_id: None, is_group: false }
}

/// The heartbeat of `slot` (a Unix time) for `main` into the owner's direct chat.
fn heartbeat(slot: i64) -> InboundMessage {
    let origin = Origin { kind: "heartbeat".into(), id: "main".into() };
    InboundMessage::system(format!("heartbeat:main:{slot}"), owner_chat(), origin, "Work through HEARTBEAT.md.")
}

fn owner(chat: &str, text: &str, is_group: bool) -> InboundMessage {
    let sender = Sender { id: "42".into(), name: "Olga".into(), is_bot: false };
    InboundMessage { is_group, mentioned: true, ..InboundMessage::user("telegram", chat, sender, text) }
}

/// Messages older than the worker's age limit (by the real clock) are dropped, so the hand
/// clock starts at the real time.
fn clock_now() -> ManualClock {
    ManualClock::new(crate::common::real_now())
}

async fn owner_direct_chat(kind: BusKind) {
    let h = worker_setup(kind, vec![AgentSpec::new("main", "fake-model", "workspace")]).start().await;
    let (bus, store, llm, workspace) = (&h.bus, &h.store, &h.llm, h.workspace.clone());
    for reply in ["Hi.", "Hi all.", REPORT] {
        llm.push(Scripted::Text(reply.into()));
    }
    let mut out = bus.outbound("telegram").await.unwrap();
    // The owner writes directly, then in a group: the group is never a heartbeat target.
    bus.publish_inbound(&owner("42", "hello in private", false)).await.unwrap();
    next_out(&mut out).await;
    bus.publish_inbound(&owner("-100555", "hello group", true)).await.unwrap();
    assert_eq!(next_out(&mut out).await.chat_id, "-100555");

    std::fs::write(workspace.join("HEARTBEAT.md"), TASKS).unwrap();
    let clock = clock_now();
    let settings = HeartbeatSettings::from_config(&HeartbeatConfig::default(), "UTC").unwrap();
    let hb = HeartbeatAgent { name: "main".into(), workspace, settings };
    let heartbeats = Heartbeats::new(store.clone(), bus.clone(), clock.clock(), vec![hb]);
    assert!(matches!(tick_one(&heartbeats).await, HeartbeatOutcome::NotDue { .. }));
    clock.advance(30 * MINUTE);
    let HeartbeatOutcome::Fired { chat, .. } = tick_one(&heartbeats).await else { panic!("did not fire") };
    assert_eq!((chat.chat_id.as_str(), chat.is_group), ("42", false));
    let reply = next_out(&mut out).await;
    assert_eq!((reply.channel.as_str(), reply.chat_id.as_str(), reply.thread_id), ("telegram", "42", None));
    assert_eq!(reply.content, REPORT);
    assert!(matches!(tick_one(&heartbeats).await, HeartbeatOutcome::NotDue { .. }));
    // Two messages from the owner and one heartbeat reached the model, nothing more.
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[2]["messages"].to_string().contains("read HEARTBEAT.md"), "{}", requests[2]);
    h.shutdown.cancel();
}

/// `[heartbeat]` targets a Telegram topic; `[agents.ops.heartbeat]` a Discord thread, every
/// 10 minutes, in ops's own sessions.
async fn configured_targets(kind: BusKind) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let text = format!(
        "data_dir = {:?}\n[heartbeat]\ntarget = \"telegram:-100123:topic:7\"\n\
         [agents.ops.heartbeat]\ntarget = \"discord:55:thread:9\"\nevery_minutes = 10\n",
        dir.path().display().to_string()
    );
    std::fs::write(&path, text).unwrap();
    let config = Config::load(Some(&path), &HashMap::new()).unwrap();
    let agents = vec![
        AgentSpec::new("main", "fake-model", &config.agent.workspace),
        AgentSpec::new("ops", "fake-model", &config.agents["ops"].workspace),
    ];
    let setup = Setup { store_path: Some(config.store_path().to_path_buf()), ..worker_setup(kind, agents) };
    let h = setup.start().await;
    let (bus, store) = (&h.bus, &h.store);
    for _ in 0..3 {
        h.llm.push(Scripted::Text(REPORT.into()));
    }
    let mut heartbeat_agents = Vec::new();
    for (name, workspace) in [("main", &config.agent.workspace), ("ops", &config.agents["ops"].workspace)] {
        std::fs::write(workspace.join("HEARTBEAT.md"), TASKS).unwrap();
        let settings = HeartbeatSettings::from_config(config.heartbeat_for(name), &config.agent.timezone).unwrap();
        heartbeat_agents.push(HeartbeatAgent { name: name.into(), workspace: workspace.clone(), settings });
    }
    let clock = clock_now();
    let heartbeats = Heartbeats::new(store.clone(), bus.clone(), clock.clock(), heartbeat_agents);
    let (mut telegram, mut discord) = (bus.outbound("telegram").await.unwrap(), bus.outbound("discord").await.unwrap());
    heartbeats.tick().await.unwrap();
    clock.advance(10 * MINUTE);
    let outcomes = heartbeats.tick().await.unwrap();
    assert_eq!(outcomes.iter().filter(|o| is_fired(o)).count(), 1, "{outcomes:?}");
    let reply = next_out(&mut discord).await;
    assert_eq!((reply.chat_id.as_str(), reply.thread_id.as_deref()), ("55", Some("9")));
    assert_eq!(reply.metadata["session_key"], json!("ops/discord:55:thread:9"));
    clock.advance(20 * MINUTE);
    let outcomes = heartbeats.tick().await.unwrap();
    assert_eq!(outcomes.iter().filter(|o| is_fired(o)).count(), 2, "{outcomes:?}");
    let reply = next_out(&mut telegram).await;
    assert_eq!((reply.chat_id.as_str(), reply.thread_id.as_deref()), ("-100123", Some("7")));
    assert_eq!(reply.metadata["session_key"], json!("telegram:-100123:topic:7"));
    assert_eq!(reply.content, REPORT);
    assert_eq!(next_out(&mut discord).await.thread_id.as_deref(), Some("9"));
    h.shutdown.cancel();
}

/// Suppression through a worker; `ops` allows 5 characters besides the token.
async fn suppression(kind: BusKind) {
    let ops = AgentSpec::new("ops", "fake-model", "agents/ops").heartbeat_ack_max_chars(5);
    let agents = vec![AgentSpec::new("main", "fake-model", "workspace"), ops];
    let h = worker_setup(kind, agents).start().await;
    let (bus, store, llm) = (&h.bus, &h.store, &h.llm);
    let report = "The nightly backup failed: the disk is full. ".repeat(8);
    let report = report.trim_end();
    for reply in [
        "HEARTBEAT_OK".to_owned(),
        "HEARTBEAT_OK — all quiet.".to_owned(),
        "Nothing to report. HEARTBEAT_OK".to_owned(),
        "**HEARTBEAT_OK**".to_owned(),
        format!("{report}\n\nHEARTBEAT_OK"),
        "HEARTBEAT_OK — all quiet.".to_owned(),
        "HEARTBEAT_OK".to_owned(),
    ] {
        llm.push(Scripted::Text(reply));
    }
    let (main_ws, ops_ws) = (h.workspace.clone(), h.dir.path().join("agents/ops"));
    let clock = clock_now();
    let mut by_agent = Vec::new();
    for (name, workspace) in [("main", main_ws), ("ops", ops_ws)] {
        std::fs::write(workspace.join("HEARTBEAT.md"), TASKS).unwrap();
        let hb = HeartbeatAgent { name: name.into(), workspace, settings: settings("telegram:42", None) };
        let heartbeats = Heartbeats::new(store.clone(), bus.clone(), clock.clock(), vec![hb]);
        tick_one(&heartbeats).await;
        by_agent.push(heartbeats);
    }
    let (main, ops) = (&by_agent[0], &by_agent[1]);
    let mut out = bus.outbound("telegram").await.unwrap();
    for expected in ["", "", "", "", report] {
        clock.advance(30 * MINUTE);
        assert!(is_fired(&tick_one(main).await));
        let reply = next_out(&mut out).await;
        assert_eq!(reply.content, expected);
        assert_eq!(reply.metadata.get("suppressed").is_some(), expected.is_empty(), "{reply:?}");
    }
    assert!(is_fired(&tick_one(ops).await));
    let reply = next_out(&mut out).await;
    assert_eq!((reply.content.as_str(), &reply.metadata["session_key"]), ("all quiet.", &json!("ops/telegram:42")));
    // A person's message whose answer is the token is answered as written.
    bus.publish_inbound(&owner("42", "say the heartbeat word", false)).await.unwrap();
    let reply = next_out(&mut out).await;
    assert_eq!(reply.content, "HEARTBEAT_OK");
    assert!(reply.metadata.get("suppressed").is_none(), "{reply:?}");
    assert_eq!(store.recent_runs(10).await.unwrap().len(), 7);
    h.shutdown.cancel();
}

/// A suppressed heartbeat's turn stays out of the session's history (the run is still
/// recorded); one that reports something is kept.
async fn no_transcript(kind: BusKind) {
    let h = worker_setup(kind, vec![AgentSpec::new("main", "fake-model", "workspace")]).start().await;
    let (bus, store, llm) = (&h.bus, &h.store, &h.llm);
    let mut out = bus.outbound("telegram").await.unwrap();
    let session = owner_chat().session_key();

    llm.push(Scripted::Text("Hello Olga.".into()));
    let sender = Sender { id: "42".into(), name: "Olga".into(), is_bot: false };
    bus.publish_inbound(&InboundMessage::user("telegram", "42", sender, "hi")).await.unwrap();
    assert_eq!(next_out(&mut out).await.content, "Hello Olga.");
    let before = store.history(&session, 100).await.unwrap();
    assert_eq!(before.len(), 2, "{before:?}");

    let now = Utc::now().timestamp();
    for (i, quiet) in ["HEARTBEAT_OK", "Nothing to report. HEARTBEAT_OK"].into_iter().enumerate() {
        llm.push(Scripted::Text(quiet.into()));
        bus.publish_inbound(&heartbeat(now + i as i64)).await.unwrap();
        let reply = next_out(&mut out).await;
        assert_eq!(reply.metadata.get("suppressed"), Some(&json!(true)), "{reply:?}");
        assert_eq!(store.history(&session, 100).await.unwrap(), before, "after {quiet:?}");
    }
    // The runs are recorded all the same: a redelivery is answered from the store.
    assert_eq!(store.recent_runs(10).await.unwrap().len(), 3);

    llm.push(Scripted::Text(REPORT.into()));
    bus.publish_inbound(&heartbeat(now + 10)).await.unwrap();
    assert_eq!(next_out(&mut out).await.content, REPORT);
    let after = store.history(&session, 100).await.unwrap();
    assert_eq!(after.len(), 4, "{after:?}");
    assert_eq!(after[..2], before[..]);
    assert_eq!((after[3].role, after[3].content.as_str()), (Role::Assistant, REPORT));
    h.shutdown.cancel();
}

crate::both_buses! {
    fires_into_the_owners_direct_chat => owner_direct_chat();
    fires_into_configured_topics_and_threads => configured_targets();
    heartbeat_ok_replies_are_suppressed => suppression();
    suppressed_heartbeats_leave_no_transcript => no_transcript();
}

// ---- The daemon ----

#[tokio::test]
async fn switchboard_run_starts_and_stops_the_heartbeats() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = crate::support::Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url()).spawn();
    daemon.wait_for_log("heartbeats started").await;
    daemon.signal("TERM");
    daemon.wait_for_log("heartbeats stopped").await;
}

#[tokio::test]
async fn a_too_short_interval_stops_the_start_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("OPENAI_API_KEY", "k"), ("SWITCHBOARD_MODEL", "m"), ("SWITCHBOARD_HEARTBEAT__EVERY_MINUTES", "2")];
    let (status, stderr, _) = crate::support::run_to_exit(dir.path(), &["run"], &env);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("heartbeat.every_minutes") && stderr.contains("minimum of 5"), "{stderr}");
}
