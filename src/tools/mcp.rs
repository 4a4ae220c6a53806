//! MCP tool servers (`[mcp.servers.<name>]`): each is started and watched by a supervisor
//! task, and its tools join every agent's registry as `<server>__<tool>` while it is up (see
//! docs/mcp.md).
//!
//! Start-up never waits for a server: its tools appear when it has listed them. A server that
//! exits, breaks its connection or stops answering pings is marked down (its tools leave the
//! registry, so the model is not offered what cannot run) and started again after a pause
//! that doubles from 1 s up to a minute, and starts over once a run lasted a while.

mod connect;
mod gateway;
mod tool;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::model::ClientRequest;
use rmcp::service::Peer;
use thiserror::Error;
use tokio_util::sync::CancellationToken;

pub use gateway::{MCP_CALL, MCP_TOOL_SEARCH, McpCall, McpToolSearch};

use super::{Tool, ToolSet, ToolSource};
use crate::config::{McpConfig, McpServerConfig};

/// Why a server is not running.
#[derive(Debug, Error)]
pub enum McpError {
    #[error("cannot start `{command}`: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("the MCP handshake failed: {0}")]
    Initialize(String),
    #[error("header `{0}` is not a valid HTTP header")]
    Header(String),
    #[error("listing its tools failed: {0}")]
    ListTools(String),
    #[error("it did not start and list its tools within {0:?}")]
    StartTimeout(Duration),
    #[error("it did not answer a ping within {0:?}")]
    PingTimeout(Duration),
    #[error("a ping failed: {0}")]
    Ping(String),
    #[error("it ended: {0}")]
    Ended(String),
}

/// What a server is doing, for `switchboard mcp list`, `doctor` and the logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerStatus {
    Starting,
    /// Up, with these tools (as the model sees their names: `<server>__<tool>`).
    Ready {
        tools: Vec<String>,
    },
    /// Down since its last attempt; the next one is due in `retry_in` from `at`.
    Down {
        error: String,
        failures: u32,
        retry_in: Duration,
    },
    /// `enabled = false`.
    Disabled,
}

/// A run that lasted this long counts as a success: the next failure waits 1 s again.
const STABLE: Duration = Duration::from_secs(120);
/// The longest pause between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// One server, and its session while it runs.
pub(crate) struct Server {
    pub name: String,
    config: McpServerConfig,
    /// `timeout_secs`, when set.
    pub call_timeout: Option<Duration>,
    peer: RwLock<Option<Peer<RoleClient>>>,
    status: Mutex<ServerStatus>,
}

impl Server {
    /// The session to call, while the server is up.
    pub(crate) fn peer(&self) -> Option<Peer<RoleClient>> {
        self.peer.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set_status(&self, status: ServerStatus) {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner) = status;
    }

