//! The worker wired in-process for tests, on either bus: a real SQLite store in a tempdir,
//! agents on the OpenAI-compatible provider against a scripted model server, and the worker
//! task. [`Setup`] says what to wire; [`both_buses!`] runs a scenario on each bus.

#![allow(dead_code)]

mod bus;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[allow(unused_imports)] // Not every test binary reads outbound messages this way.
pub use bus::{BusKind, TestBus, next_out, nothing_more};
use switchboard::agent::{Agent, AgentSettings};
use switchboard::clock::Clock;
use switchboard::config::{ExecToolConfig, FsToolsConfig, ToolsConfig};
use switchboard::provider::openai::{OpenAiConfig, OpenAiProvider};
use switchboard::provider::pricing::PriceTable;
use switchboard::store::sqlite::SqliteStore;
use switchboard::subagents::tool::SpawnTool;
use switchboard::subagents::{SubagentManager, SubagentSettings};
use switchboard::tools::{MessageTool, Tool, ToolLimits, ToolRegistry, register_local_tools};
use switchboard::worker::agents::{Agents, Binding};
use switchboard::worker::{Worker, WorkerSettings};
use switchboard_channels::contract::InboundMessage;
use switchboard_channels::{Bus, BusExt, Deliveries};
use switchboard_testkit::fake_llm::FakeLlm;
use tokio_util::sync::CancellationToken;

/// The real time as the operating system gives it, with digits below the millisecond (forced,
/// so that no run happens to read a whole millisecond): what a hand clock starts at, so that
/// schedules and stored times see the precision users' clocks have.
pub fn real_now() -> chrono::DateTime<chrono::Utc> {
    use chrono::Timelike;
    let now = chrono::Utc::now();
    let nanos = now.nanosecond() / 1_000_000 * 1_000_000 + 123_457;
    now.with_nanosecond(nanos).unwrap_or(now)
}

/// One agent of the worker, answering with the scripted model.
pub struct AgentSpec {
    pub name: String,
    /// What the model requests name (tests tell agents apart by it).
    pub model: String,
    /// Relative to the harness's temp dir, or absolute; created.
    pub workspace: PathBuf,
    /// Only these tools are offered; all when empty.
    pub allow: Vec<String>,
    /// What its model costs (for the cost recorded with its usage); none by default.
    pub prices: PriceTable,
    /// `agent.system_prompt`, the operator's instructions in the prompt; "test" by default.
    pub system_prompt: String,
}

impl AgentSpec {
    pub fn new(name: &str, model: &str, workspace: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            model: model.into(),
            workspace: workspace.into(),
            allow: Vec::new(),
            prices: PriceTable::default(),
            system_prompt: "test".into(),
        }
    }

    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    pub fn allow(mut self, tools: &[&str]) -> Self {
        self.allow = tools.iter().map(|&tool| tool.to_owned()).collect();
        self
    }
}

/// What a tool maker may need; tools are made once and given to every agent.
pub struct Parts<'a> {
    pub bus: &'a Arc<dyn Bus>,
    pub store: &'a Arc<SqliteStore>,
}

pub type ToolMaker = Box<dyn Fn(&Parts) -> Arc<dyn Tool> + Send>;

/// What to wire. Every agent gets the built-in tools, then what the fields add.
pub struct Setup {
    pub kind: BusKind,
    pub settings: WorkerSettings,
    /// A scripted model of the test's own (to script it before the worker starts); else a new one.
    pub llm: Option<FakeLlm>,
    /// The first is the default agent. Default: `main` as `fake-model` in `workspace`.
    pub agents: Vec<AgentSpec>,
    pub bindings: Vec<Binding>,
    /// The `message` tool (default on).
    pub message_tool: bool,
    /// `read_file`, `write_file`, `edit_file` and `list_dir`.
    pub file_tools: bool,
    /// The `exec` tool (admin-only under the default levels).
    pub exec: bool,
    pub tools: Vec<ToolMaker>,
    /// A sub-agent manager on the worker, and the `spawn` tool for every agent.
    pub subagents: Option<(SubagentSettings, Clock)>,
    /// The SQLite file, to share one with another store handle; default: in the temp dir.
    pub store_path: Option<PathBuf>,
    /// Run the worker task (default on). Off when the test takes the inbound queue itself,
    /// which a worker would compete for.
    pub run_worker: bool,
}

pub struct Harness {
    pub bus: Arc<dyn Bus>,
    pub store: Arc<SqliteStore>,
    pub llm: FakeLlm,
    pub subagents: Option<Arc<SubagentManager>>,
    pub shutdown: CancellationToken,
    /// The worker task; without a worker, one that keeps the agents until shutdown.
    pub worker: tokio::task::JoinHandle<()>,
    /// The default agent's workspace.
    pub workspace: PathBuf,
    /// Where the store file and the workspaces are.
    pub dir: tempfile::TempDir,
    pub buses: TestBus,
}

/// A worker with the default agent on the memory bus, the `message` tool included.
pub async fn start(settings: WorkerSettings, llm: FakeLlm) -> Harness {
    Setup { settings, llm: Some(llm), ..Setup::new(BusKind::Memory) }.start().await
}

impl Setup {
    pub fn new(kind: BusKind) -> Self {
        Self {
            kind,
            settings: WorkerSettings::default(),
            llm: None,
            agents: vec![AgentSpec::new("main", "fake-model", "workspace")],
            bindings: Vec::new(),
            message_tool: true,
            file_tools: false,
            exec: false,
            tools: Vec::new(),
            subagents: None,
            store_path: None,
            run_worker: true,
        }
    }

