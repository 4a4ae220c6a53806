//! `spawn`: starts a sub-agent on a task in the background and returns at once.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_channels::contract::ChatAddress;

use super::{RUN_ID_PREFIX, SpawnError, SpawnRequest, SubagentManager};
use crate::tools::{Tool, ToolContext, ToolError, required_str};

/// Longest label kept; labels name a sub-agent in its announcement.
const MAX_LABEL_CHARS: usize = 80;

pub struct SpawnTool {
    manager: Arc<SubagentManager>,
}

impl SpawnTool {
    pub fn new(manager: Arc<SubagentManager>) -> Self {
        Self { manager }
    }
}

#[async_trait]
impl Tool for SpawnTool {
    fn name(&self) -> &str {
        "spawn"
    }

    fn description(&self) -> &str {
        "Starts a sub-agent that works on a task in the background, with your tools (except \
         message, spawn and cron) and without this conversation. Returns at once; its result comes \
         back to you later as a message from switchboard. Give it a complete, self-contained task."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "The whole task, with every detail the sub-agent needs: it does not see this conversation"},
                "label": {"type": "string", "description": "A short name for the task, used when its result comes back"}
            },
            "required": ["task"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        // Sub-agents are not offered this tool; a model naming it anyway is refused here.
        if ctx.run_id.starts_with(RUN_ID_PREFIX) {
            return Err(ToolError::Refused(SpawnError::Nested.to_string()));
        }
        let task = required_str(&arguments, "task")?.trim();
        if task.is_empty() {
            return Err(ToolError::InvalidArguments("`task` must not be empty".into()));
        }
        let label = arguments.get("label").and_then(Value::as_str).unwrap_or_default().trim();
        let label: String = label.chars().take(MAX_LABEL_CHARS).collect();
        let request = SpawnRequest {
            parent_session: ctx.session_key.clone(),
            parent_agent: ctx.agent.clone(),
            chat: ChatAddress {
                channel: ctx.channel.clone(),
                chat_id: ctx.chat_id.clone(),
                thread_id: ctx.thread_id.clone(),
                is_group: ctx.is_group,
            },
            label: label.clone(),
            task: task.to_owned(),
            tools: ctx.tools.clone(),
        };
        let id = self.manager.spawn(request).await.map_err(|err| match err {
            SpawnError::Store(err) => ToolError::Transient(format!("cannot record the sub-agent: {err}")),
            other => ToolError::Refused(other.to_string()),
        })?;
        let name = if label.is_empty() { String::new() } else { format!(" ({label})") };
        Ok(format!(
            "Started sub-agent {id}{name}. Its result will come back as a message; do not wait for it. \
             Tell the user it is on its way."
        ))
    }
}