    fn status(&self) -> ServerStatus {
        self.status.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Every configured server and the tools of those that are up.
pub struct McpServers {
    servers: Vec<Arc<Server>>,
    startup_timeout: Duration,
    ping_every: Option<Duration>,
    /// Each running server's tools, by server.
    by_server: Mutex<BTreeMap<String, Vec<Arc<dyn Tool>>>>,
    /// All of them, rebuilt when a server comes or goes; what the registries read.
    current: RwLock<Arc<ToolSet>>,
}

impl McpServers {
    pub fn new(config: &McpConfig) -> Arc<Self> {
        let servers = config
            .servers
            .iter()
            .map(|(name, server)| {
                let status = if server.enabled { ServerStatus::Starting } else { ServerStatus::Disabled };
                Arc::new(Server {
                    name: name.clone(),
                    config: server.clone(),
                    call_timeout: (server.timeout_secs > 0).then(|| Duration::from_secs(server.timeout_secs)),
                    peer: RwLock::new(None),
                    status: Mutex::new(status),
                })
            })
            .collect();
        Arc::new(Self {
            servers,
            startup_timeout: Duration::from_secs(config.startup_timeout_secs.max(1)),
            ping_every: (config.ping_secs > 0).then(|| Duration::from_secs(config.ping_secs)),
            by_server: Mutex::default(),
            current: RwLock::default(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Starts a supervisor for each enabled server; they stop with `cancel`.
    pub fn start(self: &Arc<Self>, cancel: &CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        let enabled = self.servers.iter().filter(|server| server.config.enabled);
        enabled.map(|server| tokio::spawn(Arc::clone(self).supervise(Arc::clone(server), cancel.clone()))).collect()
    }

    /// Each server's name and status, in name order.
    pub fn statuses(&self) -> Vec<(String, ServerStatus)> {
        self.servers.iter().map(|server| (server.name.clone(), server.status())).collect()
    }

    /// The longest call timeout a server sets, for `mcp_call`.
    fn longest_call_timeout(&self) -> Option<Duration> {
        self.servers.iter().filter_map(|server| server.call_timeout).max()
    }

    async fn supervise(self: Arc<Self>, server: Arc<Server>, cancel: CancellationToken) {
        let mut failures = 0u32;
        loop {
            let started = Instant::now();
            let error = tokio::select! {
                error = self.run_once(&server) => error,
                () = cancel.cancelled() => break,
            };
            self.withdraw(&server);
            if started.elapsed() >= STABLE {
                failures = 0;
            }
            failures += 1;
            let retry_in = backoff(failures);
            tracing::warn!(mcp = %server.name, %error, failures, retry_in_secs = retry_in.as_secs(), "MCP server down; starting it again after a pause");
            server.set_status(ServerStatus::Down { error: error.to_string(), failures, retry_in });
            tokio::select! {
                () = tokio::time::sleep(retry_in) => {}
                () = cancel.cancelled() => break,
            }
        }
        self.withdraw(&server);
    }

    /// Starts the server, offers its tools while it runs, and returns why it stopped.
    async fn run_once(&self, server: &Arc<Server>) -> McpError {
        let start = async {
            let running = connect::connect(&server.name, &server.config).await?;
            let tools = running.peer().list_all_tools().await.map_err(|err| McpError::ListTools(err.to_string()))?;
            Ok::<_, McpError>((running, tools))
        };
        let (running, tools) = match tokio::time::timeout(self.startup_timeout, start).await {
            Ok(Ok(started)) => started,
            Ok(Err(error)) => return error,
            Err(_) => return McpError::StartTimeout(self.startup_timeout),
        };
        let peer = running.peer().clone();
        let stop = running.cancellation_token();
        self.publish(server, &tools, peer.clone());
        let error = tokio::select! {
            quit = running.waiting() => McpError::Ended(match quit {
                Ok(reason) => format!("{reason:?}"),
                Err(err) => err.to_string(),
            }),
            error = self.keep_pinging(&peer) => error,
        };
        // A hung server is stopped (its process group killed) before the next attempt.
        stop.cancel();
        error
    }

    /// Pings the server every `ping_every`; returns when one goes unanswered.
    async fn keep_pinging(&self, peer: &Peer<RoleClient>) -> McpError {
        let Some(every) = self.ping_every else { return std::future::pending().await };
        loop {
            tokio::time::sleep(every).await;
            let ping = peer.send_request(ClientRequest::PingRequest(Default::default()));
            match tokio::time::timeout(self.startup_timeout, ping).await {
                Ok(Ok(_)) => {}
                Ok(Err(err)) => return McpError::Ping(err.to_string()),
                Err(_) => return McpError::PingTimeout(self.startup_timeout),
            }
        }
    }

    fn publish(&self, server: &Arc<Server>, tools: &[rmcp::model::Tool], peer: Peer<RoleClient>) {
        *server.peer.write().unwrap_or_else(PoisonError::into_inner) = Some(peer);
        let tools: Vec<Arc<dyn Tool>> =
            tools.iter().map(|tool| Arc::new(tool::McpTool::new(Arc::clone(server), tool)) as Arc<dyn Tool>).collect();
        let names: Vec<String> = tools.iter().map(|tool| tool.name().to_owned()).collect();
        tracing::info!(mcp = %server.name, tools = names.len(), "MCP server ready");
        self.by_server.lock().unwrap_or_else(PoisonError::into_inner).insert(server.name.clone(), tools);
        self.rebuild();
        server.set_status(ServerStatus::Ready { tools: names });
    }

    fn withdraw(&self, server: &Server) {
        *server.peer.write().unwrap_or_else(PoisonError::into_inner) = None;
        let removed = self.by_server.lock().unwrap_or_else(PoisonError::into_inner).remove(&server.name);
        if removed.is_some() {
            self.rebuild();
        }
    }

    fn rebuild(&self) {
        let all: Vec<Arc<dyn Tool>> =
            self.by_server.lock().unwrap_or_else(PoisonError::into_inner).values().flatten().cloned().collect();
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(ToolSet::new(all));
    }
}

impl ToolSource for McpServers {
    fn current(&self) -> Arc<ToolSet> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Starts every server of `config` as the daemon would, waits until each has listed its tools
/// or failed (at most `startup_timeout_secs` and a second), stops them again, and returns
/// each one's status (`switchboard mcp list`, `doctor`).
pub async fn probe(config: &McpConfig) -> Vec<(String, ServerStatus)> {
    let servers = McpServers::new(config);
    let stop = CancellationToken::new();
    let supervisors = servers.start(&stop);
    let deadline = Instant::now() + servers.startup_timeout + Duration::from_secs(1);
    while Instant::now() < deadline && servers.statuses().iter().any(|(_, status)| *status == ServerStatus::Starting) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let statuses = servers.statuses();
    stop.cancel();
    for supervisor in supervisors {
        // Ends with the cancel; the servers' process groups are killed as their sessions drop.
        if let Err(err) = supervisor.await {
            tracing::warn!(%err, "an MCP supervisor ended abnormally");
        }
    }
    statuses
}

/// The pause after the `failures`-th failure in a row: 1 s, 2 s, 4 s … up to a minute.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(6)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests;
