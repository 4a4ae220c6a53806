//! Connecting to one MCP server: a child process over stdio, or a streamable-HTTP endpoint.
//! The protocol is the SDK's (`rmcp`); this only builds the transport.

use std::process::Stdio;

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::McpError;
use crate::config::McpServerConfig;

/// A connected server: the SDK's client session.
pub(super) type Running = RunningService<RoleClient, ()>;

/// Variables a stdio server inherits from the daemon; everything else it gets from its `env`.
/// (API keys and tokens in the daemon's environment are not its business.)
const INHERITED: [&str; 10] = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ"];

/// Starts and initialises the server `name`.
pub(super) async fn connect(name: &str, config: &McpServerConfig) -> Result<Running, McpError> {
    if config.command.trim().is_empty() { http(config).await } else { stdio(name, config).await }
}

async fn stdio(name: &str, config: &McpServerConfig) -> Result<Running, McpError> {
    let mut command = tokio::process::Command::new(&config.command);
    command.args(&config.args).env_clear();
    for key in INHERITED {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    for (key, value) in &config.env {
        command.env(key, value.expose());
    }
    if !config.cwd.as_os_str().is_empty() {
        command.current_dir(&config.cwd);
    }
    // SAFETY: prctl(2) with integer arguments only, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            // A daemon killed outright (SIGKILL, OOM) cannot kill its servers: the kernel does.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Its own process group, killed as a whole: `npx` starts the real server as its child.
    let mut wrapped = CommandWrap::from(command);
    wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let (transport, stderr) = TokioChildProcess::builder(wrapped)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| McpError::Spawn { command: config.command.clone(), source })?;
    if let Some(stderr) = stderr {
        tokio::spawn(forward_stderr(name.to_owned(), stderr));
    }
    ().serve(transport).await.map_err(|err| McpError::Initialize(err.to_string()))
}

/// The server's stderr, line by line, in the daemon's log.
async fn forward_stderr(name: String, stderr: tokio::process::ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(mcp = %name, "{line}");
    }
}

async fn http(config: &McpServerConfig) -> Result<Running, McpError> {
    let mut headers = HeaderMap::new();
    for (key, value) in &config.headers {
        let name = HeaderName::from_bytes(key.as_bytes()).map_err(|_| McpError::Header(key.clone()))?;
        let mut value = HeaderValue::from_str(value.expose()).map_err(|_| McpError::Header(key.clone()))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .map_err(|err| McpError::Initialize(format!("cannot build the HTTP client: {err}")))?;
    let transport = StreamableHttpClientTransport::with_client(
        client,
        StreamableHttpClientTransportConfig::with_uri(config.url.as_str()),
    );
    ().serve(transport).await.map_err(|err| McpError::Initialize(err.to_string()))
}
