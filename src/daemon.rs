//! Wiring: builds the bus, store, provider, agent, worker and channels from the config and
//! runs the parts a command asks for until shutdown.

use std::sync::Arc;

use switchboard_channels::Bus;
use switchboard_channels::api::{ApiChannel, ApiError, ApiSettings, ConnectionLimits, ReplayCache};
use switchboard_channels::bus::memory::MemoryBus;
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_channels::discord::{DiscordChannel, DiscordError};
use switchboard_channels::pairing::PairingStore;
use switchboard_channels::telegram::{TelegramChannel, TelegramError};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentSettings};
use crate::config::BadIdentity;
use crate::config::{BusKind, Config, ConfigError};
use crate::config::{ChainEntry, MAIN_AGENT, ProviderKind};
use crate::context::ContextSettings;
use crate::hygiene::{Guard, GuardError};
use crate::metrics::GaugeSource;
use crate::prompt::PromptSettings;
use crate::provider::anthropic::{AnthropicConfig, AnthropicProvider};
use crate::provider::failover::{FailoverEntry, FailoverProvider};
use crate::provider::openai::{OpenAiConfig, OpenAiProvider};
use crate::provider::pricing::PriceTable;
use crate::provider::{Provider, ProviderError, RetryPolicy};
use crate::scheduler::heartbeat::{HeartbeatAgent, HeartbeatSettings, Heartbeats};
use crate::scheduler::{CronScheduler, CronSettings, CronTool};
use crate::store::StoreError;
use crate::store::cron::CronStore;
use crate::store::lock::{LockMode, StoreLock};
use crate::store::sqlite::SqliteStore;
use crate::subagents::tool::SpawnTool;
use crate::subagents::{SubagentManager, SubagentSettings};
use crate::tools::web::register_web_tools;
use crate::tools::{MessageTool, ToolLimits, ToolRegistry, register_local_tools};
use crate::users::AccessPolicy;
use crate::worker::agents::{Agents, Binding};
use crate::worker::{Worker, WorkerError, WorkerSettings};

