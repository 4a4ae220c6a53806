//! The composition root: one [`Config`] in, the running parts out. `switchboard run`,
//! `switchboard agent`, `switchboard channel <name>` ([`crate::daemon`]) and the test
//! harnesses all assemble through [`Assembly`]; the tests add their [`Overrides`] (a manual
//! clock, settings of their own, extra tools) rather than wiring the parts by hand.
//!
//! [`settings`] and [`channel_settings`] turn the config into the settings of every part.

mod agents;
pub mod channel_settings;
mod channels;
mod descriptors;
mod providers;
pub mod settings;
pub mod shared_dirs;

use std::sync::{Arc, OnceLock};

pub use channels::{ChannelKind, RunningChannel, stop_all};
use switchboard_channels::Bus;
use switchboard_channels::api::ApiError;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::bus::journal::Journal;
use switchboard_channels::bus::nats::NatsBus;
use switchboard_channels::discord::DiscordError;
use switchboard_channels::matrix::MatrixError;
use switchboard_channels::telegram::TelegramError;
use thiserror::Error;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::{BusKind, Config, ConfigError};
use crate::control::Control;
use crate::hygiene::GuardError;
use crate::provider::ProviderError;
use crate::provider::failover::Fitting;
use crate::scheduler::heartbeat::Heartbeats;
use crate::scheduler::{CronScheduler, CronSettings};
use crate::store::StoreError;
use crate::store::cron::CronStore;
use crate::store::{Database, Store};
use crate::subagents::{SubagentManager, SubagentSettings};
use crate::tools::Tool;
use crate::tools::mcp::McpServers;
use crate::users::PolicyError;
use crate::worker::commit::{CommitPort, JournalInStore, StoreThenPublish};
use crate::worker::{Worker, WorkerPorts, WorkerSettings};

