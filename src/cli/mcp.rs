//! `switchboard mcp list`: starts each configured MCP server as the daemon would, waits for
//! it to list its tools (or fail), and prints what the agents would be offered.

use clap::Subcommand;
use std::io::Write;

use super::CliError;
use crate::config::{Config, McpServerConfig};
use crate::tools::mcp::ServerStatus;

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start each server, list its tools as the agents see them, and stop it again; exits 1
    /// when an enabled server does not start
    List,
}

pub(super) async fn run(config: &Config, command: McpCommand) -> Result<(), CliError> {
    match command {
        McpCommand::List => list(config).await,
    }
}

async fn list(config: &Config) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    if config.mcp.servers.is_empty() {
        writeln!(out, "no MCP servers configured ([mcp.servers.<name>] in the config; see docs/mcp.md)")?;
        return Ok(());
    }
    let statuses = crate::tools::mcp::probe(&config.mcp).await;
    let mut down = 0;
    for (name, status) in &statuses {
        let Some(server) = config.mcp.servers.get(name) else { continue };
        writeln!(out, "{name}: {}", describe(server))?;
        match status {
            ServerStatus::Ready { tools } => {
                writeln!(out, "  ready, {} tools for level {} and above:", tools.len(), server.level)?;
                for tool in tools {
                    writeln!(out, "    {tool}")?;
                }
            }
            ServerStatus::Down { error, .. } => {
                down += 1;
                writeln!(out, "  DOWN: {error}")?;
            }
            ServerStatus::Starting => {
                down += 1;
                writeln!(out, "  DOWN: still starting after {} s", config.mcp.startup_timeout_secs)?;
            }
            ServerStatus::Disabled => writeln!(out, "  disabled")?,
        }
    }
    match down {
        0 => Ok(()),
        down => Err(CliError::Invalid(format!("{down} MCP server(s) did not start"))),
    }
}

/// How the server is reached, without its secrets (`env` and `headers` values).
fn describe(server: &McpServerConfig) -> String {
    if server.command.trim().is_empty() {
        return format!("streamable HTTP {}", server.url);
    }
    let mut line = format!("stdio `{}", server.command);
    for arg in &server.args {
        line.push(' ');
        line.push_str(arg);
    }
    line.push('`');
    line
}