#[derive(Debug, Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Bus(#[from] switchboard_channels::BusError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot set up the model provider: {0}")]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Telegram(#[from] TelegramError),
    #[error("the Telegram channel needs a bot token: set channels.telegram.token or TELEGRAM_BOT_TOKEN")]
    NoTelegramToken,
    #[error(transparent)]
    Discord(#[from] DiscordError),
    #[error("the Discord channel needs a bot token: set channels.discord.token or DISCORD_BOT_TOKEN")]
    NoDiscordToken,
    #[error(
        "`switchboard {0}` runs one part of a distributed deployment and needs a NATS bus: set `bus = \"nats://…\"` in the config, SWITCHBOARD_BUS, or --nats URL"
    )]
    NeedsNats(&'static str),
    #[error(transparent)]
    Guard(#[from] GuardError),
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    #[error("users.owners: {0}")]
    Owner(#[from] BadIdentity),
    #[error("unknown channel `{0}`; available: api, telegram, discord")]
    UnknownChannel(String),
    #[error("the {0} channel is disabled in the config (channels.{0}.enabled = false)")]
    ChannelDisabled(&'static str),
}

/// Which parts of switchboard this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parts {
    /// Everything in one process: `switchboard run`.
    All,
    /// Only an agent worker: `switchboard agent`.
    Agent,
    /// Only the API channel: `switchboard channel api`.
    ApiChannel,
    /// Only the Telegram channel: `switchboard channel telegram`.
    TelegramChannel,
    /// Only the Discord channel: `switchboard channel discord`.
    DiscordChannel,
}

impl Parts {
    fn is_channel_only(self) -> bool {
        matches!(self, Parts::ApiChannel | Parts::TelegramChannel | Parts::DiscordChannel)
    }

    fn runs_worker(self) -> bool {
        matches!(self, Parts::All | Parts::Agent)
    }
}

/// Runs `parts` until `shutdown` is cancelled.
pub async fn run(config: Config, parts: Parts, shutdown: CancellationToken) -> Result<(), DaemonError> {
    if !parts.is_channel_only() {
        config.require_provider()?;
    }
    if parts == Parts::TelegramChannel && !config.channels.telegram.is_active() {
        return Err(if config.channels.telegram.enabled {
            DaemonError::NoTelegramToken
        } else {
            DaemonError::ChannelDisabled("telegram")
        });
    }
    if parts == Parts::DiscordChannel && !config.channels.discord.is_active() {
        return Err(if config.channels.discord.enabled {
            DaemonError::NoDiscordToken
        } else {
            DaemonError::ChannelDisabled("discord")
        });
    }
    // Held until this function returns; the kernel drops it if the process dies instead.
    let _lock = match lock_mode(&config, parts) {
        Some(mode) => Some(StoreLock::acquire(config.store_path(), mode)?),
        None => None,
    };
    // The API channel keeps no state; the chat channels keep DM pairings in the store.
    let store = match parts {
        Parts::ApiChannel => None,
        _ => {
            let store = SqliteStore::open(config.store_path()).await?;
            store.check_writable().await?;
            Some(Arc::new(store))
        }
    };
    let bus = tokio::select! {
        bus = connect_bus(&config, parts, store.clone()) => bus?,
        // A process still waiting for the NATS server (started before it at boot) stops when asked.
        () = shutdown.cancelled() => return Ok(()),
    };
    let channels = start_channels(&config, parts, &bus, store.as_ref(), &shutdown).await?;
    let (worker, subagents) = match &store {
        Some(store) if parts.runs_worker() => {
            let (worker, subagents) = build_worker(&config, Arc::clone(&bus), Arc::clone(store))?;
            (Some(worker), subagents.map(|manager| start_subagents(manager, &shutdown)))
        }
        _ => (None, None),
    };
    // What runs beside the worker on a clock; each ends when `shutdown` is cancelled.
    let mut background: Vec<_> = subagents.into_iter().map(|task| ("sub-agents", task)).collect();
    if let (Some(_), Some(store)) = (&worker, &store) {
        background.extend(start_cron(&config, &bus, store, &shutdown).map(|task| ("cron scheduler", task)));
        background.push(("heartbeats", start_heartbeats(&config, Arc::clone(&bus), Arc::clone(store), &shutdown)?));
    }
    if let Some(listen) = config.metrics.listen {
        let sources = gauge_sources(&bus, &channels, worker.as_ref());
        background.push(("metrics endpoint", crate::metrics::start(listen, sources, shutdown.clone()).await?));
    }
    tracing::info!(version = env!("CARGO_PKG_VERSION"), bus = %bus_label(&config), ?parts, "switchboard started");
    if let Some(worker) = worker {
        worker.run(shutdown.clone()).await?;
    }
    shutdown.cancelled().await;
    for (what, task) in background {
        if let Err(err) = task.await {
            tracing::warn!(%err, what, "a background task ended abnormally");
        }
    }
    channels.stop().await?;
    tracing::info!("switchboard stopped");
    Ok(())
}

/// How this process shares the database with others (see [`crate::store::lock`]): alone for
/// the embedded `run`, whose bus journal is in it; shared for workers on NATS; channel-only
/// processes take no lock.
fn lock_mode(config: &Config, parts: Parts) -> Option<LockMode> {
    match config.bus_kind() {
        BusKind::Memory if parts == Parts::All => Some(LockMode::Exclusive),
        BusKind::Nats(_) if parts.runs_worker() => Some(LockMode::Shared),
        _ => None,
    }
}

/// Starts the cron scheduler (`[cron] enabled`); it stops when `shutdown` is cancelled.
fn start_cron(
    config: &Config,
    bus: &Arc<dyn Bus>,
    store: &Arc<SqliteStore>,
    shutdown: &CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    if !config.cron.enabled {
        return None;
    }
    let store: Arc<dyn CronStore> = Arc::clone(store) as Arc<dyn CronStore>;
    let settings = CronSettings::from_config(config);
    let scheduler = CronScheduler::new(store, Arc::clone(bus), crate::clock::system(), settings);
    Some(tokio::spawn(scheduler.run(shutdown.clone())))
}

/// The channel adapters this process runs.
#[derive(Default)]
struct Channels {
    api: Option<ApiChannel>,
    telegram: Option<TelegramChannel>,
    discord: Option<DiscordChannel>,
}

impl Channels {
    /// Stops them after the worker has drained, so finished turns are still delivered.
    async fn stop(self) -> Result<(), DaemonError> {
        if let Some(telegram) = self.telegram {
            telegram.stop().await;
        }
        if let Some(discord) = self.discord {
            discord.stop().await;
        }
        if let Some(api) = self.api {
            api.stop().await?;
        }
        Ok(())
    }
}

/// The parts whose memory the metrics endpoint reports.
fn gauge_sources(bus: &Arc<dyn Bus>, channels: &Channels, worker: Option<&Worker>) -> Vec<GaugeSource> {
    let bus = Arc::clone(bus);
    let mut sources: Vec<GaugeSource> = vec![Box::new(move || bus.gauges())];
    if let Some(api) = channels.api.as_ref().map(ApiChannel::gauges) {
        sources.push(Box::new(move || api.read()));
    }
    if let Some(worker) = worker.map(Worker::gauges) {
        sources.push(Box::new(move || worker.read()));
    }
    sources
}

async fn start_channels(
    config: &Config,
    parts: Parts,
    bus: &Arc<dyn Bus>,
    store: Option<&Arc<SqliteStore>>,
    shutdown: &CancellationToken,
) -> Result<Channels, DaemonError> {
    let mut channels = Channels::default();
    if matches!(parts, Parts::All | Parts::ApiChannel) {
        if config.channels.api.enabled {
            warn_if_descriptors_short(config.channels.api.max_connections);
            let api = ApiChannel::start(Arc::clone(bus), api_settings(config), shutdown.clone()).await?;
            channels.api = Some(api);
        } else if parts == Parts::ApiChannel {
            return Err(DaemonError::ChannelDisabled("api"));
        }
    }
    if matches!(parts, Parts::All | Parts::TelegramChannel) && config.channels.telegram.is_active() {
        let pairing = store.map(|store| Arc::clone(store) as Arc<dyn PairingStore>);
        let settings = crate::channel_settings::telegram(config);
        let telegram = TelegramChannel::start(Arc::clone(bus), settings, pairing, shutdown.clone()).await?;
        channels.telegram = Some(telegram);
    }
    if matches!(parts, Parts::All | Parts::DiscordChannel) && config.channels.discord.is_active() {
        let pairing = store.map(|store| Arc::clone(store) as Arc<dyn PairingStore>);
        let settings = crate::channel_settings::discord(config);
        let discord = DiscordChannel::start(Arc::clone(bus), settings, pairing, shutdown.clone()).await?;
        channels.discord = Some(discord);
    }
    Ok(channels)
}

async fn connect_bus(
    config: &Config,
    parts: Parts,
    store: Option<Arc<SqliteStore>>,
) -> Result<Arc<dyn Bus>, DaemonError> {
    match (config.bus_kind(), store) {
        (BusKind::Memory, _) if parts == Parts::Agent => Err(DaemonError::NeedsNats("agent")),
        (BusKind::Memory, _) if parts.is_channel_only() => Err(DaemonError::NeedsNats("channel")),
        // The journal makes what the in-process bus accepted survive a crash.
        (BusKind::Memory, Some(store)) => {
            Ok(Arc::new(MemoryBus::with_journal(config.bus_options.queue_capacity, store).await?))
        }
        (BusKind::Memory, None) => Ok(Arc::new(MemoryBus::new(config.bus_options.queue_capacity))),
        (BusKind::Nats(url), _) => {
            let options = NatsOptions {
                prefix: config.bus_options.prefix.clone(),
                ack_wait: config.bus_options.ack_wait(),
                duplicate_window: config.bus_options.duplicate_window(),
                outbound_max_age: config.bus_options.outbound_max_age(),
                ..NatsOptions::default()
            };
            Ok(Arc::new(NatsBus::connect(url, options).await?))
        }
    }
}

/// Starts the sub-agent reaper. On shutdown, stops the running sub-agents (each recorded and
/// announced as failed while the bus is still up; see [`crate::subagents`]); await the handle
/// before the channels stop.
fn start_subagents(manager: Arc<SubagentManager>, shutdown: &CancellationToken) -> tokio::task::JoinHandle<()> {
    let reaper = manager.start_reaper(shutdown.clone());
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        manager.shutdown().await;
        if let Err(err) = reaper.await {
            tracing::warn!(%err, "the sub-agent reaper ended abnormally");
        }
    })
}

