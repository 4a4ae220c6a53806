//! The daemon's configuration: schema, defaults and loading.
//!
//! Values come from, lowest precedence first: the built-in defaults, a TOML file, and
//! `SWITCHBOARD_<SECTION>__<KEY>` environment variables. Every struct is `#[serde(default)]`
//! so a file written for an older version keeps working, while an unknown key is an error
//! (a typo must not be silently ignored). `config.example.toml` lists every key.
//!
//! A [`Config`] returned by [`Config::load`] is resolved: `data_dir`, `store.path` and
//! `provider.base_url` hold concrete values and the `OPENAI_*` / `ANTHROPIC_*` conventions are
//! applied (see [`providers`] for the model chain).
//! `Config::default()` is the raw defaults, with those fields still empty.

mod active_hours;
mod agents;
pub mod allow_list;
pub mod api;
mod approvals;
mod context;
mod cron;
mod discord;
mod env;
mod error;
mod guard;
mod heartbeat;
mod identity;
mod load;
mod log_format;
mod matrix;
mod mcp;
mod memory;
mod metrics;
mod models;
mod providers;
mod queue_mode;
mod secret;
mod skills;
mod subagents;
mod telegram;
#[cfg(test)]
mod tests;
mod tools;
mod transcription;
mod users;
mod validate;
mod workspace;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

pub use active_hours::ActiveHours;
pub use agents::{BindingConfig, MAIN_AGENT, NamedAgentConfig};
pub use allow_list::AllowList;
pub use api::{ApiChannelConfig, ApiTokenConfig, ApiWebhookConfig};
pub use approvals::ApprovalsConfig;
pub use context::{CompactionConfig, DEFAULT_OUTPUT_RESERVE, HistoryConfig, output_reserve};
pub use cron::CronConfig;
pub use discord::{DiscordChannelConfig, SlashCommandsConfig};
pub use env::{ENV_PREFIX, NON_KEY_VARS};
pub use error::{ConfigError, Origin};
pub use guard::{GuardConfig, GuardMode};
pub use heartbeat::{
    ActiveHoursConfig, BadTarget, DEFAULT_HEARTBEAT_PROMPT, HeartbeatConfig, HeartbeatTarget, MIN_HEARTBEAT_MINUTES,
};
pub use identity::{BadIdentity, BadLevel, Identity, Level};
pub use log_format::LogFormat;
pub use matrix::{MatrixChannelConfig, OtherInvitesConfig};
pub use mcp::{MCP_SEPARATOR, McpConfig, McpServerConfig};
pub use memory::{EmbeddingsConfig, MemoryConfig};
pub use metrics::MetricsConfig;
pub use models::ModelSpec;
pub use providers::{ANTHROPIC_DEFAULT_BASE_URL, CacheTtl, ChainEntry, PromptCache};
pub use queue_mode::QueueMode;
pub use secret::Secret;
pub use skills::SkillsConfig;
pub use subagents::SubagentsConfig;
pub use telegram::{DmPolicyConfig, GroupPolicyConfig, TelegramChannelConfig, TelegramMode};
pub use tools::{ExecToolConfig, FsToolsConfig, MemoryToolsConfig, ToolsConfig, WebToolsConfig};
pub use transcription::{DEFAULT_TRANSCRIPTION_MAX_BYTES, TranscriptionConfig};
pub use users::{BudgetsConfig, GroupAccessConfig, GroupKey, PermissionsConfig, RateLimitsConfig, UsersConfig};
pub use workspace::{DEFAULT_PROTECTED, WorkspaceConfig};

