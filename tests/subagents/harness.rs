//! A worker with sub-agents wired in-process on either bus: a real SQLite file, the memory
//! bus or an isolated NATS JetStream server, agents answering with the scripted model and
//! holding the `spawn` tool, and the sub-agent manager attached to them and to the worker.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use switchboard::agent::{Agent, AgentSettings};
use switchboard::clock::Clock;
use switchboard::config::{BudgetsConfig, PermissionsConfig, UsersConfig};
use switchboard::provider::openai::{OpenAiConfig, OpenAiProvider};
use switchboard::store::sqlite::SqliteStore;
use switchboard::subagents::tool::SpawnTool;
use switchboard::subagents::{SubagentManager, SubagentSettings};
use switchboard::tools::{MessageTool, ToolLimits, ToolRegistry};
use switchboard::users::AccessPolicy;
use switchboard::worker::agents::{Agents, Binding};
use switchboard::worker::{Worker, WorkerSettings};
use switchboard_channels::Bus;
use switchboard_channels::bus::memory::MemoryBus;
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
use switchboard_channels::{BusExt, Deliveries};
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::nats::NatsServer;
use tokio_util::sync::CancellationToken;

/// Which bus the rig runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Memory,
    Nats,
}

/// The owner who writes in the tests, on every channel.
pub const OWNER_ID: &str = "42";

pub struct Rig {
    pub bus: Arc<dyn Bus>,
    pub store: Arc<SqliteStore>,
    pub llm: FakeLlm,
    pub manager: Arc<SubagentManager>,
    pub shutdown: CancellationToken,
    pub worker: tokio::task::JoinHandle<()>,
    pub dir: tempfile::TempDir,
    pub nats: Option<NatsServer>,
}

/// How to build a rig.
pub struct Setup {
    pub shape: Shape,
    pub settings: SubagentSettings,
    /// Agent names besides `main`.
    pub agents: Vec<&'static str>,
    pub bindings: Vec<Binding>,
    pub clock: Clock,
}

impl Setup {
    pub fn new(shape: Shape) -> Self {
        Self {
            shape,
            settings: SubagentSettings::default(),
            agents: Vec::new(),
            bindings: Vec::new(),
            clock: switchboard::clock::system(),
        }
    }

    pub async fn start(self) -> Rig {
        let llm = FakeLlm::start().await;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
        let (bus, nats): (Arc<dyn Bus>, _) = match self.shape {
            Shape::Memory => (Arc::new(MemoryBus::new(256)), None),
            Shape::Nats => {
                let server = NatsServer::start().await;
                let bus = NatsBus::connect(&server.url(), NatsOptions::default()).await.unwrap();
                (Arc::new(bus), Some(server))
            }
        };
        let manager = SubagentManager::new(store.clone(), bus.clone(), self.clock.clone(), self.settings.clone());
        let mut agents = vec![Arc::new(agent(&llm, &bus, &manager, dir.path(), "main"))];
        for name in &self.agents {
            agents.push(Arc::new(agent(&llm, &bus, &manager, dir.path(), name)));
        }
        let agents = Agents::new(agents, "main", self.bindings).unwrap();
        manager.attach(agents.all());
        let worker =
            Worker::with_agents(bus.clone(), store.clone(), agents, owner_settings()).with_subagents(manager.clone());
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let worker = tokio::spawn(async move { worker.run(token).await.unwrap() });
        Rig { bus, store, llm, manager, shutdown, worker, dir, nats }
    }
}

/// An agent on the scripted model with `current_time`, `message` and `spawn`.
pub fn agent(
    llm: &FakeLlm,
    bus: &Arc<dyn Bus>,
    manager: &Arc<SubagentManager>,
    dir: &std::path::Path,
    name: &str,
) -> Agent {
    let workspace = dir.join(format!("ws-{name}"));
    std::fs::create_dir_all(&workspace).unwrap();
    let provider = OpenAiProvider::new(OpenAiConfig {
        name: "fake".into(),
        base_url: llm.base_url(),
        api_key: None,
        request_timeout: Duration::from_secs(60),
        stream: false,
        extra_headers: vec![],
    })
    .unwrap();
    let mut tools = ToolRegistry::with_builtins(ToolLimits::default());
    tools.register(Arc::new(MessageTool::new(bus.clone())));
    tools.register(Arc::new(SpawnTool::new(manager.clone())));
    let settings = AgentSettings {
        name: name.into(),
        system_prompt: "test".into(),
        model: format!("{name}-model"),
        max_iterations: 5,
        max_tokens: None,
        temperature: None,
        stream: false,
        prices: Default::default(),
        workspace,
    };
    Agent::new(Arc::new(provider), tools, settings)
}

/// The owner on every channel the tests use, so every tool is offered.
pub fn owner_settings() -> WorkerSettings {
    let owners = ["telegram", "discord", "test"].iter().map(|c| format!("{c}:{OWNER_ID}")).collect();
    let users = UsersConfig { owners, ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    WorkerSettings { access, ..WorkerSettings::default() }
}

/// The owner's message in a chat, topic or thread.
pub fn message(channel: &str, chat: &str, thread: Option<&str>, is_group: bool, content: &str) -> InboundMessage {
    let sender = Sender { id: OWNER_ID.into(), name: "Olga".into(), is_bot: false };
    let mut msg = InboundMessage::user(channel, chat, sender, content);
    msg.thread_id = thread.map(str::to_owned);
    msg.is_group = is_group;
    msg.mentioned = true;
    msg
}

impl Rig {
    pub async fn send(&self, msg: &InboundMessage) {
        self.bus.publish_inbound(msg).await.unwrap();
    }

    pub async fn outbound(&self, channel: &str) -> Deliveries {
        self.bus.outbound(channel).await.unwrap()
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.worker).await;
    }
}

/// The next outbound message, acked.
pub async fn next_out(out: &mut Deliveries) -> OutboundMessage {
    let delivery =
        tokio::time::timeout(Duration::from_secs(15), out.next()).await.expect("no outbound message").unwrap().unwrap();
    let msg = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    msg
}

/// Nothing more arrives within `wait` (after an effect that would have happened by then).
pub async fn nothing_more(out: &mut Deliveries, wait: Duration) {
    if let Ok(Some(Ok(delivery))) = tokio::time::timeout(wait, out.next()).await {
        let msg: OutboundMessage = delivery.decode().unwrap();
        panic!("unexpected outbound message: {msg:?}");
    }
}

/// Polls `check` until it is true, for at most 15 s.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn system_text(request: &Value) -> String {
    request["messages"][0]["content"].as_str().unwrap_or_default().to_owned()
}

pub fn tool_names(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().map(|t| t["function"]["name"].as_str().unwrap_or_default().to_owned()).collect()
}

/// The requests made by sub-agents (their prompt is the minimal one).
pub fn subagent_requests(llm: &FakeLlm) -> Vec<Value> {
    llm.requests().into_iter().filter(|r| system_text(r).contains("prompt mode minimal")).collect()
}
