//! Tools the agent can call: the [`Tool`] trait, the [`ToolRegistry`] that runs them with a
//! timeout, and the built-in tools.

mod current_time;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use thiserror::Error;

pub use current_time::CurrentTime;

use crate::provider::{ToolCall, ToolSpec};

/// Why a tool call did not produce a result. The message goes back to the model as the
/// tool's result, so it should say what to do differently.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ToolError {
    #[error("unknown tool `{0}`")]
    Unknown(String),
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("the tool did not finish within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Failed(String),
}

/// What a tool knows about the run that calls it.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    pub session_key: String,
    pub channel: String,
    pub chat_id: String,
    pub run_id: String,
}

/// Something the agent can do.
#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError>;
}

/// The tools one agent may use, each run with a timeout.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    timeout: Duration,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry").field("tools", &self.tools.keys()).field("timeout", &self.timeout).finish()
    }
}

/// The outcome of one tool call, in the form the model gets it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolRegistry {
    pub fn new(timeout: Duration) -> Self {
        Self { tools: BTreeMap::new(), timeout }
    }

    /// The registry with every built-in tool.
    pub fn with_builtins(timeout: Duration) -> Self {
        let mut registry = Self::new(timeout);
        registry.register(Arc::new(CurrentTime));
        registry
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_owned(), tool);
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tools as the model sees them, in name order (stable, so prompts cache well).
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .values()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters(),
            })
            .collect()
    }

    /// Runs one call. Failures become an error result for the model, never a failed run.
    pub async fn call(&self, call: &ToolCall, ctx: &ToolContext) -> ToolOutput {
        match self.try_call(call, ctx).await {
            Ok(content) => ToolOutput { content, is_error: false },
            Err(err) => ToolOutput { content: format!("error: {err}"), is_error: true },
        }
    }

    async fn try_call(&self, call: &ToolCall, ctx: &ToolContext) -> Result<String, ToolError> {
        let tool = self.tools.get(&call.name).ok_or_else(|| ToolError::Unknown(call.name.clone()))?;
        // Models sometimes send arguments as a JSON string holding the object.
        let arguments = match &call.arguments {
            Value::String(text) => serde_json::from_str(text)
                .map_err(|err| ToolError::InvalidArguments(format!("arguments are not a JSON object: {err}")))?,
            Value::Null => Value::Object(Default::default()),
            other => other.clone(),
        };
        match tokio::time::timeout(self.timeout, tool.execute(arguments, ctx)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::Timeout(self.timeout)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Sleepy;

    #[async_trait]
    impl Tool for Sleepy {
        fn name(&self) -> &str {
            "sleepy"
        }
        fn description(&self) -> &str {
            "sleeps"
        }
        fn parameters(&self) -> Value {
            json!({"type": "object"})
        }
        async fn execute(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok("woke".into())
        }
    }

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall { id: "c1".into(), name: name.into(), arguments }
    }

    #[tokio::test]
    async fn unknown_tool_is_an_error_result() {
        let registry = ToolRegistry::with_builtins(Duration::from_secs(1));
        let out = registry.call(&call("rm_rf", json!({})), &ToolContext::default()).await;
        assert!(out.is_error);
        assert!(out.content.contains("unknown tool `rm_rf`"));
    }

    #[tokio::test(start_paused = true)]
    async fn slow_tool_times_out() {
        let mut registry = ToolRegistry::new(Duration::from_secs(5));
        registry.register(Arc::new(Sleepy));
        let out = registry.call(&call("sleepy", json!({})), &ToolContext::default()).await;
        assert!(out.is_error);
        assert!(out.content.contains("did not finish within 5s"), "{}", out.content);
    }

    #[tokio::test]
    async fn string_arguments_are_parsed_and_bad_ones_reported() {
        let registry = ToolRegistry::with_builtins(Duration::from_secs(1));
        let ok = registry.call(&call("current_time", json!("{\"timezone\":\"UTC\"}")), &ToolContext::default()).await;
        assert!(!ok.is_error, "{}", ok.content);
        let bad = registry.call(&call("current_time", json!("{not json")), &ToolContext::default()).await;
        assert!(bad.is_error);
        assert!(bad.content.contains("not a JSON object"));
    }

    #[test]
    fn specs_are_sorted_by_name() {
        let mut registry = ToolRegistry::with_builtins(Duration::from_secs(1));
        registry.register(Arc::new(Sleepy));
        let names: Vec<_> = registry.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["current_time", "sleepy"]);
    }
}