/// The provider URL used when neither the config nor `OPENAI_BASE_URL` names one.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Where the SQLite store and other state live; empty = the platform user data dir.
    pub data_dir: PathBuf,
    /// `memory` for the in-process bus, or a NATS URL (`nats://…`, `tls://…`) for JetStream.
    pub bus: String,
    /// Default model name passed to the provider.
    pub model: String,
    /// `tracing` filter directives; `RUST_LOG` wins when set.
    pub log: String,
    /// `text` (the default) or `json`, one object a line.
    pub log_format: LogFormat,
    pub bus_options: BusOptions,
    /// The provider used when `agent.models` is empty (and available in `agent.models` under
    /// the name of its kind).
    pub provider: ProviderConfig,
    /// Named providers for `agent.models`; the names are the user's.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// USD per million tokens, by model name, for run cost estimates.
    pub prices: BTreeMap<String, ModelPrice>,
    pub agent: AgentConfig,
    /// Named agents besides `[agent]` (which is `main`), each overriding parts of it.
    pub agents: BTreeMap<String, NamedAgentConfig>,
    /// Which agent answers which chat, group, guild or channel; the most specific wins.
    pub bindings: Vec<BindingConfig>,
    pub history: HistoryConfig,
    pub compaction: CompactionConfig,
    pub worker: WorkerConfig,
    pub guard: GuardConfig,
    pub store: StoreConfig,
    pub tools: ToolsConfig,
    /// Recall from the memory of a chat's scope into each turn; embeddings for memory search.
    pub memory: MemoryConfig,
    pub users: UsersConfig,
    pub permissions: PermissionsConfig,
    pub budgets: BudgetsConfig,
    /// Messages per minute a sender may send, by level.
    pub rate_limits: RateLimitsConfig,
    pub channels: ChannelsConfig,
    /// Scheduled jobs: the scheduler and the `cron` tool's limits.
    pub cron: CronConfig,
    /// Periodic wake-ups of the main agent (`[agents.<name>.heartbeat]` for the others).
    pub heartbeat: HeartbeatConfig,
    pub subagents: SubagentsConfig,
    /// Skill folders in the agents' workspaces.
    pub skills: SkillsConfig,
    /// MCP tool servers.
    pub mcp: McpConfig,
    /// The Prometheus endpoint.
    pub metrics: MetricsConfig,
    /// Voice notes turned into text before the model sees them.
    pub transcription: TranscriptionConfig,
    /// The files of the agents' workspaces that only an admin or the owner may change.
    pub workspace: WorkspaceConfig,
    /// Tools whose calls wait for an approver.
    pub approvals: ApprovalsConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::new(),
            bus: "memory".into(),
            model: String::new(),
            log: "info".into(),
            log_format: LogFormat::default(),
            bus_options: BusOptions::default(),
            provider: ProviderConfig::default(),
            providers: BTreeMap::new(),
            prices: BTreeMap::new(),
            agent: AgentConfig::default(),
            agents: BTreeMap::new(),
            bindings: Vec::new(),
            history: HistoryConfig::default(),
            compaction: CompactionConfig::default(),
            worker: WorkerConfig::default(),
            guard: GuardConfig::default(),
            store: StoreConfig::default(),
            tools: ToolsConfig::default(),
            memory: MemoryConfig::default(),
            users: UsersConfig::default(),
            permissions: PermissionsConfig::default(),
            budgets: BudgetsConfig::default(),
            rate_limits: RateLimitsConfig::default(),
            channels: ChannelsConfig::default(),
            cron: CronConfig::default(),
            heartbeat: HeartbeatConfig::default(),
            subagents: SubagentsConfig::default(),
            metrics: MetricsConfig::default(),
            transcription: TranscriptionConfig::default(),
            workspace: WorkspaceConfig::default(),
            approvals: ApprovalsConfig::default(),
            skills: SkillsConfig::default(),
            mcp: McpConfig::default(),
        }
    }
}

/// Which bus implementation `bus` selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusKind<'a> {
    /// The in-process bus (embedded shape), `bus = "memory"`.
    InProcess,
    /// NATS JetStream at this URL (distributed shape).
    Nats(&'a str),
}

/// Tuning for whichever bus `bus` selects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BusOptions {
    /// First token of every NATS subject and stream name.
    pub prefix: String,
    /// How long JetStream waits for a worker's ack (or progress) before redelivering an
    /// inbound message; workers send progress every third of it, so a short one costs little
    /// and brings a dead worker's messages back soon. Adapters' replies keep 30 s.
    pub ack_wait_secs: u64,
    /// JetStream's `Nats-Msg-Id` deduplication window.
    pub duplicate_window_secs: u64,
    /// Seconds an outbound message waits in JetStream for its channel's adapter before the
    /// server drops it (0: no limit).
    pub outbound_max_age_secs: u64,
    /// Capacity of each in-process queue; publishers wait when it is full.
    pub queue_capacity: usize,
    /// Deliveries JetStream hands out unacked per consumer, across all the processes that
    /// share it: all workers' held messages, or one channel's replies being sent. Each worker
    /// holds at most `worker.max_concurrent_runs` + 64 itself; this bounds them all together.
    pub max_ack_pending: u64,
}

