//! A worker and a cron scheduler sharing one store and one bus (the in-process bus or an
//! isolated NATS server), with the scripted model and a manual clock.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use futures_util::StreamExt;
use switchboard::agent::{Agent, AgentSettings};
use switchboard::clock::ManualClock;
use switchboard::config::UsersConfig;
use switchboard::provider::openai::{OpenAiConfig, OpenAiProvider};
use switchboard::scheduler::{CronScheduler, CronSettings, CronTool};
use switchboard::store::cron::CronStore;
use switchboard::store::sqlite::SqliteStore;
use switchboard::tools::{ToolLimits, ToolRegistry};
use switchboard::users::{AccessPolicy, Level};
use switchboard::worker::{Worker, WorkerSettings};
use switchboard_channels::Bus;
use switchboard_channels::bus::Deliveries;
use switchboard_channels::bus::memory::MemoryBus;
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::nats::NatsServer;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusKind {
    Memory,
    Nats,
}

pub struct Harness {
    pub bus: Arc<dyn Bus>,
    pub store: Arc<SqliteStore>,
    pub llm: FakeLlm,
    pub clock: ManualClock,
    pub settings: CronSettings,
    pub scheduler: CronScheduler,
    pub shutdown: CancellationToken,
    pub dir: tempfile::TempDir,
    pub nats: Option<NatsServer>,
}

/// Now, to the second: scheduled inbound ids are whole seconds, and the worker drops
/// messages older than an hour by the real clock, so the manual one starts at the real time.
pub fn start_time() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(0)
}

pub async fn connect(kind: BusKind, nats: Option<&NatsServer>) -> Arc<dyn Bus> {
    match (kind, nats) {
        (BusKind::Nats, Some(server)) => {
            Arc::new(NatsBus::connect(&server.url(), NatsOptions::default()).await.unwrap())
        }
        _ => Arc::new(MemoryBus::new(256)),
    }
}

pub async fn start(kind: BusKind) -> Harness {
    start_with(kind, CronSettings { default_timezone: "UTC".into(), ..CronSettings::default() }).await
}

pub async fn start_with(kind: BusKind, settings: CronSettings) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let nats = match kind {
        BusKind::Nats => Some(NatsServer::start().await),
        BusKind::Memory => None,
    };
    let bus = connect(kind, nats.as_ref()).await;
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let llm = FakeLlm::start().await;
    let clock = ManualClock::new(start_time());
    let shutdown = CancellationToken::new();
    spawn_worker(&bus, &store, &llm, &clock, &settings, dir.path(), &shutdown);
    let scheduler = scheduler(&store, &bus, &clock, &settings);
    Harness { bus, store, llm, clock, settings, scheduler, shutdown, dir, nats }
}

pub fn scheduler(
    store: &Arc<SqliteStore>,
    bus: &Arc<dyn Bus>,
    clock: &ManualClock,
    settings: &CronSettings,
) -> CronScheduler {
    let store = Arc::clone(store) as Arc<dyn CronStore>;
    CronScheduler::new(store, Arc::clone(bus), clock.clock(), settings.clone())
}

/// A worker whose agent has the `cron` tool, on `store` and `bus`; every sender is a user.
pub fn spawn_worker(
    bus: &Arc<dyn Bus>,
    store: &Arc<SqliteStore>,
    llm: &FakeLlm,
    clock: &ManualClock,
    settings: &CronSettings,
    dir: &Path,
    shutdown: &CancellationToken,
) {
    let provider = OpenAiProvider::new(OpenAiConfig {
        name: "fake".into(),
        base_url: llm.base_url(),
        api_key: None,
        request_timeout: Duration::from_secs(30),
        stream: false,
        extra_headers: vec![],
    })
    .unwrap();
    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let mut tools = ToolRegistry::with_builtins(ToolLimits::default());
    let cron_store = Arc::clone(store) as Arc<dyn CronStore>;
    tools.register(Arc::new(CronTool::new(cron_store, clock.clock(), settings.clone())));
    let agent = Agent::new(
        Arc::new(provider),
        tools,
        AgentSettings {
            name: "main".into(),
            system_prompt: "test".into(),
            model: "fake-model".into(),
            max_iterations: 5,
            max_tokens: None,
            temperature: None,
            stream: false,
            prices: Default::default(),
            workspace,
        },
    );
    let users = UsersConfig { default_level: Level::User, ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &Default::default(), &Default::default()).unwrap();
    let worker_settings = WorkerSettings { access, ..WorkerSettings::default() };
    let worker = Worker::new(Arc::clone(bus), Arc::clone(store) as _, Arc::new(agent), worker_settings);
    let token = shutdown.clone();
    tokio::spawn(async move { worker.run(token).await.unwrap() });
}

/// A person's message in a chat, optionally in a topic or thread.
pub fn person(channel: &str, chat: &str, thread: Option<&str>, is_group: bool, content: &str) -> InboundMessage {
    let sender = Sender { id: "u1".into(), name: "Ada".into(), is_bot: false };
    let mut msg = InboundMessage::user(channel, chat, sender, content);
    msg.thread_id = thread.map(str::to_owned);
    msg.is_group = is_group;
    msg
}

pub async fn next_out(out: &mut Deliveries) -> OutboundMessage {
    let delivery =
        tokio::time::timeout(Duration::from_secs(15), out.next()).await.expect("no outbound message").unwrap().unwrap();
    let msg = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    msg
}

pub async fn no_more_out(out: &mut Deliveries, quiet: Duration) {
    if let Ok(Some(Ok(d))) = tokio::time::timeout(quiet, out.next()).await {
        panic!("unexpected outbound message {:?}", String::from_utf8_lossy(&d.payload));
    }
}

/// The text of every message of the model's `n`th request (0-based), joined.
pub fn request_text(llm: &FakeLlm, n: usize) -> String {
    let requests = llm.requests();
    let request = requests.get(n).unwrap_or_else(|| panic!("only {} model requests", requests.len()));
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs a test body against both buses.
#[macro_export]
macro_rules! both_buses {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name($crate::cron_support::BusKind::Memory).await }
            )*
        }
        mod nats {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name($crate::cron_support::BusKind::Nats).await }
            )*
        }
    };
}

/// The tool results of the model's `n`th request that belong to its current turn (after the
/// last user message).
pub fn turn_tool_results(llm: &FakeLlm, n: usize) -> Vec<String> {
    let requests = llm.requests();
    let messages = requests[n]["messages"].as_array().unwrap().clone();
    let last_user = messages.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
    messages[last_user..]
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect()
}
