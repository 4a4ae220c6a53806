//! The worker assembled in-process for tests, on either bus, by the production assembly
//! ([`switchboard::assembly`]): a real SQLite store in a tempdir, agents on the
//! OpenAI-compatible provider against a scripted model server, and the worker task. [`Setup`] says what to wire; [`both_buses!`] runs a scenario on each bus.

#![allow(dead_code)]

mod bus;
mod logs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[allow(unused_imports)] // Not every test binary reads outbound messages this way.
pub use bus::{BusKind, TestBus, next_out, nothing_more};
pub use logs::{Fields, Logs};
use switchboard::assembly::{AssembledWorker, Assembly, Overrides};
use switchboard::clock::Clock;
use switchboard::config::{
    AgentConfig, ApprovalsConfig, BindingConfig, Config, EmbeddingsConfig, HeartbeatConfig, MAIN_AGENT, ModelPrice,
    NamedAgentConfig, ProviderConfig, ProviderKind, StoreConfig, TranscriptionConfig,
};
use switchboard::scheduler::CronSettings;
use switchboard::store::Database;
use switchboard::subagents::{SubagentManager, SubagentSettings};
use switchboard::tools::{Tool, ToolContext, ToolError};
use switchboard::worker::{WorkerGauges, WorkerSettings};
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

/// One agent of the worker, answering with the scripted model: `[agent]` when it is the
/// first (which must be `main`), else an `[agents.<name>]`.
pub struct AgentSpec {
    pub name: String,
    /// What the model requests name (tests tell agents apart by it).
    pub model: String,
    /// Relative to the harness's temp dir, or absolute; created.
    pub workspace: PathBuf,
    /// Only these tools are offered; all when empty (`[agents.<name>] tools`).
    pub allow: Vec<String>,
    /// `system_prompt`, the operator's instructions in the prompt; "test" by default.
    pub system_prompt: String,
    /// Its `[agents.<name>.heartbeat] ack_max_chars` (for `main`, `[heartbeat]`'s); unset: the default.
    pub heartbeat_ack_max_chars: Option<usize>,
}

impl AgentSpec {
    pub fn new(name: &str, model: &str, workspace: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            model: model.into(),
            workspace: workspace.into(),
            allow: Vec::new(),
            system_prompt: "test".into(),
            heartbeat_ack_max_chars: None,
        }
    }

    pub fn heartbeat_ack_max_chars(mut self, chars: usize) -> Self {
        self.heartbeat_ack_max_chars = Some(chars);
        self
    }

    pub fn allow(mut self, tools: &[&str]) -> Self {
        self.allow = tools.iter().map(|&tool| tool.to_owned()).collect();
        self
    }
}

/// What to wire: a config for the production assembly ([`Assembly`]) and its overrides.
/// Every agent gets the built-in tools, then what the fields add.
pub struct Setup {
    pub kind: BusKind,
    pub settings: WorkerSettings,
    /// A scripted model of the test's own (to script it before the worker starts); else a new one.
    pub llm: Option<FakeLlm>,
    /// The first is `main`, the default agent. Default: `main` as `fake-model` in `workspace`.
    pub agents: Vec<AgentSpec>,
    pub bindings: Vec<BindingConfig>,
    /// `[prices]`: what the models cost (for the cost recorded with their usage); none by default.
    pub prices: BTreeMap<String, ModelPrice>,
    /// The `message` tool (default on).
    pub message_tool: bool,
    /// `read_file`, `write_file`, `edit_file` and `list_dir`.
    pub file_tools: bool,
    /// The `exec` tool (admin-only under the default levels).
    pub exec: bool,
    /// `memory_search` and `memory_get`.
    pub memory_tools: bool,
    /// `[memory.embeddings]`, e.g. on the provider `fake` (the scripted model's server, which
    /// answers `/v1/embeddings`); off by default.
    pub embeddings: Option<EmbeddingsConfig>,
    pub tools: Vec<Arc<dyn Tool>>,
    /// The `cron` tool, with these settings on this clock.
    pub cron: Option<(CronSettings, Clock)>,
    /// A sub-agent manager on the worker, and the `spawn` tool for every agent.
    pub subagents: Option<(SubagentSettings, Clock)>,
    /// The SQLite file, to share one with another store handle; default: in the temp dir.
    pub store_path: Option<PathBuf>,
    /// The provider's `vision` key: its model gets photos as image parts (default off).
    pub vision: bool,
    /// The provider's `stream` key: answers come as server-sent events (default off).
    pub stream: bool,
    /// The base URL of a `FakeAnthropic`: the provider speaks the Messages API to it instead
    /// of the OpenAI API to `llm` (which then gets no calls).
    pub anthropic: Option<String>,
    /// Run the worker task (default on). Off when the test takes the inbound queue itself,
    /// which a worker would compete for.
    pub run_worker: bool,
    /// `[transcription]` (off by default); `provider = "fake"` sends voice notes to `llm`.
    pub transcription: TranscriptionConfig,
    /// Models after the main agent's in its chain (`agent.models`), on the same provider.
    pub fallbacks: Vec<String>,
    /// `[approvals]`: who decides tool calls (and which calls wait); none by default.
    pub approvals: ApprovalsConfig,
}