impl Default for BusOptions {
    fn default() -> Self {
        Self {
            prefix: "switchboard".into(),
            ack_wait_secs: 6,
            duplicate_window_secs: 120,
            // Like `worker.max_message_age_secs`: a reply an hour late is not worth delivering.
            outbound_max_age_secs: 3600,
            queue_capacity: 1024,
            // Room for several workers at the default `max_concurrent_runs`.
            max_ack_pending: 20_000,
        }
    }
}

impl BusOptions {
    pub fn ack_wait(&self) -> Duration {
        Duration::from_secs(self.ack_wait_secs)
    }

    pub fn duplicate_window(&self) -> Duration {
        Duration::from_secs(self.duplicate_window_secs)
    }

    pub fn outbound_max_age(&self) -> Duration {
        Duration::from_secs(self.outbound_max_age_secs)
    }
}

/// The kind of model provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Any OpenAI-compatible chat completions API (OpenAI, Ollama, vLLM, llama.cpp…).
    #[default]
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }

    /// The hosted API's URL, used when neither the config nor the environment names one.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::Openai => OPENAI_DEFAULT_BASE_URL,
            ProviderKind::Anthropic => ANTHROPIC_DEFAULT_BASE_URL,
        }
    }

    /// The conventional variables for the key and the base URL.
    pub fn env_vars(self) -> (&'static str, &'static str) {
        match self {
            ProviderKind::Openai => ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
            ProviderKind::Anthropic => ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
        }
    }
}

/// A model price, in USD per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelPrice {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Input read from the provider's prompt cache; unset = `input_per_mtok` (OpenAI bills
    /// cached input at a half to a tenth of the input price, Anthropic at a tenth).
    pub cached_input_per_mtok: Option<f64>,
    /// Input written into the prompt cache; unset = `input_per_mtok` (Anthropic bills 1.25
    /// times the input price for a 5-minute entry, twice for a 1-hour one).
    pub cache_write_per_mtok: Option<f64>,
}

/// A model provider: `[provider]`, or one `[providers.<name>]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    /// Empty = the kind's `*_BASE_URL` variable, else the kind's hosted API.
    pub base_url: String,
    /// Empty = the kind's `*_API_KEY` variable (for `[providers.*]`: only when `base_url` is
    /// empty too, so a key is never sent to a server it was not meant for).
    pub api_key: Secret,
    pub request_timeout_secs: u64,
    /// Stream responses (chunks reach the channel as they arrive).
    pub stream: bool,
    /// Retries of a failed request on transient errors (429, 5xx, network).
    pub max_retries: u32,
    /// Its models accept images: the photos of the message being answered go along as image
    /// parts (see `provider::images`).
    pub vision: bool,
    /// Requests to this provider in flight at once, across all agents; 0 = no limit. For a
    /// local server that works on one or a few at a time.
    pub max_concurrent_requests: usize,
    /// Prompt-cache hints: `auto`, `off`, `openai` (`prompt_cache_key`) or `llama.cpp`
    /// (`cache_prompt`); see docs/local-models.md.
    pub prompt_cache: PromptCache,
    /// Anthropic: how long a cache entry lives, `5m` or `1h`.
    pub prompt_cache_ttl: CacheTtl,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            kind: ProviderKind::Openai,
            base_url: String::new(),
            api_key: Secret::default(),
            request_timeout_secs: 120,
            stream: true,
            max_retries: 3,
            vision: false,
            max_concurrent_requests: 0,
            prompt_cache: PromptCache::Auto,
            prompt_cache_ttl: CacheTtl::FiveMinutes,
        }
    }
}

impl ProviderConfig {
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }
}

