//! Tools the agent can call: the [`Tool`] trait, the [`ToolRegistry`] that runs them (with a
//! timeout, one retry of transient failures and a cap on result size), and the built-ins.

pub mod approval;
mod context;
mod current_time;
pub mod exec;
pub mod fs;
pub mod mcp;
pub mod memory;
pub mod message;
pub mod run_clock;
pub mod skills;
mod truncate;
pub mod untrusted;
pub mod web;

pub use context::{PersonaAccess, ToolContext};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use thiserror::Error;

pub use current_time::CurrentTime;
pub use message::MessageTool;
pub use truncate::truncate_middle;

use crate::config::{ConfigError, ToolsConfig};
use crate::provider::{ToolCall, ToolSpec};
use crate::tokens;

/// Why a tool call did not produce a result. The message goes back to the model as the
/// tool's result, so it should say what to do differently.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ToolError {
    #[error("unknown tool `{0}`")]
    Unknown(String),
    #[error("tool `{0}` is not available to this user")]
    NotAllowed(String),
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// Refused for safety (a path outside the workspace, a denied command, a private address…).
    #[error("refused: {0}")]
    Refused(String),
    #[error("the tool did not finish within {0:?}")]
    Timeout(Duration),
    /// Failed for a reason that may pass (network hiccup, 5xx): the registry retries once.
    #[error("{0} (temporary failure)")]
    Transient(String),
    #[error("{0}")]
    Failed(String),
}

/// Something the agent can do.
#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    /// This tool's own time limit, when it differs from the registry's default (for example
    /// `exec`, which enforces its own timeout and needs a little more here to report it).
    fn timeout(&self) -> Option<Duration> {
        None
    }
    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError>;
}

/// Which tools a run may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ToolFilter {
    #[default]
    All,
    Only(BTreeSet<String>),
}

/// How a filter marks a tool the run may call only through `mcp_call` (with many MCP tools,
/// they are not offered one by one): `via mcp_call:<name>`. No tool has such a name.
const VIA_CALL: &str = "via mcp_call:";

impl ToolFilter {
    pub fn allows(&self, name: &str) -> bool {
        match self {
            ToolFilter::All => true,
            ToolFilter::Only(names) => names.contains(name),
        }
    }

    /// Whether the run may call `name` through `mcp_call`: offered itself, or marked so.
    pub fn allows_via_call(&self, name: &str) -> bool {
        match self {
            ToolFilter::All => true,
            ToolFilter::Only(names) => names.contains(name) || names.contains(&format!("{VIA_CALL}{name}")),
        }
    }

    /// The entry that lets a run call `name` through `mcp_call` only.
    pub fn via_call_entry(name: &str) -> String {
        format!("{VIA_CALL}{name}")
    }

    /// The filter's marks of tools callable through `mcp_call` only.
    pub fn via_call_entries(&self) -> impl Iterator<Item = &String> {
        let names = match self {
            ToolFilter::All => None,
            ToolFilter::Only(names) => Some(names),
        };
        names.into_iter().flatten().filter(|name| name.starts_with(VIA_CALL))
    }
}

/// How the registry runs tools.
#[derive(Debug, Clone)]
pub struct ToolLimits {
    /// Default time limit of one call.
    pub timeout: Duration,
    /// Results longer than this many characters are cut in the middle (head and tail kept).
    pub max_result_chars: usize,
    /// Wait before the one retry of a transient failure.
    pub retry_delay: Duration,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self { timeout: Duration::from_secs(60), max_result_chars: 16_000, retry_delay: Duration::from_millis(500) }
    }
}

/// The tools one agent may use: its own, and those of the sources whose tools come and go
/// (MCP servers).
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Registered>,
    limits: ToolLimits,
    sources: Vec<Arc<dyn ToolSource>>,
    /// The agent's allow-list (`[agents.<name>] tools`), kept for the sources' tools; a name
    /// ending in `*` allows every tool it starts.
    allowed: Option<Vec<String>>,
    /// `[approvals]`: calls that wait for an approver first.
    approvals: Option<Arc<approval::ApprovalGate>>,
}

