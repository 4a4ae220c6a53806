//! Fixes to the automation (heartbeats, sub-agents) found after the first merge, each shown
//! through the component a user meets it in.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{SubsecRound, Utc};
use futures_util::StreamExt;
use switchboard::agent::{Agent, AgentSettings};
use switchboard::clock::ManualClock;
use switchboard::config::{BudgetsConfig, HeartbeatConfig, ModelPrice, PermissionsConfig, UsersConfig};
use switchboard::provider::Role;
use switchboard::provider::openai::{OpenAiConfig, OpenAiProvider};
use switchboard::provider::pricing::PriceTable;
use switchboard::scheduler::heartbeat::{HeartbeatAgent, HeartbeatOutcome, HeartbeatSettings, Heartbeats, SkipReason};
use switchboard::store::sqlite::SqliteStore;
use switchboard::store::subagents::{SubagentStatus, SubagentStore as _};
use switchboard::store::{RunClaim, Store as _};
use switchboard::subagents::{SpawnRequest, SubagentManager};
use switchboard::tools::{ToolLimits, ToolRegistry};
use switchboard::users::AccessPolicy;
use switchboard::worker::agents::Agents;
use switchboard::worker::{Worker, WorkerSettings};
use switchboard_channels::bus::memory::MemoryBus;
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_channels::contract::{ChatAddress, InboundMessage, Origin, OutboundMessage, Sender, Usage};
use switchboard_channels::{Bus, BusExt, Deliveries};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::nats::NatsServer;
use tokio_util::sync::CancellationToken;

const MINUTE: Duration = Duration::from_secs(60);
const OWNER_CHAT: &str = "telegram:42";

/// An agent answering with the scripted model, working in `workspace` (created).
fn agent(llm: &FakeLlm, workspace: &Path) -> Arc<Agent> {
    agent_priced(llm, workspace, PriceTable::default())
}

/// Like [`agent`], with a price for its model.
fn agent_priced(llm: &FakeLlm, workspace: &Path, prices: PriceTable) -> Arc<Agent> {
    std::fs::create_dir_all(workspace).unwrap();
    let provider = OpenAiProvider::new(OpenAiConfig {
        name: "fake".into(),
        base_url: llm.base_url(),
        api_key: None,
        request_timeout: Duration::from_secs(30),
        stream: false,
        extra_headers: vec![],
    })
    .unwrap();
    let settings = AgentSettings {
        name: "main".into(),
        system_prompt: "test".into(),
        model: "fake-model".into(),
        max_iterations: 5,
        max_tokens: None,
        temperature: None,
        stream: false,
        prices,
        workspace: workspace.to_path_buf(),
    };
    Arc::new(Agent::new(Arc::new(provider), ToolRegistry::with_builtins(ToolLimits::default()), settings))
}

/// A worker for the main agent on `bus` whose owner is `telegram:42`; stops with the token.
fn start_worker(bus: Arc<dyn Bus>, store: Arc<SqliteStore>, agent: Arc<Agent>) -> CancellationToken {
    let users = UsersConfig { owners: vec![OWNER_CHAT.into()], ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    let settings = WorkerSettings { access, heartbeat_ack_max_chars: 300, ..WorkerSettings::default() };
    let agents = Agents::new(vec![agent], "main", Vec::new()).unwrap();
    let worker = Worker::with_agents(bus, store, agents, settings);
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move { worker.run(token).await.unwrap() });
    shutdown
}

async fn next_reply(out: &mut Deliveries) -> OutboundMessage {
    let delivery = tokio::time::timeout(Duration::from_secs(15), out.next()).await.expect("no reply").unwrap().unwrap();
    let reply = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    reply
}

fn owner_chat() -> ChatAddress {
    ChatAddress { channel: "telegram".into(), chat_id: "42".into(), thread_id: None, is_group: false }
}

fn heartbeat(slot: i64) -> InboundMessage {
    let origin = Origin { kind: "heartbeat".into(), id: "main".into() };
    InboundMessage::system(format!("heartbeat:main:{slot}"), owner_chat(), origin, "Work through HEARTBEAT.md.")
}

async fn nats_bus(nats: &NatsServer) -> Arc<dyn Bus> {
    Arc::new(NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap())
}

// ---- A suppressed heartbeat leaves no transcript ----

