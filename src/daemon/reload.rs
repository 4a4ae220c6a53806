//! SIGHUP: the config read again and applied without a restart. What turns use is replaced
//! (agents, bindings, model chains, tools and skills settings, permissions and budgets, MCP
//! servers), from the next turn on, and so are the owners and approvers who decide; a running
//! turn finishes with what it started with. A config that does not load, validate or build is
//! refused with its error, and the running one stays.
//! The API's tokens are replaced at once, in the worker and in a process serving only the API:
//! a revoked token must not keep working. Channels, the bus, the store, cron, heartbeats and
//! the worker's own limits keep what they started with (a restart applies those); the log
//! names each such setting that differs from what the process started with, on every reload
//! until a restart applies it. Such a setting is judged by what runs, never by the last file
//! read: a reload that moves the API's listen address to loopback (not applied) and a later one
//! that removes its token must not leave a public listener open.

use std::path::PathBuf;
use std::sync::Arc;

use switchboard_channels::Bus;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::assembly::Assembly;
use crate::config::Config;
use crate::control::Control;
use crate::store::Database;
use crate::subagents::SubagentManager;
use crate::worker::Reloader;
use switchboard_channels::api::LiveAccess;

use super::restart;

/// What a reload needs from the running daemon.
pub(super) struct Reload {
    /// The config file given at start (`--config`, `SWITCHBOARD_CONFIG`, or the default place).
    pub path: Option<PathBuf>,
    /// The config the process started with: the settings a reload cannot apply (the API's
    /// listen address, the channels, the bus, …) are in force as it says until a restart.
    pub started: Config,
    /// The last config applied (the started one until a reload is taken): what the API's
    /// tokens are compared with.
    pub applied: Config,
    /// The API's tokens, when this process serves the API.
    pub api_access: Option<LiveAccess>,
    /// What turns use, when this process runs the agent worker.
    pub worker: Option<WorkerParts>,
}

/// The parts of a running worker a reload replaces.
pub(super) struct WorkerParts {
    pub bus: Arc<dyn Bus>,
    /// The whole database, handed back to the assembly, which gives the rebuilt agents' tools
    /// their roles of it.
    pub store: Arc<dyn Database>,
    pub subagents: Option<Arc<SubagentManager>>,
    pub reloader: Reloader,
    /// The owner's operations (the worker's commands and the chat adapters' buttons): who is
    /// an owner or approver, what an approved stranger gets.
    pub control: Arc<Control>,
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

/// Applies the config on each SIGHUP until `shutdown`.
pub(super) fn start(hangups: Option<Signal>, mut reload: Reload, shutdown: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let Some(mut hangups) = hangups else { return };
        loop {
            tokio::select! {
                _ = hangups.recv() => reload.apply(&shutdown).await,
                () = shutdown.cancelled() => break,
            }
        }
        if let Some(WorkerParts { mcp: (stop, Some(supervisors)), .. }) = reload.worker {
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
        if let Some(refusal) = self.refusal(&config) {
            return refused(&refusal);
        }
        if let Some(worker) = self.worker.as_mut() {
            if let Err(err) = config.require_provider() {
                return refused(&err.to_string());
            }
            if let Err(err) = worker.apply(&config, shutdown).await {
                return refused(&err);
            }
        }
        let tokens_changed = restart::api_tokens_changed(&self.applied, &config);
        if let Some(live) = self.api_access.as_ref().filter(|_| tokens_changed) {
            let access = crate::assembly::settings::api_access(&config.channels.api);
            let count = access.tokens.len();
            live.replace(access);
            tracing::warn!(tokens = count, "the API's tokens changed: in force from the next request");
        }
        let stale = restart::needing_restart(&self.started, &config);
        let applied = match self.worker.is_some() {
            true => {
                "agents, bindings, models, tools, skills, permissions, budgets, owners, approvers and MCP servers apply \
                 from the next turn"
            }
            false => "this process runs no agent worker",
        };
        match stale.is_empty() {
            true => tracing::info!("config reloaded: {applied}"),
            false => tracing::warn!(
                "config reloaded: {applied}; these changed settings need a restart to apply: {}",
                stale.join(", ")
            ),
        }
        self.applied = config;
    }

    /// Why `config` cannot be taken: its tokens would leave a listener beyond loopback open to
    /// everyone. The address is the one bound at start, whatever the file now says: a reload
    /// does not move the listener.
    fn refusal(&self, config: &Config) -> Option<String> {
        let listen = self.started.channels.api.listen;
        let api = &config.channels.api;
        let opens = self.api_access.is_some() && !listen.ip().is_loopback() && !api.has_tokens();
        (opens && !api.allow_unauthenticated).then(|| {
            format!(
                "the new config has no API token, and the API listens on {listen}, beyond loopback: it would be open \
                 to anyone who reaches it (set channels.api.allow_unauthenticated = true if that is meant)"
            )
        })
    }
}

impl WorkerParts {
    /// Replaces what turns use and the MCP servers; an error leaves everything as it was.
    async fn apply(&mut self, config: &Config, shutdown: &CancellationToken) -> Result<(), String> {
        let assembly = Assembly::new(config.clone());
        let built = assembly.reloadable(&self.bus, &self.store, self.subagents.as_ref(), self.reloader.fitting());
        let (agents, access) = built.map_err(|err| err.to_string())?;
        // The new servers start before the old ones stop, so tools that stay come back soon.
        let stop = shutdown.child_token();
        let supervisors = assembly.start_mcp(&stop);
        self.reloader.apply(agents, access);
        self.control.reload(config);
        let (old_stop, old_supervisors) = std::mem::replace(&mut self.mcp, (stop, supervisors));
        old_stop.cancel();
        if let Some(old) = old_supervisors
            && let Err(err) = old.await
        {
            tracing::warn!(%err, "the old MCP servers' supervisors ended abnormally");
        }
        Ok(())
    }
}

fn refused(error: &str) {
    tracing::error!(%error, "config reload refused; the running config stays");
}