/// Tools that come and go while the daemon runs, such as an MCP server's once it is up.
pub trait ToolSource: Send + Sync {
    /// The tools available now.
    fn current(&self) -> Arc<ToolSet>;
}

/// A set of tools whose specs are built once, as for the registry's own.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: BTreeMap<String, Registered>,
}

impl ToolSet {
    pub fn new(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        let tools = tools.into_iter().map(|tool| (tool.name().to_owned(), Registered::new(tool))).collect();
        Self { tools }
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name).map(|registered| &registered.tool)
    }

    /// The tools as the model sees them, in name order.
    pub fn specs(&self) -> impl Iterator<Item = &Arc<ToolSpec>> {
        self.tools.values().map(Registered::spec)
    }
}

/// A tool with what the model sees of it, built once: a tool builds its schema anew on each
/// `parameters()` call, and every turn needs the schemas and their size several times. Built
/// by the first turn rather than at start-up, which would bring every tool's schema code into
/// memory in a daemon that may idle for hours.
#[derive(Clone)]
struct Registered {
    tool: Arc<dyn Tool>,
    /// The spec and its heuristic token count ([`tokens::raw_tools`]).
    spec: OnceLock<(Arc<ToolSpec>, u64)>,
}

impl Registered {
    fn new(tool: Arc<dyn Tool>) -> Self {
        Self { tool, spec: OnceLock::new() }
    }

    fn spec(&self) -> &Arc<ToolSpec> {
        &self.described().0
    }

    fn described(&self) -> &(Arc<ToolSpec>, u64) {
        self.spec.get_or_init(|| {
            let tool = &self.tool;
            let spec = ToolSpec {
                name: tool.name().to_owned(),
                description: tool.description().to_owned(),
                parameters: tool.parameters(),
            };
            let raw_tokens = tokens::raw_tools(std::slice::from_ref(&spec));
            (Arc::new(spec), raw_tokens)
        })
    }
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry").field("tools", &self.tools.keys()).field("limits", &self.limits).finish()
    }
}