#[derive(Debug, Error)]
pub enum AssemblyError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Bus(#[from] switchboard_channels::BusError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot set up the model provider: {0}")]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Guard(#[from] GuardError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
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
    #[error(transparent)]
    Matrix(#[from] MatrixError),
    #[error(
        "the Matrix channel needs a homeserver, a user and a password or access token: set channels.matrix.homeserver, \
         .user and .password (or MATRIX_HOMESERVER, MATRIX_USER and MATRIX_PASSWORD or MATRIX_ACCESS_TOKEN)"
    )]
    NoMatrixLogin,
    #[error(
        "the API would listen on {0}, beyond this machine, with no token: anyone who reaches the port could talk \
         to the agent. Add a token (`switchboard api-token NAME` prints one for channels.api.tokens), listen on \
         127.0.0.1, or set channels.api.allow_unauthenticated = true if something in front of it checks callers"
    )]
    ApiUnguarded(std::net::SocketAddr),
    #[error("the {0} channel is disabled in the config (channels.{0}.enabled = false)")]
    ChannelDisabled(&'static str),
    #[error(transparent)]
    SharedDir(#[from] shared_dirs::SharedDirError),
}

/// What a test changes in the production assembly. Production uses the default.
pub struct Overrides {
    /// The clock of the sub-agents, the cron scheduler and tool, and the heartbeats.
    pub clock: Clock,
    /// Instead of the settings read from the config.
    pub worker: Option<WorkerSettings>,
    pub subagents: Option<SubagentSettings>,
    pub cron: Option<CronSettings>,
    /// Given to every agent, beside the configured ones.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The `message` tool (on in production).
    pub message_tool: bool,
}

impl Default for Overrides {
    fn default() -> Self {
        Self {
            clock: crate::clock::system(),
            worker: None,
            subagents: None,
            cron: None,
            tools: Vec::new(),
            message_tool: true,
        }
    }
}

/// Builds the parts of a process from one config.
pub struct Assembly {
    config: Config,
    overrides: Overrides,
    /// One count of requests in flight per limited provider, for all agents' chains.
    provider_limits: crate::provider::limit::ProviderLimits,
    /// The MCP servers whose tools every agent offers; started with the worker.
    mcp: Arc<McpServers>,
    /// The owner's operations, made on first use (see [`Assembly::control`]).
    control: OnceLock<Arc<Control>>,
}

/// A worker and, when `[subagents]` is enabled, the sub-agent manager its agents share.
pub struct AssembledWorker {
    pub worker: Worker,
    pub subagents: Option<Arc<SubagentManager>>,
}

impl Assembly {
    pub fn new(config: Config) -> Self {
        Self::with_overrides(config, Overrides::default())
    }

    pub fn with_overrides(config: Config, overrides: Overrides) -> Self {
        let mcp = McpServers::new(&config.mcp);
        Self { config, overrides, provider_limits: Default::default(), mcp, control: OnceLock::new() }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The configured store (the SQLite file at `store.path`, or the PostgreSQL database at
    /// `store.database_url`), checked writable.
    pub async fn open_store(&self) -> Result<Arc<dyn Database>, AssemblyError> {
        let store = crate::store::open(&self.config.store).await?;
        store.check_writable().await?;
        Ok(store)
    }

    /// The configured bus. The in-process bus keeps what it accepted in `journal` (the store)
    /// when there is one, so that it survives a crash.
    pub async fn connect_bus(&self, journal: Option<Arc<dyn Journal>>) -> Result<Arc<dyn Bus>, AssemblyError> {
        let config = &self.config;
        Ok(match (config.bus_kind(), journal) {
            (BusKind::InProcess, Some(journal)) => {
                Arc::new(InProcessBus::with_journal(config.bus_options.queue_capacity, journal).await?)
            }
            (BusKind::InProcess, None) => Arc::new(InProcessBus::new(config.bus_options.queue_capacity)),
            (BusKind::Nats(url), _) => Arc::new(NatsBus::connect(url, settings::nats(config)).await?),
        })
    }

    /// The owner's operations, one for the process: the chat adapters' buttons and the worker's
    /// owner commands share it, and a config reload updates it once for both. Made on the first
    /// call; later calls return the same one (their `bus` and `store` are the process's too).
    pub fn control(&self, bus: &Arc<dyn Bus>, store: &Arc<dyn Database>) -> Arc<Control> {
        let control =
            self.control.get_or_init(|| Arc::new(Control::new(Arc::clone(store) as _, Arc::clone(bus), &self.config)));
        Arc::clone(control)
    }

    /// The worker with every agent; the sub-agent manager is built before the agents, whose
    /// `spawn` tools hold it, and the agents are attached to it after.
    pub fn worker(&self, bus: &Arc<dyn Bus>, store: &Arc<dyn Database>) -> Result<AssembledWorker, AssemblyError> {
        let subagents = match self.config.subagents.enabled {
            true => Some(SubagentManager::new(
                Arc::clone(store) as _,
                Arc::clone(bus),
                self.overrides.clock.clone(),
                self.subagent_settings()?,
            )),
            false => None,
        };
        let settings = match &self.overrides.worker {
            Some(settings) => settings.clone(),
            None => settings::worker(&self.config)?,
        };
        let context = Worker::context_for(&settings);
        let agents = self.agents(bus, store, subagents.as_ref(), Arc::clone(&context) as _)?;
        if let Some(manager) = &subagents {
            manager.attach(agents.all());
            manager.use_context(Arc::clone(&context));
        }
        let control = self.control(bus, store);
        let store = Arc::clone(store) as Arc<dyn Store>;
        let ports = WorkerPorts { bus: Arc::clone(bus), commit: commit_port(bus, &store), store };
        let mut worker = Worker::with_agents(ports, agents, settings, control, context);
        if let Some(manager) = &subagents {
            worker = worker.with_subagents(Arc::clone(manager));
        }
        Ok(AssembledWorker { worker, subagents })
    }

    /// The cron scheduler (`[cron] enabled`), running until `shutdown`.
    pub fn start_cron(
        &self,
        bus: &Arc<dyn Bus>,
        store: &Arc<dyn Database>,
        shutdown: &CancellationToken,
    ) -> Option<JoinHandle<()>> {
        if !self.config.cron.enabled {
            return None;
        }
        let store = Arc::clone(store) as Arc<dyn CronStore>;
        let scheduler = CronScheduler::new(store, Arc::clone(bus), self.overrides.clock.clone(), self.cron_settings());
        Some(tokio::spawn(scheduler.run(shutdown.clone())))
    }

    /// What a config reload replaces in a running worker: every agent (bindings, chains, tools,
    /// skills settings, this assembly's MCP servers) and the access policy. The agents' `spawn`
    /// tools hold `subagents`, the running worker's manager; their chains refit requests with
    /// `fitting`, the running worker's context engine.
    pub fn reloadable(
        &self,
        bus: &Arc<dyn Bus>,
        store: &Arc<dyn Database>,
        subagents: Option<&Arc<SubagentManager>>,
        fitting: Arc<dyn Fitting>,
    ) -> Result<(crate::worker::agents::Agents, crate::users::AccessPolicy), AssemblyError> {
        let agents = self.agents(bus, store, subagents, fitting)?;
        let access = settings::access_policy(&self.config)?;
        Ok((agents, access))
    }

    /// The MCP servers' supervisors, running until `shutdown`; `None` without servers.
    pub fn start_mcp(&self, shutdown: &CancellationToken) -> Option<JoinHandle<()>> {
        if self.mcp.is_empty() {
            return None;
        }
        let supervisors = self.mcp.start(shutdown);
        Some(tokio::spawn(async move {
            for supervisor in supervisors {
                if let Err(err) = supervisor.await {
                    tracing::warn!(%err, "an MCP supervisor ended abnormally");
                }
            }
        }))
    }

    /// The heartbeats of every agent whose heartbeat is enabled, running until `shutdown`.
    pub fn start_heartbeats(
        &self,
        bus: &Arc<dyn Bus>,
        store: &Arc<dyn Database>,
        shutdown: &CancellationToken,
    ) -> Result<JoinHandle<()>, AssemblyError> {
        let agents = settings::heartbeat_agents(&self.config)?;
        let heartbeats = Heartbeats::new(Arc::clone(store) as _, Arc::clone(bus), self.overrides.clock.clone(), agents)
            .with_max_message_age(self.config.worker.max_message_age());
        Ok(tokio::spawn(heartbeats.run(shutdown.clone())))
    }

    fn cron_settings(&self) -> CronSettings {
        self.overrides.cron.clone().unwrap_or_else(|| CronSettings::from_config(&self.config))
    }

    fn subagent_settings(&self) -> Result<SubagentSettings, ConfigError> {
        match &self.overrides.subagents {
            Some(settings) => Ok(settings.clone()),
            None => settings::subagents(&self.config),
        }
    }
}

/// Starts the sub-agent reaper. On shutdown, stops the running sub-agents (each recorded and
/// announced as failed while the bus is still up; see [`crate::subagents`]); await the handle
/// before the channels stop.
pub fn start_subagents(manager: Arc<SubagentManager>, shutdown: &CancellationToken) -> JoinHandle<()> {
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

/// How a worker on `bus` commits a run: in one store transaction with the bus's journal when
/// the bus journals in the store (the embedded shape), else stored, then published.
fn commit_port(bus: &Arc<dyn Bus>, store: &Arc<dyn Store>) -> Arc<dyn CommitPort> {
    match Arc::clone(bus).store_journal() {
        Some(journal) => Arc::new(JournalInStore::new(journal, Arc::clone(bus), Arc::clone(store))),
        None => Arc::new(StoreThenPublish::new(Arc::clone(bus), Arc::clone(store))),
    }
}