    pub async fn start(mut self) -> Harness {
        let llm = match self.llm.take() {
            Some(llm) => llm,
            None => FakeLlm::start().await,
        };
        let buses = TestBus::start(self.kind).await;
        let dir = tempfile::tempdir().unwrap();
        let wired = self.wire(&buses.bus, dir.path(), &llm.base_url()).await;
        Harness {
            bus: Arc::clone(&buses.bus),
            store: wired.store,
            llm,
            subagents: wired.subagents,
            shutdown: wired.shutdown,
            worker: wired.worker,
            workspace: wired.workspace,
            dir,
            buses,
        }
    }

    /// Builds the agents and the worker on `bus`, with the store and workspaces under `dir`.
    async fn wire(self, bus: &Arc<dyn Bus>, dir: &Path, llm_url: &str) -> Wired {
        let path = self.store_path.clone().unwrap_or_else(|| dir.join("s.db"));
        let store = Arc::new(SqliteStore::open(&path).await.unwrap());
        let parts = Parts { bus, store: &store };
        let mut tools: Vec<Arc<dyn Tool>> = self.tools.iter().map(|make| make(&parts)).collect();
        if self.message_tool {
            tools.push(Arc::new(MessageTool::new(Arc::clone(bus))));
        }
        let subagents = self.subagents.as_ref().map(|(settings, clock)| {
            SubagentManager::new(store.clone(), Arc::clone(bus), clock.clone(), settings.clone())
        });
        if let Some(manager) = &subagents {
            tools.push(Arc::new(SpawnTool::new(manager.clone())));
        }
        let agents: Vec<Arc<Agent>> = self.agents.iter().map(|spec| self.agent(spec, dir, llm_url, &tools)).collect();
        let workspace = agents[0].settings().workspace.clone();
        let agents = Agents::new(agents, &self.agents[0].name, self.bindings).unwrap();
        if let Some(manager) = &subagents {
            manager.attach(agents.all());
        }
        let mut worker = Worker::with_agents(Arc::clone(bus), store.clone(), agents, self.settings);
        if let Some(manager) = &subagents {
            worker = worker.with_subagents(manager.clone());
        }
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let run_worker = self.run_worker;
        let worker = tokio::spawn(async move {
            if run_worker {
                worker.run(token).await.unwrap()
            } else {
                // The worker owns the agents, which the sub-agent manager holds weakly.
                token.cancelled().await;
                drop(worker);
            }
        });
        Wired { store, subagents, shutdown, worker, workspace }
    }

    fn agent(&self, spec: &AgentSpec, dir: &Path, llm_url: &str, extra: &[Arc<dyn Tool>]) -> Arc<Agent> {
        let workspace = dir.join(&spec.workspace);
        std::fs::create_dir_all(&workspace).unwrap();
        let mut tools = ToolRegistry::with_builtins(ToolLimits::default());
        for tool in extra {
            tools.register(Arc::clone(tool));
        }
        if self.file_tools || self.exec {
            let config = ToolsConfig {
                fs: FsToolsConfig { enabled: self.file_tools, ..FsToolsConfig::default() },
                exec: ExecToolConfig { enabled: self.exec, ..ExecToolConfig::default() },
                ..ToolsConfig::default()
            };
            register_local_tools(&mut tools, &config).unwrap();
        }
        if !spec.allow.is_empty() {
            tools.retain(&spec.allow);
        }
        let settings = AgentSettings {
            name: spec.name.clone(),
            system_prompt: spec.system_prompt.clone(),
            model: spec.model.clone(),
            max_iterations: 5,
            max_tokens: None,
            temperature: None,
            stream: false,
            tool_choice: Default::default(),
            prices: spec.prices.clone(),
            workspace,
        };
        Arc::new(Agent::new(Arc::new(provider(llm_url)), tools, settings))
    }
}

/// What [`Setup::wire`] made.
struct Wired {
    store: Arc<SqliteStore>,
    subagents: Option<Arc<SubagentManager>>,
    shutdown: CancellationToken,
    worker: tokio::task::JoinHandle<()>,
    workspace: PathBuf,
}

/// A second worker beside a harness's: the same bus (its own NATS connection), the same
/// store file (its own handle) and the same scripted model; its workspaces apart.
pub struct Sidecar {
    pub bus: Arc<dyn Bus>,
    pub store: Arc<SqliteStore>,
    pub subagents: Option<Arc<SubagentManager>>,
    pub shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub async fn another_worker(&self, mut setup: Setup) -> Sidecar {
        let bus = self.buses.connect_again().await;
        let dir = tempfile::tempdir().unwrap();
        setup.store_path = Some(self.dir.path().join("s.db"));
        let wired = setup.wire(&bus, dir.path(), &self.llm.base_url()).await;
        Sidecar { bus, store: wired.store, subagents: wired.subagents, shutdown: wired.shutdown, _dir: dir }
    }

    pub async fn send(&self, msg: &InboundMessage) {
        self.bus.publish_inbound(msg).await.unwrap();
    }

    pub async fn outbound(&self, channel: &str) -> Deliveries {
        self.bus.outbound(channel).await.unwrap()
    }

    /// The sub-agent manager (when the setup asked for one).
    pub fn manager(&self) -> &Arc<SubagentManager> {
        self.subagents.as_ref().expect("a setup with sub-agents")
    }

    /// Stops the worker and waits (a while) for it to finish.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.worker).await;
    }
}

fn provider(base_url: &str) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        name: "fake".into(),
        base_url: base_url.to_owned(),
        api_key: None,
        request_timeout: Duration::from_secs(60),
        stream: false,
        extra_headers: vec![],
    })
    .unwrap()
}