/// The outcome of one tool call, in the form the model gets it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolRegistry {
    pub fn new(limits: ToolLimits) -> Self {
        Self { limits, ..Self::default() }
    }

    /// A registry with only the tools that need no set-up (`current_time`).
    pub fn with_builtins(limits: ToolLimits) -> Self {
        let mut registry = Self::new(limits);
        registry.register(Arc::new(CurrentTime));
        registry
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_owned(), Registered::new(tool));
    }

    /// Adds tools that come and go (see [`ToolSource`]).
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.sources.iter().all(|source| source.current().is_empty())
    }

    /// Keeps only the tools named in `allowed` (an agent's allowlist): a tool not kept is
    /// never offered, and a call to it is refused like a call to an unknown tool. A name
    /// ending in `*` keeps every tool it starts (`files__*`).
    pub fn retain(&mut self, allowed: &[String]) {
        self.tools.retain(|name, _| allows(allowed, name));
        self.allowed = Some(allowed.to_vec());
    }

    /// The names of the tools now, the sources' included, in name order.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tools.keys().cloned().collect();
        for set in self.current_sets() {
            names.extend(set.tools.keys().filter(|name| self.source_allows(name)).cloned());
        }
        names.sort();
        names
    }

    /// The tools the filter allows, as the model sees them, in name order (stable, so
    /// prompts cache well). Shared, not copied: a schema is built once per process.
    pub fn specs(&self, filter: &ToolFilter) -> Vec<Arc<ToolSpec>> {
        self.offered(filter).into_iter().map(|(spec, _)| spec).collect()
    }

    /// The heuristic token count of the schemas the filter allows.
    pub fn raw_tokens(&self, filter: &ToolFilter) -> u64 {
        self.offered(filter).iter().map(|(_, tokens)| tokens).sum()
    }

    /// The tools the filter allows with each one's heuristic token count, in name order.
    pub fn raw_tokens_each(&self, filter: &ToolFilter) -> Vec<(String, u64)> {
        self.offered(filter).into_iter().map(|(spec, tokens)| (spec.name.clone(), tokens)).collect()
    }

    /// The specs and token counts of the tools the filter allows, the sources' included, in
    /// name order. Read from the registered tools themselves (not copies), so each is built
    /// once, by the first turn that offers it.
    fn offered(&self, filter: &ToolFilter) -> Vec<(Arc<ToolSpec>, u64)> {
        let described = |registered: &Registered| {
            let (spec, tokens) = registered.described();
            (Arc::clone(spec), *tokens)
        };
        let mut offered: Vec<(Arc<ToolSpec>, u64)> =
            self.tools.values().filter(|registered| filter.allows(registered.tool.name())).map(described).collect();
        if self.sources.is_empty() {
            return offered;
        }
        for set in self.current_sets() {
            let theirs = set.tools.iter().filter(|(name, _)| filter.allows(name) && self.source_allows(name));
            offered.extend(theirs.map(|(_, registered)| described(registered)));
        }
        offered.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        offered
    }

    fn current_sets(&self) -> Vec<Arc<ToolSet>> {
        self.sources.iter().map(|source| source.current()).collect()
    }

    fn source_allows(&self, name: &str) -> bool {
        self.allowed.as_deref().is_none_or(|allowed| allows(allowed, name))
    }

    /// The tool called `name`, its own or a source's.
    fn find(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(registered) = self.tools.get(name) {
            return Some(Arc::clone(&registered.tool));
        }
        if !self.source_allows(name) {
            return None;
        }
        self.current_sets().iter().find_map(|set| set.get(name).cloned())
    }

    /// Runs one call. Failures become an error result for the model, never a failed run.
    /// Makes calls of `[approvals] tools` wait for an approver.
    pub fn set_approvals(&mut self, gate: Arc<approval::ApprovalGate>) {
        self.approvals = Some(gate);
    }

    pub async fn call(&self, call: &ToolCall, ctx: &ToolContext, filter: &ToolFilter) -> ToolOutput {
        if let Some(gate) = self.approvals.as_ref().filter(|_| filter.allows(&call.name))
            && let Ok(arguments) = parse_arguments(&call.arguments)
            && let approval::Gate::Declined(why) = gate.check(&call.name, &arguments, ctx).await
        {
            tracing::info!(tool = %call.name, "a tool call was not approved");
            return ToolOutput { content: format!("error: {}", ToolError::Refused(why)), is_error: true };
        }
        let started = Instant::now();
        let mut result = self.try_call(call, ctx, filter).await;
        if let Err(ToolError::Transient(reason)) = &result {
            tracing::info!(tool = %call.name, %reason, "retrying a tool after a temporary failure");
            tokio::time::sleep(self.limits.retry_delay).await;
            result = self.try_call(call, ctx, filter).await;
        }
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match result {
            Ok(content) => {
                tracing::debug!(tool = %call.name, elapsed_ms, "tool finished");
                ToolOutput { content: truncate_middle(&content, self.limits.max_result_chars), is_error: false }
            }
            Err(err) => {
                tracing::info!(tool = %call.name, elapsed_ms, error = %err, "tool failed");
                ToolOutput { content: format!("error: {err}"), is_error: true }
            }
        }
    }

    async fn try_call(&self, call: &ToolCall, ctx: &ToolContext, filter: &ToolFilter) -> Result<String, ToolError> {
        let tool = self.find(&call.name).ok_or_else(|| ToolError::Unknown(call.name.clone()))?;
        // The model is only offered allowed tools, but it can name any: check again here, and
        // against what the run's context allows (a run may offer more than it may call).
        if !filter.allows(&call.name) || !ctx.tools.allows(&call.name) {
            return Err(ToolError::NotAllowed(call.name.clone()));
        }
        let arguments = parse_arguments(&call.arguments)?;
        let limit = tool.timeout().unwrap_or(self.limits.timeout);
        match tokio::time::timeout(limit, tool.execute(arguments, ctx)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::Timeout(limit)),
        }
    }
}

/// Whether an allow-list names `name`, or a prefix of it ending in `*`.
fn allows(allowed: &[String], name: &str) -> bool {
    allowed.iter().any(|entry| match entry.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => entry == name,
    })
}