/// The agent loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentConfig {
    /// The agent that answers chats no binding matches: `main` (this table) or a name
    /// from `[agents.<name>]`.
    pub default: String,
    /// Operator instructions, added to the assembled system prompt as its own section (the
    /// persona and rules come from the workspace files; see `crate::prompt`).
    pub system_prompt: String,
    /// LLM calls per run before the run is stopped.
    pub max_iterations: u32,
    /// Tool-loop detection: the same tool with the same arguments asked for this many times in
    /// one run, or two steps alternating this many times less one (`A, B, A, B` with 3), is a
    /// loop. The model gets one tool result saying so; if it goes on, the run ends. 0 = off.
    pub loop_detection: u32,
    /// Seconds a whole run (every model call and tool of one turn) may take before it is
    /// stopped and the chat told; the chat's next message waits no longer than this.
    pub run_timeout_secs: u64,
    /// Completion token limit per LLM call; 0 = an eighth of the model's context window, at most
    /// 4096 ([`output_reserve`]).
    pub max_tokens: u32,
    /// Sampling temperature; unset = the provider's default.
    pub temperature: Option<f32>,
    /// What the first model call of each turn is told about tools: `auto` (the model decides),
    /// `none`, `required`, or a tool's name (call that tool first). Small local models often
    /// call tools only when named; later calls of the turn are always `auto`.
    pub tool_choice: String,
    /// Messages of history read from the store before the history pipeline (`[history]`)
    /// chooses what the model sees; keep it above `compaction.max_messages`.
    pub history_limit: usize,
    /// The model's context window in tokens: the input budget is this minus `max_tokens`
    /// (when 0: an eighth of the window, at most 4096) minus the offered tools' schemas.
    pub context_window: u64,
    /// The model chain, `"<provider>/<model>"`, first = primary; the next ones are tried when
    /// a model keeps failing transiently. Empty = `[provider]` with `model`. An entry may be a
    /// table with the model's own `context_window` (see [`ModelSpec`]).
    pub models: Vec<ModelSpec>,
    pub tool_timeout_secs: u64,
    /// The agent's working directory for file tools and `exec`; empty = `<data_dir>/workspace`,
    /// relative = under `data_dir`.
    pub workspace: PathBuf,
    /// IANA time zone name (`Europe/Berlin`) for the current time in the system prompt.
    pub timezone: String,
    /// Characters of each workspace bootstrap file put in the prompt; the rest is cut.
    pub bootstrap_max_chars: usize,
    /// Characters of `MEMORY.md` put in the prompt, from its end (the newest facts).
    pub memory_max_chars: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            default: agents::MAIN_AGENT.into(),
            system_prompt: "You are a helpful assistant. Answer concisely and use tools when \
                            they help."
                .into(),
            max_iterations: 20,
            loop_detection: 3,
            // A turn with a few tool calls on a slow local model takes a minute or two; five
            // minutes is a loop, and the chat's next message should not wait longer.
            run_timeout_secs: 300,
            max_tokens: 0,
            temperature: None,
            tool_choice: "auto".into(),
            history_limit: 200,
            context_window: 128_000,
            models: Vec::new(),
            tool_timeout_secs: 60,
            workspace: PathBuf::new(),
            timezone: "UTC".into(),
            bootstrap_max_chars: 8000,
            memory_max_chars: 8000,
        }
    }
}

impl AgentConfig {
    pub fn run_timeout(&self) -> Duration {
        Duration::from_secs(self.run_timeout_secs)
    }

    pub fn tool_timeout(&self) -> Duration {
        Duration::from_secs(self.tool_timeout_secs)
    }

    /// `timezone` as a zone; validated at load, so only a hand-built config can fail here.
    pub fn time_zone(&self) -> Result<crate::zone::Tz, crate::zone::UnknownZone> {
        self.timezone.parse()
    }
}

/// Runs at once by default: with a model that answers in 500 ms, 1,000 chats keep about this
/// many in flight. A waiting run holds little (its history and one connection), so memory,
/// not the two or four cores of a small host, is what bounds it.
pub const DEFAULT_MAX_CONCURRENT_RUNS: usize = 1024;