/// The worker, and the sub-agent manager when `[subagents]` is enabled.
fn build_worker(
    config: &Config,
    bus: Arc<dyn Bus>,
    store: Arc<SqliteStore>,
) -> Result<(Worker, Option<Arc<SubagentManager>>), DaemonError> {
    // Built before the agents, whose `spawn` tools hold it; the agents are attached after.
    let subagents = if config.subagents.enabled {
        let settings = SubagentSettings::from_config(&config.subagents, prompt_settings(&config.agent)?);
        Some(SubagentManager::new(store.clone(), Arc::clone(&bus), crate::clock::system(), settings))
    } else {
        None
    };
    let agents = build_agents(config, &bus, &store, subagents.as_ref())?;
    if let Some(manager) = &subagents {
        manager.attach(agents.all());
    }
    let settings = WorkerSettings {
        max_concurrent_runs: config.worker.max_concurrent_runs,
        max_held: config.worker.max_concurrent_runs * 4,
        max_message_age: config.worker.max_message_age(),
        // A third of the ack wait, so one lost progress message does not cost the delivery.
        progress_interval: config.bus_options.ack_wait() / 3,
        shutdown_grace: config.worker.shutdown_grace(),
        history_limit: config.agent.history_limit,
        context: ContextSettings {
            context_window: config.agent.context_window,
            history: config.history.clone(),
            compaction: config.compaction.clone(),
        },
        access: AccessPolicy::from_config(&config.users, &config.permissions, &config.budgets)?,
        prompt: prompt_settings(&config.agent)?,
        guard: Some(Arc::new(Guard::new(&config.guard)?)),
        queue: crate::worker::QueueSettings::from_config(&config.worker),
        rate_limits: config.rate_limits,
        heartbeat_ack_max_chars: config.heartbeat.ack_max_chars,
        heartbeat_ack_max_chars_by_agent: config
            .agents
            .iter()
            .filter_map(|(name, agent)| Some((name.clone(), agent.heartbeat.as_ref()?.ack_max_chars)))
            .collect(),
    };
    let worker = Worker::with_agents(bus, store, agents, settings);
    Ok(match &subagents {
        Some(manager) => (worker.with_subagents(Arc::clone(manager)), subagents),
        None => (worker, None),
    })
}