pub struct Harness {
    pub bus: Arc<dyn Bus>,
    pub store: Arc<dyn Database>,
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
    /// What the worker holds, for [`Harness::quiet`].
    pub gauges: WorkerGauges,
}

/// A worker with the default agent on the in-process bus, the `message` tool included.
pub async fn start(settings: WorkerSettings, llm: FakeLlm) -> Harness {
    Setup { settings, llm: Some(llm), ..Setup::new(BusKind::InProcess) }.start().await
}

impl Setup {
    pub fn new(kind: BusKind) -> Self {
        Self {
            kind,
            settings: WorkerSettings::default(),
            llm: None,
            agents: vec![AgentSpec::new("main", "fake-model", "workspace")],
            bindings: Vec::new(),
            prices: BTreeMap::new(),
            message_tool: true,
            file_tools: false,
            exec: false,
            memory_tools: false,
            embeddings: None,
            tools: Vec::new(),
            cron: None,
            subagents: None,
            store_path: None,
            vision: false,
            stream: false,
            anthropic: None,
            run_worker: true,
            transcription: TranscriptionConfig::default(),
            fallbacks: Vec::new(),
            approvals: ApprovalsConfig::default(),
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
            gauges: wired.gauges,
            dir,
            buses,
        }
    }

    /// Assembles the worker on `bus`, with the store and workspaces under `dir`.
    async fn wire(self, bus: &Arc<dyn Bus>, dir: &Path, llm_url: &str) -> Wired {
        let config = self.config(dir, llm_url);
        let workspace = config.agent.workspace.clone();
        let run_worker = self.run_worker;
        let mut overrides = self.overrides();
        // The test's worker settings replace the config's: the transcriber comes from the config.
        if let Some(settings) = overrides.worker.as_mut() {
            settings.transcriber = switchboard::assembly::settings::transcriber(&config).unwrap();
        }
        let assembly = Assembly::with_overrides(config, overrides);
        let store = assembly.open_store().await.unwrap();
        let AssembledWorker { worker, subagents } = assembly.worker(bus, &store).unwrap();
        let gauges = worker.gauges();
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let worker = tokio::spawn(async move {
            if run_worker {
                worker.run(token).await.unwrap()
            } else {
                // The worker owns the agents, which the sub-agent manager holds weakly.
                token.cancelled().await;
                drop(worker);
            }
        });
        Wired { store, subagents, shutdown, worker, workspace, gauges }
    }

    /// The config the agents are read from: each answers with the scripted model on the
    /// provider `fake`, which neither streams nor retries; only the tools asked for.
    fn config(&self, dir: &Path, llm_url: &str) -> Config {
        let kind = if self.anthropic.is_some() { ProviderKind::Anthropic } else { ProviderKind::Openai };
        let fake = ProviderConfig {
            kind,
            base_url: self.anthropic.clone().unwrap_or_else(|| llm_url.to_owned()),
            request_timeout_secs: 60,
            stream: self.stream,
            max_retries: 0,
            vision: self.vision,
            ..ProviderConfig::default()
        };
        let (main, others) = self.agents.split_first().expect("at least one agent");
        assert_eq!(main.name, MAIN_AGENT, "the first agent is [agent], `main`");
        let chain = std::iter::once(&main.model).chain(&self.fallbacks);
        let agent = AgentConfig {
            models: chain.map(|model| format!("fake/{model}").as_str().into()).collect(),
            max_iterations: 5,
            // The window the worker's settings give: the chains' entries take it.
            context_window: self.settings.context.context_window,
            system_prompt: main.system_prompt.clone(),
            workspace: workspace(dir, main),
            ..AgentConfig::default()
        };
        let agents = others.iter().map(|spec| {
            let agent = NamedAgentConfig {
                workspace: workspace(dir, spec),
                models: vec![format!("fake/{}", spec.model).as_str().into()],
                tools: spec.allow.clone(),
                system_prompt: Some(spec.system_prompt.clone()),
                heartbeat: spec.heartbeat_ack_max_chars.map(heartbeat_acking),
                ..NamedAgentConfig::default()
            };
            (spec.name.clone(), agent)
        });
        let mut config = Config {
            data_dir: dir.to_owned(),
            store: StoreConfig {
                path: self.store_path.clone().unwrap_or_else(|| dir.join("s.db")),
                ..StoreConfig::default()
            },
            providers: BTreeMap::from([("fake".to_owned(), fake)]),
            agent,
            agents: agents.collect(),
            bindings: self.bindings.clone(),
            prices: self.prices.clone(),
            ..Config::default()
        };
        config.tools.web.enabled = false;
        config.tools.fs.enabled = self.file_tools;
        config.tools.exec.enabled = self.exec;
        config.tools.memory.enabled = self.memory_tools;
        config.memory.embeddings = self.embeddings.clone().unwrap_or_default();
        config.cron.enabled = self.cron.is_some();
        config.subagents.enabled = self.subagents.is_some();
        config.transcription = self.transcription.clone();
        config.approvals = self.approvals.clone();
        if let Some(chars) = main.heartbeat_ack_max_chars {
            config.heartbeat = heartbeat_acking(chars);
        }
        config
    }