/// Adds the tools that act on this machine, as enabled in `[tools]`: the file tools
/// (`read_file`, `write_file`, `edit_file`, `list_dir`) and `exec`.
/// `exec` runs in the sandbox `[tools.exec] sandbox` asks for, hiding `data_dir` from commands.
pub fn register_local_tools(
    registry: &mut ToolRegistry,
    config: &ToolsConfig,
    data_dir: &Path,
) -> Result<(), ConfigError> {
    if config.fs.enabled {
        let settings = fs::FsSettings::from(&config.fs);
        // What a file says is data, whoever wrote it (a web page saved there, a user's upload).
        let read = Arc::new(fs::ReadFile::new(settings));
        registry.register(Arc::new(untrusted::Untrusted::new(read, untrusted::file)));
        registry.register(Arc::new(fs::WriteFile::new(settings)));
        registry.register(Arc::new(fs::EditFile::new(settings)));
        registry.register(Arc::new(fs::DeleteFile::new(settings)));
        registry.register(Arc::new(fs::ListDir::new(settings)));
    }
    if config.exec.enabled {
        // Config validation already rejects bad patterns with their origin; this is the backstop.
        let invalid = |key: &str, reason: String| ConfigError::Invalid {
            key: key.into(),
            origin: crate::config::Origin::Default,
            reason,
        };
        let exec =
            exec::Exec::new(&config.exec).map_err(|error| invalid("tools.exec.deny_patterns", error.to_string()))?;
        let sandbox = exec::Sandbox::from_config(&config.exec, data_dir)
            .map_err(|error| invalid("tools.exec.sandbox", error.to_string()))?;
        let exec = exec.with_sandbox(sandbox);
        // Command output carries what commands read (files, `curl`): data too.
        registry.register(Arc::new(untrusted::Untrusted::new(Arc::new(exec), untrusted::command_output)));
    }
    Ok(())
}

/// Models sometimes send arguments as a JSON string holding the object, or nothing at all.
fn parse_arguments(arguments: &Value) -> Result<Value, ToolError> {
    match arguments {
        Value::String(text) => serde_json::from_str(text)
            .map_err(|err| ToolError::InvalidArguments(format!("arguments are not a JSON object: {err}"))),
        Value::Null => Ok(Value::Object(Default::default())),
        other => Ok(other.clone()),
    }
}

/// A search for a task described in words: the arguments `skill_search` and `mcp_tool_search`
/// take (`query`, and `limit` of at most `max` hits, `default` when not given).
pub struct TaskQuery {
    pub max: usize,
    pub default: usize,
}

impl TaskQuery {
    pub fn schema(&self) -> Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "The task, in a few words"},
                "limit": {"type": "integer", "minimum": 1, "maximum": self.max, "description": format!("Default {}", self.default)}
            },
            "required": ["query"]
        })
    }

    /// The query and how many hits to return.
    pub fn read<'a>(&self, arguments: &'a Value) -> Result<(&'a str, usize), ToolError> {
        let query = required_str(arguments, "query")?;
        Ok((query, optional_count(arguments, "limit", self.max)?.unwrap_or(self.default)))
    }
}

/// Reads a required string argument.
pub fn required_str<'a>(arguments: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::InvalidArguments(format!("`{key}` (a string) is required")))
}

/// An optional integer argument of at least 1; `None` when absent or null.
pub fn optional_positive(arguments: &Value, key: &str) -> Result<Option<u64>, ToolError> {
    match arguments.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => Err(ToolError::InvalidArguments(format!("`{key}` must be an integer of at least 1"))),
        },
    }
}

/// [`optional_positive`] as a count, at most `cap` (counts past `usize` are past any cap).
pub fn optional_count(arguments: &Value, key: &str, cap: usize) -> Result<Option<usize>, ToolError> {
    Ok(optional_positive(arguments, key)?.map(|n| usize::try_from(n).unwrap_or(usize::MAX).min(cap)))
}

#[cfg(test)]
mod tests;
