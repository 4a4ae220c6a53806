//! The worker wired in-process for tests: the memory bus, a real SQLite store in a tempdir,
//! the OpenAI-compatible provider against a scripted model server, the built-in tools and the
//! `message` tool.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use switchboard::agent::{Agent, AgentSettings};
use switchboard::config::{ExecToolConfig, ToolsConfig};
use switchboard::provider::openai::{OpenAiConfig, OpenAiProvider};
use switchboard::store::sqlite::SqliteStore;
use switchboard::tools::{MessageTool, ToolLimits, ToolRegistry, register_local_tools};
use switchboard::worker::agents::Agents;
use switchboard::worker::{Worker, WorkerSettings};
use switchboard_channels::bus::memory::MemoryBus;
use switchboard_testkit::fake_llm::FakeLlm;
use tokio_util::sync::CancellationToken;

pub struct Harness {
    pub bus: Arc<MemoryBus>,
    pub store: Arc<SqliteStore>,
    pub llm: FakeLlm,
    pub shutdown: CancellationToken,
    pub worker: tokio::task::JoinHandle<()>,
    /// The agent's workspace (created), where file tools work.
    pub workspace: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

pub async fn start(settings: WorkerSettings, llm: FakeLlm) -> Harness {
    start_with(settings, llm, false).await
}

/// Like [`start`], with the file tools (`read_file`, `write_file`, `edit_file`, `list_dir`)
/// registered too when `file_tools` is set.
pub async fn start_with(settings: WorkerSettings, llm: FakeLlm, file_tools: bool) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let bus = Arc::new(MemoryBus::new(64));
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let provider = OpenAiProvider::new(OpenAiConfig {
        name: "fake".into(),
        base_url: llm.base_url(),
        api_key: None,
        request_timeout: Duration::from_secs(30),
        stream: false,
        extra_headers: vec![],
    })
    .unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let agent_settings = AgentSettings {
        name: "main".into(),
        system_prompt: "test".into(),
        model: "fake-model".into(),
        max_iterations: 5,
        max_tokens: None,
        temperature: None,
        stream: false,
        prices: Default::default(),
        workspace: workspace.clone(),
    };
    let mut tools = ToolRegistry::with_builtins(ToolLimits::default());
    tools.register(Arc::new(MessageTool::new(bus.clone())));
    if file_tools {
        let config = ToolsConfig {
            exec: ExecToolConfig { enabled: false, ..ExecToolConfig::default() },
            ..ToolsConfig::default()
        };
        register_local_tools(&mut tools, &config).unwrap();
    }
    let agent = Agent::new(Arc::new(provider), tools, agent_settings);
    let worker = Worker::new(bus.clone(), store.clone(), Arc::new(agent), settings);
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let worker = tokio::spawn(async move { worker.run(token).await.unwrap() });
    Harness { bus, store, llm, shutdown, worker, workspace, _dir: dir }
}

/// An agent named `name` answering with the scripted model as `model`, working in
/// `workspace` (created), offering only `allow` of its tools (all when empty).
pub fn fake_agent(
    llm: &FakeLlm,
    bus: &Arc<MemoryBus>,
    name: &str,
    model: &str,
    workspace: std::path::PathBuf,
    allow: &[&str],
) -> Agent {
    std::fs::create_dir_all(&workspace).unwrap();
    let provider = OpenAiProvider::new(OpenAiConfig {
        name: "fake".into(),
        base_url: llm.base_url(),
        api_key: None,
        request_timeout: Duration::from_secs(30),
        stream: false,
        extra_headers: vec![],
    })
    .unwrap();
    let mut tools = ToolRegistry::with_builtins(ToolLimits::default());
    tools.register(Arc::new(MessageTool::new(bus.clone())));
    if !allow.is_empty() {
        tools.retain(&allow.iter().map(|&name| name.to_owned()).collect::<Vec<_>>());
    }
    let settings = AgentSettings {
        name: name.into(),
        system_prompt: "test".into(),
        model: model.into(),
        max_iterations: 5,
        max_tokens: None,
        temperature: None,
        stream: false,
        prices: Default::default(),
        workspace,
    };
    Agent::new(Arc::new(provider), tools, settings)
}

/// Like [`start`], with the agents `make` builds (given the temp dir, the bus and the model).
pub async fn start_agents(
    settings: WorkerSettings,
    llm: FakeLlm,
    make: impl FnOnce(&std::path::Path, &Arc<MemoryBus>, &FakeLlm) -> Agents,
) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let bus = Arc::new(MemoryBus::new(64));
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let agents = make(dir.path(), &bus, &llm);
    let worker = Worker::with_agents(bus.clone(), store.clone(), agents, settings);
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let worker = tokio::spawn(async move { worker.run(token).await.unwrap() });
    let workspace = dir.path().join("workspace");
    Harness { bus, store, llm, shutdown, worker, workspace, _dir: dir }
}
