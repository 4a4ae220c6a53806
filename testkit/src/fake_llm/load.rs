//! The fake model of a load test: every request answered the same way after a fixed delay,
//! nothing recorded. By default it echoes the newest user message (`echo: <text>`), so the
//! load generator can tell which message a reply answers; with a tool, a turn's first call is
//! answered with one call of that tool and the call after its result with the echo.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Answer, last_user_content, messages};

/// How the load test's model answers.
#[derive(Debug, Default)]
pub struct LoadModel {
    /// How long each answer takes (a hosted model: a few hundred milliseconds to seconds).
    pub delay: Duration,
    /// A tool to call once per turn, with arguments `arguments`, before the text answer.
    pub tool: Option<(String, Value)>,
    calls: AtomicU64,
}

impl LoadModel {
    pub fn new(delay: Duration, tool: Option<(String, Value)>) -> Self {
        Self { delay, tool, calls: AtomicU64::new(0) }
    }

    pub(super) async fn reply(&self, request: &Value) -> Answer {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let last_role = messages(request).last().and_then(|m| m.get("role")).and_then(Value::as_str);
        match &self.tool {
            Some((name, arguments)) if last_role == Some("user") => {
                let id = format!("call_load_{}", self.calls.fetch_add(1, Ordering::Relaxed));
                Answer::ToolCalls(vec![(id, name.clone(), arguments.clone())])
            }
            _ => {
                let text = last_user_content(request);
                Answer::Text(format!("echo: {}", crate::fake_server::without_context_line(&text)), "stop")
            }
        }
    }
}

/// `{}`: the arguments of a tool that takes none.
pub fn no_arguments() -> Value {
    json!({})
}