async fn suppressed_heartbeats_leave_no_transcript_on(bus: Arc<dyn Bus>) {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let shutdown = start_worker(bus.clone(), store.clone(), agent(&llm, &dir.path().join("workspace")));
    let mut out = bus.outbound("telegram").await.unwrap();
    let session = owner_chat().session_key();

    llm.push(Scripted::Text("Hello Olga.".into()));
    let sender = Sender { id: "42".into(), name: "Olga".into(), is_bot: false };
    bus.publish_inbound(&InboundMessage::user("telegram", "42", sender, "hi")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "Hello Olga.");
    let before = store.history(&session, 100).await.unwrap();
    assert_eq!(before.len(), 2, "{before:?}");

    let now = Utc::now().timestamp();
    for (i, quiet) in ["HEARTBEAT_OK", "Nothing to report. HEARTBEAT_OK"].into_iter().enumerate() {
        llm.push(Scripted::Text(quiet.into()));
        bus.publish_inbound(&heartbeat(now + i as i64)).await.unwrap();
        let reply = next_reply(&mut out).await;
        assert_eq!(reply.metadata.get("suppressed"), Some(&serde_json::json!(true)), "{reply:?}");
        assert_eq!(store.history(&session, 100).await.unwrap(), before, "after {quiet:?}");
    }
    // The runs are recorded all the same: a redelivery is answered from the store.
    assert_eq!(store.recent_runs(10).await.unwrap().len(), 3);

    llm.push(Scripted::Text("The nightly backup failed.".into()));
    bus.publish_inbound(&heartbeat(now + 10)).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "The nightly backup failed.");
    let after = store.history(&session, 100).await.unwrap();
    assert_eq!(after.len(), 4, "{after:?}");
    assert_eq!(after[..2], before[..]);
    assert_eq!((after[3].role, after[3].content.as_str()), (Role::Assistant, "The nightly backup failed."));
    shutdown.cancel();
}

#[tokio::test]
async fn suppressed_heartbeats_leave_no_transcript_on_the_memory_bus() {
    suppressed_heartbeats_leave_no_transcript_on(Arc::new(MemoryBus::new(64))).await;
}

#[tokio::test]
async fn suppressed_heartbeats_leave_no_transcript_on_nats() {
    let nats = NatsServer::start().await;
    suppressed_heartbeats_leave_no_transcript_on(nats_bus(&nats).await).await;
}

// ---- Heartbeat scheduling ----

const TASKS: &str = "# Heartbeat checklist\n\n- [ ] Tell me when the nightly backup failed\n";

/// A store, a memory bus, a hand-moved clock (starting now by the real clock: the store
/// stamps runs with it) and the main agent's workspace with active tasks.
struct Rig {
    dir: tempfile::TempDir,
    store: Arc<SqliteStore>,
    bus: Arc<MemoryBus>,
    clock: ManualClock,
}

impl Rig {
    async fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
        std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
        std::fs::write(dir.path().join("workspace/HEARTBEAT.md"), TASKS).unwrap();
        let clock = ManualClock::new(Utc::now().trunc_subsecs(0));
        Rig { dir, store, bus: Arc::new(MemoryBus::new(64)), clock }
    }

    fn heartbeats(&self, every_minutes: u64) -> Heartbeats {
        let config = HeartbeatConfig { target: OWNER_CHAT.into(), every_minutes, ..HeartbeatConfig::default() };
        let settings = HeartbeatSettings::from_config(&config, "UTC").unwrap();
        let agent = HeartbeatAgent { name: "main".into(), workspace: self.dir.path().join("workspace"), settings };
        Heartbeats::new(self.store.clone(), self.bus.clone(), self.clock.clock(), vec![agent])
    }
}

async fn tick_one(heartbeats: &Heartbeats) -> HeartbeatOutcome {
    let mut outcomes = heartbeats.tick().await.unwrap();
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    outcomes.remove(0)
}

#[tokio::test]
async fn a_run_left_running_by_a_crashed_worker_stops_blocking_heartbeats_after_the_message_age() {
    let rig = Rig::new().await;
    let heartbeats = rig.heartbeats(30).with_max_message_age(Duration::from_secs(3600));
    tick_one(&heartbeats).await;
    // A run that never finishes: its worker died and its message is never redelivered.
    let claim = rig.store.claim_run("telegram:42:1", &owner_chat().session_key()).await.unwrap();
    assert!(matches!(claim, RunClaim::New { .. }), "{claim:?}");
    rig.clock.advance(30 * MINUTE);
    let busy = HeartbeatOutcome::Skipped { agent: "main".into(), reason: SkipReason::Busy };
    assert_eq!(tick_one(&heartbeats).await, busy, "a recent running run makes the session busy");
    rig.clock.advance(29 * MINUTE);
    assert_eq!(tick_one(&heartbeats).await, busy, "59 minutes old");
    rig.clock.advance(2 * MINUTE);
    let outcome = tick_one(&heartbeats).await;
    assert!(matches!(outcome, HeartbeatOutcome::Fired { .. }), "an hour-old run is abandoned: {outcome:?}");
}

