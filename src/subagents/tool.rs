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
            on_behalf_of: ctx.on_behalf_of.clone(),
            tools: ctx.tools.clone(),
            memory: ctx.memory.clone(),
            persona: ctx.persona.clone(),
            level: ctx.level,
        };
        let id = self.manager.spawn(request).await.map_err(spawn_error)?;
        let name = if label.is_empty() { String::new() } else { format!(" ({label})") };
        Ok(format!(
            "Started sub-agent {id}{name}. Its result will come back as a message; do not wait for it. \
             Tell the user it is on its way."
        ))
    }
}

/// A store error is not [`ToolError::Transient`]: the registry would retry it at once, and if
/// the first insert did commit (an error reported after the commit), a second sub-agent would
/// start. The model decides whether to call `spawn` again; a record that did commit without
/// its task is reported by the reaper as lost, never run twice.
fn spawn_error(err: SpawnError) -> ToolError {
    match err {
        SpawnError::Store(err) => ToolError::Failed(format!(
            "the sub-agent could not be recorded, so it was not started ({err}); you may call spawn again"
        )),
        other => ToolError::Refused(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use switchboard_channels::bus::in_process::InProcessBus;

    use super::*;
    use crate::agent::{Agent, AgentSettings};
    use crate::provider::openai::{OpenAiConfig, OpenAiProvider};
    use crate::store::sqlite::SqliteStore;
    use crate::subagents::SubagentSettings;
    use crate::tools::{ToolLimits, ToolRegistry};

    /// An agent whose model is never called here: spawning fails before the sub-agent runs.
    fn agent(workspace: &Path) -> Arc<Agent> {
        let provider = OpenAiProvider::new(OpenAiConfig {
            name: "unused".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: None,
            request_timeout: Duration::from_secs(1),
            stream: false,
            vision: false,
            extra_headers: vec![],
            hints: Default::default(),
        })
        .unwrap();
        let settings = AgentSettings {
            name: "main".into(),
            system_prompt: "test".into(),
            model: "unused".into(),
            max_iterations: 5,
            loop_detection: 3,
            max_tokens: None,
            temperature: None,
            stream: false,
            tool_choice: Default::default(),
            prices: Default::default(),
            workspace: workspace.to_path_buf(),
            skills: Default::default(),
            protected: Default::default(),
            heartbeat_ack_max_chars: 300,
            models: Vec::new(),
            context_windows: Default::default(),
        };
        Arc::new(Agent::new(Arc::new(provider), ToolRegistry::with_builtins(ToolLimits::default()), settings))
    }

    #[tokio::test]
    async fn a_store_error_is_a_failure_for_the_model_not_a_retry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Arc::new(SqliteStore::open(&path).await.unwrap());
        // Every insert of a sub-agent fails, as with a full disk.
        let other = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display())).await.unwrap();
        sqlx::query(
            "CREATE TRIGGER no_room BEFORE INSERT ON subagents BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END",
        )
        .execute(&other)
        .await
        .unwrap();
        let bus = Arc::new(InProcessBus::new(8));
        let manager = SubagentManager::new(store, bus, crate::clock::system(), SubagentSettings::default());
        let agent = agent(dir.path());
        manager.attach([&agent]);
        let tool = SpawnTool::new(manager);
        let ctx = ToolContext {
            session_key: switchboard_channels::contract::SessionKey::stored("telegram:42"),
            channel: "telegram".into(),
            chat_id: "42".into(),
            run_id: "r1".into(),
            agent: "main".into(),
            ..ToolContext::default()
        };
        let err = tool.execute(json!({"task": "count the files"}), &ctx).await.unwrap_err();
        let ToolError::Failed(message) = err else {
            panic!("expected a failure the registry does not retry, got {err:?}")
        };
        assert!(message.contains("database or disk is full"), "{message}");
        assert!(message.contains("you may call spawn again"), "{message}");
    }
}
