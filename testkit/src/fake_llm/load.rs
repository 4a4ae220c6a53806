//! The fake model of a load test: every request answered the same way after a fixed delay,
//! nothing recorded. By default it echoes the newest user message (`echo: <text>`), so the
//! load generator can tell which message a reply answers; with a tool, a turn's first call is
//! answered with one call of that tool and the call after its result with the echo.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
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
    /// Keep OpenAI's prompt cache and count what it served ([`LoadModel::input`]).
    pub prompt_cache: bool,
    calls: AtomicU64,
    /// Each request's prompt tokens and, of them, those the cache served.
    prompts: Mutex<Vec<(u32, u32)>>,
}

/// What a load test's model was sent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LoadInput {
    pub requests: u64,
    pub tokens: u64,
    pub cached: u64,
    /// The median request's tokens the cache did not serve: what a call costs once the
    /// conversation is under way (the first call of a chat is all new).
    pub uncached_p50: u32,
}

impl LoadModel {
    pub fn new(delay: Duration, tool: Option<(String, Value)>) -> Self {
        Self { delay, tool, ..Self::default() }
    }

    /// The same, keeping a prompt cache as OpenAI does (1,024 tokens or more, in 128-token steps).
    pub fn with_prompt_cache(self) -> Self {
        Self { prompt_cache: true, ..self }
    }

    /// The prompt tokens sent so far, and those the cache served.
    pub fn input(&self) -> LoadInput {
        let prompts = self.prompts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut uncached: Vec<u32> = prompts.iter().map(|(tokens, cached)| tokens - cached).collect();
        uncached.sort_unstable();
        LoadInput {
            requests: prompts.len() as u64,
            tokens: prompts.iter().map(|(tokens, _)| u64::from(*tokens)).sum(),
            cached: prompts.iter().map(|(_, cached)| u64::from(*cached)).sum(),
            uncached_p50: uncached.get(uncached.len() / 2).copied().unwrap_or_default(),
        }
    }

    pub(super) fn count(&self, tokens: usize, cached: usize) {
        let mut prompts = self.prompts.lock().unwrap_or_else(PoisonError::into_inner);
        prompts.push((tokens as u32, cached.min(tokens) as u32));
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