/// Starts the heartbeats of every agent whose heartbeat is enabled (`[heartbeat]` for `main`,
/// `[agents.<name>.heartbeat]` or else `[heartbeat]` for the others); they stop with
/// `shutdown`.
fn start_heartbeats(
    config: &Config,
    bus: Arc<dyn Bus>,
    store: Arc<SqliteStore>,
    shutdown: &CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, DaemonError> {
    let workspaces = std::iter::once((MAIN_AGENT, &config.agent.workspace))
        .chain(config.agents.iter().map(|(name, agent)| (name.as_str(), &agent.workspace)));
    let mut agents = Vec::new();
    for (name, workspace) in workspaces {
        let heartbeat = config.heartbeat_for(name);
        if !heartbeat.enabled {
            continue;
        }
        // Validated at load with the key path; a hand-built config fails here.
        let settings = HeartbeatSettings::from_config(heartbeat, &config.agent.timezone).map_err(|err| {
            DaemonError::Config(ConfigError::Invalid {
                key: if name == MAIN_AGENT {
                    format!("heartbeat.{}", err.key)
                } else {
                    format!("agents.{name}.heartbeat.{}", err.key)
                },
                origin: crate::config::Origin::Default,
                reason: err.reason,
            })
        })?;
        agents.push(HeartbeatAgent { name: name.to_owned(), workspace: workspace.clone(), settings });
    }
    let heartbeats = Heartbeats::new(store, bus, crate::clock::system(), agents)
        .with_max_message_age(config.worker.max_message_age());
    Ok(tokio::spawn(heartbeats.run(shutdown.clone())))
}

/// The implicit `main` agent (`[agent]`) and every `[agents.<name>]`, with the bindings.
fn build_agents(
    config: &Config,
    bus: &Arc<dyn Bus>,
    store: &Arc<SqliteStore>,
    subagents: Option<&Arc<SubagentManager>>,
) -> Result<Agents, DaemonError> {
    let mut agents = vec![Arc::new(build_agent(config, bus, store, subagents, MAIN_AGENT)?)];
    for name in config.agents.keys() {
        agents.push(Arc::new(build_agent(config, bus, store, subagents, name)?));
    }
    let bindings = config.bindings.iter().filter_map(Binding::from_config).collect();
    // Validated at load; a hand-built config that names an unknown agent fails here.
    Agents::new(agents, &config.agent.default, bindings).map_err(|err| {
        DaemonError::Config(ConfigError::Invalid {
            key: "bindings".into(),
            origin: crate::config::Origin::Default,
            reason: err.to_string(),
        })
    })
}

/// One agent: `[agent]`, overridden by `[agents.<name>]` when `name` is not `main`.
fn build_agent(
    config: &Config,
    bus: &Arc<dyn Bus>,
    store: &Arc<SqliteStore>,
    subagents: Option<&Arc<SubagentManager>>,
    name: &str,
) -> Result<Agent, DaemonError> {
    let overrides = config.agents.get(name);
    let chain = config.agent_model_chain(name)?;
    let primary = chain.first().map(|entry| entry.model.clone()).unwrap_or_default();
    // Chunks are streamed to the user when the primary streams; the others follow suit.
    let stream = chain.first().is_none_or(|entry| entry.settings.stream);
    let provider = build_provider_chain(&chain)?;
    tracing::info!(agent = name, chain = %provider.name(), "model chain");
    let mut tools = ToolRegistry::with_builtins(ToolLimits {
        timeout: config.agent.tool_timeout(),
        max_result_chars: config.tools.max_result_chars,
        ..ToolLimits::default()
    });
    tools.register(Arc::new(MessageTool::new(Arc::clone(bus))));
    if config.tools.web.enabled {
        register_web_tools(&mut tools, &config.tools.web);
    }
    register_local_tools(&mut tools, &config.tools)?;
    if config.cron.enabled {
        let store = Arc::clone(store) as Arc<dyn CronStore>;
        tools.register(Arc::new(CronTool::new(store, crate::clock::system(), CronSettings::from_config(config))));
    }
    if let Some(manager) = subagents {
        tools.register(Arc::new(SpawnTool::new(Arc::clone(manager))));
    }
    if let Some(allowed) = overrides.map(|o| &o.tools).filter(|tools| !tools.is_empty()) {
        tools.retain(allowed);
    }
    let max_tokens = overrides.and_then(|o| o.max_tokens).unwrap_or(config.agent.max_tokens);
    Ok(Agent::new(
        Arc::new(provider),
        tools,
        AgentSettings {
            name: name.to_owned(),
            system_prompt: overrides
                .and_then(|o| o.system_prompt.clone())
                .unwrap_or_else(|| config.agent.system_prompt.clone()),
            model: primary,
            max_iterations: config.agent.max_iterations,
            max_tokens: Some(max_tokens).filter(|&n| n > 0),
            temperature: config.agent.temperature,
            stream,
            tool_choice: crate::provider::ToolChoice::parse(&config.agent.tool_choice),
            prices: PriceTable::new(config.prices.clone()),
            workspace: overrides.map_or_else(|| config.agent.workspace.clone(), |o| o.workspace.clone()),
        },
    ))
}

fn prompt_settings(agent: &crate::config::AgentConfig) -> Result<PromptSettings, ConfigError> {
    let timezone = agent.time_zone().map_err(|err| ConfigError::Invalid {
        key: "agent.timezone".into(),
        origin: crate::config::Origin::Default,
        reason: err.to_string(),
    })?;
    Ok(PromptSettings { timezone, max_file_chars: agent.bootstrap_max_chars, memory_max_chars: agent.memory_max_chars })
}

/// One provider per name (entries of one provider share its HTTP client), each entry with
/// its provider's retry policy.
fn build_provider_chain(chain: &[ChainEntry]) -> Result<FailoverProvider, ProviderError> {
    let mut built: std::collections::HashMap<&str, Arc<dyn Provider>> = std::collections::HashMap::new();
    let mut entries = Vec::with_capacity(chain.len());
    for entry in chain {
        let provider = match built.get(entry.provider.as_str()) {
            Some(provider) => Arc::clone(provider),
            None => {
                let provider = build_provider(entry)?;
                built.insert(&entry.provider, Arc::clone(&provider));
                provider
            }
        };
        let retry = RetryPolicy { max_retries: entry.settings.max_retries, ..RetryPolicy::default() };
        entries.push(FailoverEntry { provider, model: entry.model.clone(), retry });
    }
    FailoverProvider::new(entries)
}

fn build_provider(entry: &ChainEntry) -> Result<Arc<dyn Provider>, ProviderError> {
    let settings = &entry.settings;
    let api_key = Some(settings.api_key.expose().to_owned()).filter(|k| !k.is_empty());
    Ok(match settings.kind {
        ProviderKind::Openai => Arc::new(OpenAiProvider::new(OpenAiConfig {
            name: entry.provider.clone(),
            base_url: settings.base_url.clone(),
            api_key,
            request_timeout: settings.request_timeout(),
            stream: settings.stream,
            extra_headers: Vec::new(),
        })?),
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(AnthropicConfig {
            name: entry.provider.clone(),
            base_url: settings.base_url.clone(),
            api_key,
            request_timeout: settings.request_timeout(),
            stream: settings.stream,
        })?),
    })
}