    fn overrides(self) -> Overrides {
        let cron_clock = self.cron.as_ref().map(|(_, clock)| clock.clone());
        let clock = cron_clock.or_else(|| self.subagents.as_ref().map(|(_, clock)| clock.clone()));
        Overrides {
            clock: clock.unwrap_or_else(switchboard::clock::system),
            worker: Some(self.settings),
            subagents: self.subagents.map(|(settings, _)| settings),
            cron: self.cron.map(|(settings, _)| settings),
            tools: self.tools,
            message_tool: self.message_tool,
        }
    }
}

/// A heartbeat section that sets only `ack_max_chars`.
fn heartbeat_acking(ack_max_chars: usize) -> HeartbeatConfig {
    HeartbeatConfig { ack_max_chars, ..HeartbeatConfig::default() }
}

/// An agent's workspace under `dir`, created.
fn workspace(dir: &Path, spec: &AgentSpec) -> PathBuf {
    let workspace = dir.join(&spec.workspace);
    std::fs::create_dir_all(&workspace).unwrap();
    workspace
}

/// What [`Setup::wire`] made.
struct Wired {
    store: Arc<dyn Database>,
    subagents: Option<Arc<SubagentManager>>,
    shutdown: CancellationToken,
    worker: tokio::task::JoinHandle<()>,
    workspace: PathBuf,
    gauges: WorkerGauges,
}

/// A second worker beside a harness's: the same bus (its own NATS connection), the same
/// store file (its own handle) and the same scripted model; its workspaces apart.
pub struct Sidecar {
    pub bus: Arc<dyn Bus>,
    pub store: Arc<dyn Database>,
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

    /// The tool names the `i`-th model request offered.
    pub fn offered_tools(&self, i: usize) -> Vec<String> {
        let requests = self.llm.requests();
        let tools = requests[i]["tools"].as_array().cloned().unwrap_or_default();
        tools.iter().map(|t| t["function"]["name"].as_str().unwrap_or_default().to_owned()).collect()
    }

    pub async fn outbound(&self, channel: &str) -> Deliveries {
        self.bus.outbound(channel).await.unwrap()
    }

    /// The sub-agent manager (when the setup asked for one).
    pub fn manager(&self) -> &Arc<SubagentManager> {
        self.subagents.as_ref().expect("a setup with sub-agents")
    }

    /// Waits until the worker is quiet: no inbound message waits on the bus (on NATS: none is
    /// stored, so none is in flight either) and the worker holds no session and runs no task,
    /// twice in a row. Whatever it was going to send by then, it has sent.
    pub async fn quiet(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut quiet_reads = 0;
        while quiet_reads < 2 {
            assert!(tokio::time::Instant::now() < deadline, "the worker never went quiet: {:?}", self.busy().await);
            quiet_reads = if self.busy().await.is_empty() { quiet_reads + 1 } else { 0 };
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The gauges that say the worker or the bus still has something to do.
    async fn busy(&self) -> Vec<(String, u64)> {
        let depths = self.bus.queue_depths().await.expect("the bus reports its queues");
        let gauges = self.gauges.read().into_iter().chain(self.bus.gauges()).chain(depths);
        const BUSY: [&str; 4] = ["worker_tasks", "worker_sessions", "bus_inbound_queued", "bus_inbound_stored"];
        gauges.filter(|g| BUSY.contains(&g.name) && g.value > 0).map(|g| (g.name.to_owned(), g.value)).collect()
    }

    /// Nothing more comes out once the worker is quiet (a short grace for a reply already on
    /// its way through NATS).
    pub async fn nothing_more(&self, out: &mut Deliveries) {
        self.quiet().await;
        nothing_more(out, Duration::from_millis(100)).await;
    }

    /// Stops the worker and waits (a while) for it to finish.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.worker).await;
    }
}

/// A tool that only has a name (it answers "done"): enough to see what the model is offered.
pub struct NamedTool(pub &'static str);

#[async_trait::async_trait]
impl Tool for NamedTool {
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "test tool"
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {}})
    }
    async fn execute(&self, _arguments: serde_json::Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok("done".into())
    }
}

/// The Telegram channel's settings for a test against `fake`: long polling with a short wait,
/// `allowed` answered in direct messages, media saved under `dir`.
pub fn fake_telegram_settings(
    fake: &switchboard_testkit::fake_telegram::FakeTelegram,
    dir: &Path,
    allowed: i64,
) -> switchboard_channels::telegram::TelegramSettings {
    use switchboard_channels::telegram::{Receive, TelegramSettings};
    use switchboard_testkit::fake_telegram::FakeTelegram;
    TelegramSettings {
        token: FakeTelegram::TOKEN.into(),
        api_url: Some(fake.api_url()),
        receive: Receive::Polling { timeout: Duration::from_secs(1) },
        allow_from: vec![allowed.to_string()],
        media_dir: dir.join("media"),
        ..TelegramSettings::default()
    }
}
