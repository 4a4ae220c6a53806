//! Runs the parts a command asks for until shutdown, assembled by [`crate::assembly`].

mod reload;
mod restart;
mod startup_pages;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::assembly::{self, Assembly, AssemblyError, ChannelKind, RunningChannel};
use crate::config::{BusKind, Config};
use crate::console::HealthProbe;
use crate::metrics::GaugeSource;
use crate::store::StoreError;
use crate::store::lock::{KeptLock, LockMode};
use crate::worker::{Worker, WorkerError};

#[derive(Debug, Error)]
pub enum DaemonError {
    #[error(transparent)]
    Assembly(#[from] AssemblyError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error(
        "`switchboard {0}` runs one part of a distributed deployment and needs a NATS bus: set `bus = \"nats://…\"` in the config, SWITCHBOARD_BUS, or --nats URL"
    )]
    NeedsNats(&'static str),
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    #[error("cannot listen on {addr}: {source}{hint}")]
    ApiAddress { addr: std::net::SocketAddr, source: std::io::Error, hint: &'static str },
}

/// Which parts of switchboard this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parts {
    /// Everything in one process: `switchboard run`.
    All,
    /// Only an agent worker: `switchboard agent`.
    Agent,
    /// Only one channel adapter: `switchboard channel <name>`.
    Channel(ChannelKind),
}

impl Parts {
    fn runs_worker(self) -> bool {
        matches!(self, Parts::All | Parts::Agent)
    }

    fn channels(self) -> &'static [ChannelKind] {
        match self {
            Parts::All => &ChannelKind::ALL,
            Parts::Agent => &[],
            Parts::Channel(ChannelKind::Api) => &[ChannelKind::Api],
            Parts::Channel(ChannelKind::Telegram) => &[ChannelKind::Telegram],
            Parts::Channel(ChannelKind::Discord) => &[ChannelKind::Discord],
            Parts::Channel(ChannelKind::Matrix) => &[ChannelKind::Matrix],
        }
    }

    /// Why these parts cannot run on `config`, checked before anything starts.
    fn refusal(self, config: &Config) -> Option<DaemonError> {
        if let Parts::Channel(kind) = self
            && let Some(refusal) = kind.refusal(config)
        {
            return Some(refusal.into());
        }
        match (self, config.bus_kind()) {
            (Parts::Agent, BusKind::InProcess) => Some(DaemonError::NeedsNats("agent")),
            (Parts::Channel(_), BusKind::InProcess) => Some(DaemonError::NeedsNats("channel")),
            _ => None,
        }
    }

    /// How this process shares the database with others (see [`crate::store::lock`]): alone
    /// for the embedded `run`, whose bus journal is in it; shared for workers on NATS;
    /// channel-only processes take no lock.
    fn lock_mode(self, config: &Config) -> Option<LockMode> {
        match config.bus_kind() {
            BusKind::InProcess if self == Parts::All => Some(LockMode::Exclusive),
            BusKind::Nats(_) if self.runs_worker() => Some(LockMode::Shared),
            _ => None,
        }
    }
}

/// Runs `parts` until `shutdown` is cancelled; on SIGHUP, reads the config at `config_path`
/// (and the environment) again (see [`reload`]). The owner console's health page runs `health`.
pub async fn run(
    config: Config,
    parts: Parts,
    config_path: Option<PathBuf>,
    health: Option<Arc<dyn HealthProbe>>,
    shutdown: CancellationToken,
) -> Result<(), DaemonError> {
    let hangups = reload::hangups();
    if parts.runs_worker() {
        config.require_provider().map_err(AssemblyError::from)?;
    }
    if let Some(refusal) = parts.refusal(&config) {
        return Err(refusal);
    }
    api_address_free(&config, parts)?;
    let lock_mode = parts.lock_mode(&config);
    let assembly = Assembly::new(config);
    // Every part keeps something in the store: the API its sessions, runs and outbox, the chat
    // channels their DM pairings.
    let store = assembly.open_store().await?;
    // Held until this function returns; the kernel (or the database server) drops it if the
    // process dies instead. Kept: a PostgreSQL lock whose connection ended is taken back.
    let check = Duration::from_millis(assembly.config().store.lock_check_ms);
    let mut lock = match lock_mode {
        Some(mode) => Some(store.lock(mode).await?.keep(check)),
        None => None,
    };
    let places = assembly::shared_dirs::places(assembly.config(), parts.runs_worker(), parts.channels());
    assembly::shared_dirs::check(store.as_ref(), &places).await.map_err(AssemblyError::from)?;
    let bus = tokio::select! {
        bus = assembly.connect_bus(Some(Arc::clone(&store) as _)) => bus?,
        // A process still waiting for the NATS server (started before it at boot) stops when asked.
        () = shutdown.cancelled() => return Ok(()),
    };
    let channels = assembly.start_channels(parts.channels(), &bus, &store, health, &shutdown).await?;
    let (worker, mut background, worker_parts) = match parts.runs_worker() {
        true => start_worker(&assembly, &bus, &store, &shutdown)?,
        false => (None, Vec::new(), None),
    };
    let reload = reload::Reload {
        path: config_path,
        started: assembly.config().clone(),
        applied: assembly.config().clone(),
        api_access: channels.iter().find_map(|channel| channel.api_access()),
        worker: worker_parts,
    };
    background.push(("config reload", reload::start(hangups, reload, shutdown.clone())));
    if let Some(listen) = assembly.config().metrics.listen {
        let sources = gauge_sources(&bus, &channels, worker.as_ref());
        background.push((
            "metrics endpoint",
            crate::metrics::start(listen, sources, Arc::clone(&bus), shutdown.clone()).await?,
        ));
    }
    let bus_label = assembly::settings::bus_label(assembly.config());
    tracing::info!(version = env!("CARGO_PKG_VERSION"), bus = %bus_label, ?parts, "switchboard started");
    let turns = worker.as_ref().map(Worker::gauges);
    startup_pages::give_back_after_startup(move || turns.as_ref().is_none_or(|turns| turns.busy_sessions() == 0));
    crate::systemd::ready(&format!("serving ({bus_label})"));
    background.extend(crate::systemd::watchdog(&shutdown).map(|task| ("systemd watchdog", task)));
    background.push(("systemd stopping", crate::systemd::stopping_on(&shutdown)));
    if let Some(worker) = worker {
        let worker = match &lock {
            Some(lock) => worker.with_intake_gate(lock.held()),
            None => worker,
        };
        tokio::select! {
            done = worker.run(shutdown.clone()) => done?,
            // Another process works on the database now: this one must not go on beside it.
            err = lock_lost(lock.as_mut()) => {
                tracing::error!(%err, "stopping");
                shutdown.cancel();
                return Err(err.into());
            }
        }
    }
    shutdown.cancelled().await;
    for (what, task) in background {
        tracing::debug!(what, "waiting for a background task to stop");
        if let Err(err) = task.await {
            tracing::warn!(%err, what, "a background task ended abnormally");
        }
    }
    assembly::stop_all(channels).await?;
    tracing::info!("switchboard stopped");
    Ok(())
}

