//! Tools the agent can call: the [`Tool`] trait, the [`ToolRegistry`] that runs them (with a
//! timeout, one retry of transient failures and a cap on result size), and the built-ins.

mod current_time;
pub mod exec;
pub mod fs;
pub mod memory;
mod message;
pub mod skills;
mod truncate;
pub mod untrusted;
pub mod web;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use thiserror::Error;

pub use current_time::CurrentTime;
pub use message::MessageTool;
pub use truncate::truncate_middle;

use switchboard_channels::contract::{InboundKind, InboundMessage, Origin};

use crate::config::{ConfigError, ToolsConfig};
use crate::provider::{ToolCall, ToolSpec};
use crate::tokens;
use crate::workspace::memory::{MemoryScope, Reach};

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

/// What a tool knows about the run that calls it.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    pub session_key: String,
    pub channel: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub run_id: String,
    /// The platform id of the person whose message started the run.
    pub sender_id: String,
    pub sender_name: String,
    /// The agent's workspace directory; file tools and `exec` work inside it.
    pub workspace: PathBuf,
    /// The name of the agent running the turn.
    pub agent: String,
    /// Whether the run's chat is a group (several people read the replies).
    pub is_group: bool,
    /// What started the run when switchboard did (a cron job, a heartbeat, a sub-agent's
    /// result); `None` for a person's message.
    pub origin: Option<Origin>,
    /// The tools this run may use; work the run starts (a sub-agent) gets no more than these.
    pub tools: ToolFilter,
    /// The person this run acts for (`telegram:42`): the sender, or for a system message the
    /// person whose job made it; `None` = the owner. Jobs and sub-agents started by the run
    /// act for the same person.
    pub on_behalf_of: Option<String>,
    /// Whose memory the run uses, decided by the worker from the chat: the file tools refuse
    /// other scopes' memory files. The default, [`MemoryScope::None`], refuses them all.
    pub memory: MemoryScope,
    /// How far the file tools reach within the scope.
    pub memory_reach: Reach,
}

impl ToolContext {
    /// The context of a run of the agent `agent` (working in `workspace`) answering `msg` in
    /// `session_key`, with the memory of `memory`.
    pub fn for_message(
        agent: &str,
        workspace: &Path,
        session_key: &str,
        msg: &InboundMessage,
        run_id: &str,
        memory: MemoryScope,
    ) -> Self {
        Self {
            session_key: session_key.to_owned(),
            channel: msg.channel.clone(),
            chat_id: msg.chat_id.clone(),
            thread_id: msg.thread_id.clone(),
            run_id: run_id.to_owned(),
            sender_id: msg.sender.id.clone(),
            sender_name: msg.sender.name.clone(),
            workspace: workspace.to_owned(),
            agent: agent.to_owned(),
            is_group: msg.is_group,
            origin: (msg.kind == InboundKind::System).then(|| msg.origin.clone().unwrap_or_default()),
            tools: ToolFilter::All,
            on_behalf_of: acting_for(msg),
            memory,
            memory_reach: Reach::Workspace,
        }
    }
}

/// Whom a run of `msg` acts for: its sender, or the person named by a system message.
fn acting_for(msg: &InboundMessage) -> Option<String> {
    match msg.kind {
        InboundKind::User => Some(crate::config::Identity::new(&msg.channel, &msg.sender.id).to_string()),
        InboundKind::System => msg.on_behalf_of().map(str::to_owned),
    }
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

impl ToolFilter {
    pub fn allows(&self, name: &str) -> bool {
        match self {
            ToolFilter::All => true,
            ToolFilter::Only(names) => names.contains(name),
        }
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

/// The tools one agent may use.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Registered>,
    limits: ToolLimits,
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
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.described().0
    }

    fn raw_tokens(&self) -> u64 {
        self.described().1
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
        Self { tools: BTreeMap::new(), limits }
    }

    /// A registry with only the tools that need no set-up (`current_time`).
    pub fn with_builtins(limits: ToolLimits) -> Self {
        let mut registry = Self::new(limits);
        registry.register(Arc::new(CurrentTime));
        registry
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_owned(), Registered { tool, spec: OnceLock::new() });
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Keeps only the tools named in `allowed` (an agent's allowlist): a tool not kept is
    /// never offered, and a call to it is refused like a call to an unknown tool.
    pub fn retain(&mut self, allowed: &[String]) {
        self.tools.retain(|name, _| allowed.iter().any(|a| a == name));
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The tools the filter allows, as the model sees them, in name order (stable, so
    /// prompts cache well). Shared, not copied: a schema is built once per process.
    pub fn specs(&self, filter: &ToolFilter) -> Vec<Arc<ToolSpec>> {
        self.offered(filter).map(|registered| registered.spec().clone()).collect()
    }

    /// The heuristic token count of the schemas the filter allows.
    pub fn raw_tokens(&self, filter: &ToolFilter) -> u64 {
        self.offered(filter).map(Registered::raw_tokens).sum()
    }

    /// The tools the filter allows with each one's heuristic token count, in name order.
    pub fn raw_tokens_each(&self, filter: &ToolFilter) -> Vec<(String, u64)> {
        self.offered(filter).map(|registered| (registered.tool.name().to_owned(), registered.raw_tokens())).collect()
    }

    fn offered<'a>(&'a self, filter: &'a ToolFilter) -> impl Iterator<Item = &'a Registered> + 'a {
        self.tools.values().filter(|registered| filter.allows(registered.tool.name()))
    }

    /// Runs one call. Failures become an error result for the model, never a failed run.
    pub async fn call(&self, call: &ToolCall, ctx: &ToolContext, filter: &ToolFilter) -> ToolOutput {
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
        let tool = &self.tools.get(&call.name).ok_or_else(|| ToolError::Unknown(call.name.clone()))?.tool;
        // The model is only offered allowed tools, but it can name any: check again here.
        if !filter.allows(&call.name) {
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

/// Adds the tools that act on this machine, as enabled in `[tools]`: the file tools
/// (`read_file`, `write_file`, `edit_file`, `list_dir`) and `exec`.
pub fn register_local_tools(registry: &mut ToolRegistry, config: &ToolsConfig) -> Result<(), ConfigError> {
    if config.fs.enabled {
        let settings = fs::FsSettings::from(&config.fs);
        // What a file says is data, whoever wrote it (a web page saved there, a user's upload).
        let read = Arc::new(fs::ReadFile::new(settings));
        registry.register(Arc::new(untrusted::Untrusted::new(read, untrusted::file)));
        registry.register(Arc::new(fs::WriteFile::new(settings)));
        registry.register(Arc::new(fs::EditFile::new(settings)));
        registry.register(Arc::new(fs::ListDir::new(settings)));
    }
    if config.exec.enabled {
        // Config validation already rejects bad patterns with their origin; this is the backstop.
        let exec = exec::Exec::new(&config.exec).map_err(|error| ConfigError::Invalid {
            key: "tools.exec.deny_patterns".into(),
            origin: crate::config::Origin::Default,
            reason: error.to_string(),
        })?;
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
