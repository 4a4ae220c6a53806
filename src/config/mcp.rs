//! `[mcp]`: MCP tool servers whose tools the agents offer (see docs/mcp.md).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Secret;
use super::identity::Level;

/// Every MCP server, and how their tools are offered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpConfig {
    /// Servers by name; their tools are offered as `<name>__<tool>`.
    pub servers: BTreeMap<String, McpServerConfig>,
    /// Up to this many MCP tools a sender may use are offered to the model one by one; with
    /// more, `mcp_tool_search` finds them and `mcp_call` calls them.
    pub inline_max: usize,
    /// Seconds a server has to start and list its tools before the attempt counts as failed.
    pub startup_timeout_secs: u64,
    /// Seconds between pings of a running server; one that does not answer within
    /// `startup_timeout_secs` is restarted. 0 = no pings.
    pub ping_secs: u64,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self { servers: BTreeMap::new(), inline_max: 30, startup_timeout_secs: 30, ping_secs: 60 }
    }
}

/// One `[mcp.servers.<name>]`: a child process speaking MCP over stdio (`command`) or a
/// streamable-HTTP endpoint (`url`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpServerConfig {
    pub enabled: bool,
    /// The program to start, found on `PATH` when it has no `/`.
    pub command: String,
    pub args: Vec<String>,
    /// Variables set for the child, beside the few it inherits (`PATH`, `HOME`, `LANG`, …):
    /// the daemon's own environment, API keys included, is not passed on.
    pub env: BTreeMap<String, Secret>,
    /// The child's working directory; empty = the daemon's.
    pub cwd: PathBuf,
    /// The endpoint of a streamable-HTTP server, e.g. `http://127.0.0.1:3001/mcp`.
    pub url: String,
    /// Headers sent with every request to `url` (`Authorization = "Bearer …"`).
    pub headers: BTreeMap<String, Secret>,
    /// The lowest level offered this server's tools; `[permissions.tools]` can set one tool's.
    pub level: Level,
    /// Seconds one tool call may take; 0 = `[tools]`' default.
    pub timeout_secs: u64,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            command: String::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: PathBuf::new(),
            url: String::new(),
            headers: BTreeMap::new(),
            level: Level::Owner,
            timeout_secs: 0,
        }
    }
}

/// The separator between a server's name and its tool's in the names the model sees.
pub const MCP_SEPARATOR: &str = "__";

/// The first problem of `[mcp]`, with its key.
pub(super) fn problem(mcp: &McpConfig) -> Option<(String, String)> {
    for (name, server) in &mcp.servers {
        let key = |field: &str| format!("mcp.servers.{name}{field}");
        let good_name = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !name.contains(MCP_SEPARATOR);
        if !good_name {
            let reason = "a server's name is letters, digits, - and single _ (its tools are named <server>__<tool>)";
            return Some((key(""), reason.into()));
        }
        match (server.command.trim().is_empty(), server.url.trim().is_empty()) {
            (true, true) => return Some((key(""), "needs `command` (stdio) or `url` (streamable HTTP)".into())),
            (false, false) => return Some((key(""), "has both `command` and `url`; give one".into())),
            (true, false) if !(server.url.starts_with("http://") || server.url.starts_with("https://")) => {
                return Some((key(".url"), "must be an http:// or https:// URL".into()));
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &str, server: McpServerConfig) -> McpConfig {
        McpConfig { servers: [(name.to_owned(), server)].into(), ..McpConfig::default() }
    }

    #[test]
    fn a_server_needs_one_way_to_reach_it_and_a_name_that_splits_cleanly() {
        let stdio = McpServerConfig { command: "npx".into(), ..McpServerConfig::default() };
        assert_eq!(problem(&with("files", stdio.clone())), None);
        let both = McpServerConfig { url: "http://x/mcp".into(), ..stdio.clone() };
        assert_eq!(problem(&with("files", both)).unwrap().1, "has both `command` and `url`; give one");
        let neither = McpServerConfig::default();
        assert_eq!(problem(&with("files", neither)).unwrap().0, "mcp.servers.files");
        let ftp = McpServerConfig { url: "ftp://x".into(), ..McpServerConfig::default() };
        assert_eq!(problem(&with("files", ftp)).unwrap().0, "mcp.servers.files.url");
        assert!(problem(&with("my__files", stdio.clone())).is_some(), "the separator in a name");
        assert!(problem(&with("my files", stdio)).is_some());
    }
}
