//! `mcp_tool_search` and `mcp_call`: how a run reaches MCP tools when there are too many to
//! send every schema on every model call (`[mcp] inline_max`). The search names the tools
//! that fit a task with their schemas; the call runs one by name. A run may reach only the
//! tools its filter lets it call (see [`ToolFilter::allows_via_call`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::McpServers;
use crate::tools::{TaskQuery, Tool, ToolContext, ToolError, ToolFilter, ToolSource, required_str};
use crate::workspace::bm25::Index;

pub const MCP_TOOL_SEARCH: &str = "mcp_tool_search";
pub const MCP_CALL: &str = "mcp_call";

/// The search's arguments: at most 15 hits, 5 unless asked.
const QUERY: TaskQuery = TaskQuery { max: 15, default: 5 };

pub struct McpToolSearch {
    servers: Arc<McpServers>,
}

impl McpToolSearch {
    pub fn new(servers: Arc<McpServers>) -> Self {
        Self { servers }
    }
}

#[async_trait]
impl Tool for McpToolSearch {
    fn name(&self) -> &str {
        MCP_TOOL_SEARCH
    }

    fn description(&self) -> &str {
        "Finds tools of the connected MCP servers that fit a task described in a few words, with \
         the arguments each takes; run one with mcp_call."
    }

    fn parameters(&self) -> Value {
        QUERY.schema()
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let (query, limit) = QUERY.read(&arguments)?;
        let set = self.servers.current();
        let specs: Vec<_> = set.specs().filter(|spec| ctx.tools.allows_via_call(&spec.name)).collect();
        let index = Index::new(specs.iter().map(|spec| vec![(spec.name.as_str(), 3), (spec.description.as_str(), 1)]));
        let mut hits: Vec<(usize, f64)> =
            index.scores(query).into_iter().enumerate().filter(|(_, score)| *score > 0.0).collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1));
        if hits.is_empty() {
            return Ok(format!("No MCP tool matches `{query}` ({} available).", specs.len()));
        }
        let found: Vec<String> = hits
            .into_iter()
            .take(limit)
            .map(|(at, _)| {
                let spec = &specs[at];
                format!("- {}: {}\n  arguments: {}", spec.name, spec.description, spec.parameters)
            })
            .collect();
        Ok(format!("Run one with mcp_call (tool, arguments):\n{}", found.join("\n")))
    }
}

pub struct McpCall {
    servers: Arc<McpServers>,
}

impl McpCall {
    pub fn new(servers: Arc<McpServers>) -> Self {
        Self { servers }
    }
}

#[async_trait]
impl Tool for McpCall {
    fn name(&self) -> &str {
        MCP_CALL
    }

    fn description(&self) -> &str {
        "Runs an MCP tool that mcp_tool_search found, by its full name (server__tool)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "tool": {"type": "string", "description": "The full name, e.g. files__read_text_file"},
                "arguments": {"type": "object", "description": "As the tool's schema says"}
            },
            "required": ["tool"]
        })
    }

    fn timeout(&self) -> Option<Duration> {
        self.servers.longest_call_timeout()
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let name = required_str(&arguments, "tool")?;
        if !ctx.tools.allows_via_call(name) {
            return Err(ToolError::NotAllowed(name.to_owned()));
        }
        let tool = self.servers.current().get(name).cloned().ok_or_else(|| {
            ToolError::InvalidArguments(format!(
                "no MCP tool `{name}` is available now; find one with {MCP_TOOL_SEARCH}"
            ))
        })?;
        let inner = arguments.get("arguments").cloned().unwrap_or(Value::Null);
        // The inner tool must not reach mcp_call again through its context.
        let ctx = ToolContext { tools: ToolFilter::Only(Default::default()), ..ctx.clone() };
        tool.execute(inner, &ctx).await
    }
}