/// Tries the API's address before anything else: a second `run` (on another data dir) whose
/// address is taken says so at once, rather than after creating and migrating a database.
/// The channel binds it again when it starts.
fn api_address_free(config: &Config, parts: Parts) -> Result<(), DaemonError> {
    if !(config.channels.api.enabled && parts.channels().contains(&ChannelKind::Api)) {
        return Ok(());
    }
    let addr = config.channels.api.listen;
    std::net::TcpListener::bind(addr).map(drop).map_err(|source| {
        let hint = match source.kind() {
            std::io::ErrorKind::AddrInUse => {
                " (is another switchboard running? Stop it, or set channels.api.listen or \
                 SWITCHBOARD_CHANNELS__API__LISTEN to another address)"
            }
            _ => "",
        };
        DaemonError::ApiAddress { addr, source, hint }
    })
}

/// Waits until `lock` is lost for good; never without a lock.
async fn lock_lost(lock: Option<&mut KeptLock>) -> StoreError {
    match lock {
        Some(lock) => lock.lost().await,
        None => std::future::pending().await,
    }
}

/// What runs beside the worker on a clock; each ends when `shutdown` is cancelled.
type Background = Vec<(&'static str, JoinHandle<()>)>;

/// The worker, with the sub-agents, the cron scheduler, the heartbeats and the MCP servers
/// started beside it, and what a config reload replaces in it.
fn start_worker(
    assembly: &Assembly,
    bus: &Arc<dyn switchboard_channels::Bus>,
    store: &Arc<dyn crate::store::Database>,
    shutdown: &CancellationToken,
) -> Result<(Option<Worker>, Background, Option<reload::WorkerParts>), DaemonError> {
    let assembled = assembly.worker(bus, store)?;
    let mut background: Background = Vec::new();
    if let Some(manager) = &assembled.subagents {
        background.push(("sub-agents", assembly::start_subagents(Arc::clone(manager), shutdown)));
    }
    background.extend(assembly.start_cron(bus, store, shutdown).map(|task| ("cron scheduler", task)));
    background.push(("heartbeats", assembly.start_heartbeats(bus, store, shutdown)?));
    // A reload replaces the MCP servers: their own stop, under the daemon's.
    let mcp_stop = shutdown.child_token();
    let mcp = assembly.start_mcp(&mcp_stop);
    let parts = reload::WorkerParts {
        bus: Arc::clone(bus),
        store: Arc::clone(store),
        subagents: assembled.subagents,
        reloader: assembled.worker.reloader(),
        control: assembly.control(bus, store),
        mcp: (mcp_stop, mcp),
    };
    Ok((Some(assembled.worker), background, Some(parts)))
}

/// The parts whose memory the metrics endpoint reports.
fn gauge_sources(
    bus: &Arc<dyn switchboard_channels::Bus>,
    channels: &[Box<dyn RunningChannel>],
    worker: Option<&Worker>,
) -> Vec<GaugeSource> {
    let bus = Arc::clone(bus);
    let mut sources: Vec<GaugeSource> = vec![Box::new(move || bus.gauges())];
    sources.extend(channels.iter().filter_map(|channel| channel.gauges()));
    if let Some(worker) = worker.map(Worker::gauges) {
        sources.push(Box::new(move || worker.read()));
    }
    sources
}
