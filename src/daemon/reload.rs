//! SIGHUP: the config read again and applied without a restart. What turns use is replaced
//! (agents, bindings, model chains, tools and skills settings, permissions and budgets, MCP
//! servers), from the next turn on; a running turn finishes with what it started with. A config
//! that does not load, validate or build is refused with its error, and the running one stays.
//! Channels, the bus, the store, cron and heartbeats keep what they started with (a restart
//! applies those); the log says so.

use std::path::PathBuf;
use std::sync::Arc;

use switchboard_channels::Bus;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::assembly::Assembly;
use crate::config::Config;
use crate::store::Database;
use crate::subagents::SubagentManager;
use crate::worker::Reloader;

/// What a reload needs from the running daemon.
pub(super) struct Reload {
    /// The config file given at start (`--config`, `SWITCHBOARD_CONFIG`, or the default place).
    pub path: Option<PathBuf>,
    pub bus: Arc<dyn Bus>,
    pub store: Arc<dyn Database>,
    pub subagents: Option<Arc<SubagentManager>>,
    pub reloader: Reloader,
    /// The MCP servers running now: what stops them, and their supervisors.
    pub mcp: (CancellationToken, Option<JoinHandle<()>>),
}

/// SIGHUP, listened for from the moment this is called: until then the signal's default action
/// would end the process, so the daemon calls it before anything answers (a health check that
/// passes is no promise that a reload is safe otherwise). `None` when it cannot be installed.
pub(super) fn hangups() -> Option<Signal> {
    match signal(SignalKind::hangup()) {
        Ok(hangups) => Some(hangups),
        Err(err) => {
            tracing::warn!(%err, "cannot listen for SIGHUP; a config change needs a restart");
            None
        }
    }
}

/// Applies the config on each SIGHUP until `shutdown`; without a worker (`reload` is `None`),
/// says there is nothing to reload instead of dying of the signal.
pub(super) fn start(hangups: Option<Signal>, reload: Option<Reload>, shutdown: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let Some(mut hangups) = hangups else { return };
        let mut reload = reload;
        loop {
            tokio::select! {
                _ = hangups.recv() => match reload.as_mut() {
                    Some(reload) => reload.apply(&shutdown).await,
                    None => tracing::info!("SIGHUP: this process runs no agent worker; a channel's settings change with a restart"),
                },
                () = shutdown.cancelled() => break,
            }
        }
        if let Some(Reload { mcp: (stop, Some(supervisors)), .. }) = reload {
            stop.cancel();
            if let Err(err) = supervisors.await {
                tracing::warn!(%err, "the MCP servers' supervisors ended abnormally");
            }
        }
    })
}

impl Reload {
    async fn apply(&mut self, shutdown: &CancellationToken) {
        tracing::info!(path = ?self.path, "SIGHUP: reading the config again");
        let config = match Config::load_from_process_env(self.path.as_deref()) {
            Ok(config) => config,
            Err(err) => return refused(&err.to_string()),
        };
        if let Err(err) = config.require_provider() {
            return refused(&err.to_string());
        }
        let assembly = Assembly::new(config);
        let built = assembly.reloadable(&self.bus, &self.store, self.subagents.as_ref());
        let (agents, access) = match built {
            Ok(built) => built,
            Err(err) => return refused(&err.to_string()),
        };
        // The new servers start before the old ones stop, so tools that stay come back soon.
        let stop = shutdown.child_token();
        let supervisors = assembly.start_mcp(&stop);
        self.reloader.apply(agents, access);
        let (old_stop, old_supervisors) = std::mem::replace(&mut self.mcp, (stop, supervisors));
        old_stop.cancel();
        if let Some(old) = old_supervisors
            && let Err(err) = old.await
        {
            tracing::warn!(%err, "the old MCP servers' supervisors ended abnormally");
        }
        tracing::info!(
            "config reloaded: agents, bindings, models, tools, skills, permissions, budgets and MCP servers apply from the next turn; channels, bus, store, cron and heartbeats need a restart"
        );
    }
}

fn refused(error: &str) {
    tracing::error!(%error, "config reload refused; the running config stays");
}