/// Agent workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerConfig {
    /// Sessions processed in parallel (runs within one session are always sequential). A run
    /// spends nearly all its time waiting for the model, so this is sized for thousands of
    /// chats whose model takes seconds, not for the machine's cores.
    pub max_concurrent_runs: usize,
    /// Deliveries older than this are dropped with a log line, never replayed.
    pub max_message_age_secs: u64,
    /// How long running sessions may take to finish on shutdown.
    pub shutdown_grace_secs: u64,
    /// What messages arriving during a run do, unless a session set its own with `/queue`.
    pub queue_mode: QueueMode,
    /// Quiet time before queued messages are merged into one turn (`collect` mode).
    pub collect_window_ms: u64,
    /// Turns waiting behind a session's running one (a merged burst counts once); a message
    /// that would start one more is not kept, and the chat is told once which ones were not.
    pub max_queue_depth: usize,
    /// Quiet time every person's message waits for before its turn starts, so that what they
    /// send meanwhile joins it; 0 (the default) = none: a message starts its turn at once, a
    /// burst (a forward, an album, a split text) waits a moment for its rest, and what arrives
    /// during a turn is answered together in the next.
    pub debounce_ms: u64,
    /// A person's message that waited longer than this for its turn (behind a slow model's
    /// turns) gets a short note instead, or in `collect` mode is folded into a fresher turn;
    /// heartbeats that waited as long are skipped. 0 = no limit.
    pub max_wait_secs: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            max_concurrent_runs: DEFAULT_MAX_CONCURRENT_RUNS,
            max_message_age_secs: 3600,
            shutdown_grace_secs: 30,
            queue_mode: QueueMode::Followup,
            collect_window_ms: 1500,
            max_queue_depth: 10,
            // No fixed wait: people see a lone message answered at once (bursts are merged
            // without one, see `worker::batch`).
            debounce_ms: 0,
            // Ten minutes behind other turns: the conversation has moved on, and the person
            // is better served by being asked to send it again than by a stale answer.
            max_wait_secs: 600,
        }
    }
}

impl WorkerConfig {
    pub fn max_message_age(&self) -> Duration {
        Duration::from_secs(self.max_message_age_secs)
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }
}

/// The session store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StoreConfig {
    /// SQLite file; empty = `<data_dir>/switchboard.db`, relative = under `data_dir`.
    pub path: PathBuf,
    /// A PostgreSQL database (`postgres://user:password@host:5432/switchboard`) shared by
    /// every process on every host; when set, `path` is not used. Empty = the SQLite file.
    pub database_url: String,
    /// How often a daemon on PostgreSQL checks the connection holding its lock on the database
    /// (see `store::lock`), in milliseconds: the longest it takes work without knowing it holds
    /// the lock.
    pub lock_check_ms: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { path: PathBuf::new(), database_url: String::new(), lock_check_ms: 2000 }
    }
}

/// Channel adapters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChannelsConfig {
    pub api: ApiChannelConfig,
    pub telegram: TelegramChannelConfig,
    pub discord: DiscordChannelConfig,
    pub matrix: MatrixChannelConfig,
}

/// Parses a socket address with an error that says what was expected; the key path is added
/// by the TOML deserializer.
pub(super) fn socket_addr<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse().map_err(|_| {
        serde::de::Error::custom(format!("{text:?} is not a socket address (expected ip:port, e.g. 127.0.0.1:8787)"))
    })
}

impl Config {
    /// The resolved data directory (empty only on a `Config` that was not loaded).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The resolved SQLite store path (empty only on a `Config` that was not loaded).
    pub fn store_path(&self) -> &Path {
        &self.store.path
    }

    /// The bus `bus` selects; `bus` was validated at load.
    pub fn bus_kind(&self) -> BusKind<'_> {
        if self.bus == "memory" { BusKind::InProcess } else { BusKind::Nats(&self.bus) }
    }

    /// The `tracing` filter to use: `RUST_LOG` when set and non-empty, else `log`.
    pub fn log_filter<'a>(&'a self, env: &'a std::collections::HashMap<String, String>) -> &'a str {
        match env.get("RUST_LOG") {
            Some(filter) if !filter.trim().is_empty() => filter,
            _ => &self.log,
        }
    }

    /// Checks that a model can be called: the chain resolves, each entry has a key (or a
    /// server that needs none) and a model. Commands that talk to the model call this at
    /// start; commands that do not (a channel-only process) need not.
    pub fn require_provider(&self) -> Result<(), ConfigError> {
        self.model_chain()?;
        for name in self.agents.keys() {
            self.agent_model_chain(name)?;
        }
        Ok(())
    }
}