#[tokio::test]
async fn a_shortened_interval_brings_the_next_heartbeat_forward() {
    let rig = Rig::new().await;
    let start = (rig.clock.clock())();
    let next_at = |outcome: HeartbeatOutcome| match outcome {
        HeartbeatOutcome::NotDue { next_at, .. } => next_at,
        other => panic!("not due expected: {other:?}"),
    };
    let daily = rig.heartbeats(1440);
    assert_eq!(next_at(tick_one(&daily).await), start + chrono::Duration::days(1));
    rig.clock.advance(10 * MINUTE);
    assert_eq!(next_at(tick_one(&daily).await), start + chrono::Duration::days(1), "a day is within a day");
    // The owner changes `every_minutes` from 1440 to 30 and restarts.
    let half_hourly = rig.heartbeats(30);
    let now = (rig.clock.clock())();
    assert_eq!(next_at(tick_one(&half_hourly).await), now + chrono::Duration::minutes(30));
    rig.clock.advance(30 * MINUTE);
    let outcome = tick_one(&half_hourly).await;
    assert!(matches!(outcome, HeartbeatOutcome::Fired { .. }), "{outcome:?}");
    assert_eq!(next_at(tick_one(&half_hourly).await), now + chrono::Duration::minutes(60));
}

// ---- Sub-agents' model usage ----

async fn a_subagents_usage_is_recorded_and_announced_on(bus: Arc<dyn Bus>) {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let mut inbound = bus.inbound().await.unwrap();
    let manager = SubagentManager::new(store.clone(), bus.clone(), switchboard::clock::system(), Default::default());
    let price = ModelPrice { input_per_mtok: 1.0, output_per_mtok: 2.0 };
    let prices = PriceTable::new(BTreeMap::from([("fake-model".to_owned(), price)]));
    let main = agent_priced(&llm, &dir.path().join("workspace"), prices);
    manager.attach([&main]);
    llm.push(Scripted::Text("42".into()));
    let request = SpawnRequest {
        parent_session: owner_chat().session_key(),
        parent_agent: "main".into(),
        chat: owner_chat(),
        label: "answer".into(),
        task: "Find the answer.".into(),
        on_behalf_of: None,
        tools: Default::default(),
    };
    let id = manager.spawn(request).await.unwrap();

    let delivery = tokio::time::timeout(Duration::from_secs(15), inbound.next()).await.expect("no announcement");
    let delivery = delivery.unwrap().unwrap();
    let announcement: InboundMessage = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    assert_eq!(announcement.id, format!("subagent:{id}"));
    let record = store.subagent(&id).await.unwrap().unwrap();
    assert_eq!(record.status, SubagentStatus::Completed);
    // The fake model counts four characters a token (at least one) of what it was sent and answered.
    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    let sent: usize = requests[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().chars().count())
        .sum();
    let usage = Usage { input_tokens: (sent / 4).max(1) as u64, output_tokens: 1 };
    assert_eq!(record.usage, usage);
    let cost = (usage.input_tokens as f64 + 2.0 * usage.output_tokens as f64) / 1e6;
    assert!(record.cost_usd.is_some_and(|c| (c - cost).abs() < 1e-12), "{:?} vs {cost}", record.cost_usd);
    assert_eq!(announcement.metadata["usage"], serde_json::json!(usage));
    assert_eq!(announcement.metadata["cost_usd"], serde_json::json!(record.cost_usd));
    manager.shutdown().await;
}

#[tokio::test]
async fn a_subagents_usage_is_recorded_and_announced_on_the_memory_bus() {
    a_subagents_usage_is_recorded_and_announced_on(Arc::new(MemoryBus::new(64))).await;
}

#[tokio::test]
async fn a_subagents_usage_is_recorded_and_announced_on_nats() {
    let nats = NatsServer::start().await;
    a_subagents_usage_is_recorded_and_announced_on(nats_bus(&nats).await).await;
}