/// Descriptors the process needs beside the API's connections (bus, store, model requests,
/// exec pipes, channel clients).
const DESCRIPTORS_BESIDE_API: u64 = 256;

/// Says so at start when the API's connection limit does not fit the descriptor limit: a
/// flood of connections would then starve everything else of descriptors.
fn warn_if_descriptors_short(max_connections: usize) {
    let mut rlimit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rlimit) } != 0 {
        return;
    }
    let needed = u64::try_from(max_connections).unwrap_or(u64::MAX).saturating_add(DESCRIPTORS_BESIDE_API);
    if rlimit.rlim_cur != libc::RLIM_INFINITY && rlimit.rlim_cur < needed {
        tracing::warn!(
            descriptor_limit = rlimit.rlim_cur,
            max_connections,
            needed,
            "channels.api.max_connections does not fit the descriptor limit; lower it or raise the limit (ulimit -n, LimitNOFILE=)"
        );
    }
}

fn api_settings(config: &Config) -> ApiSettings {
    let api = &config.channels.api;
    ApiSettings {
        listen: api.listen,
        token: Some(api.token.expose().to_owned()).filter(|t| !t.is_empty()),
        reply_timeout: api.reply_timeout(),
        max_body_bytes: api.max_body_bytes,
        limits: ConnectionLimits {
            header_timeout: api.header_timeout(),
            idle_timeout: api.idle_timeout(),
            max_connections: api.max_connections,
            max_header_bytes: api.max_header_bytes,
        },
        replay: ReplayCache { ttl: api.idempotency_ttl(), max_entries: api.idempotency_max_entries },
    }
}

/// The bus for logs, without credentials a NATS URL may carry.
fn bus_label(config: &Config) -> String {
    match config.bus_kind() {
        BusKind::Memory => "memory".to_owned(),
        BusKind::Nats(url) => match url.split_once('@') {
            Some((scheme_and_auth, host)) => {
                let scheme = scheme_and_auth.split("://").next().unwrap_or("nats");
                format!("{scheme}://***@{host}")
            }
            None => url.to_owned(),
        },
    }
}
