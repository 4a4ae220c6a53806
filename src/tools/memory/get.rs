//! `memory_get`: lines of a memory file the run's scope may read.

use std::io::{BufRead, BufReader};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{MemorySettings, blocking, index_error, is_memory_file, workspace};
use crate::store::memory_index::{CONVERSATION_PREFIX, MemoryIndex};
use crate::tools::fs::{Resolved, open_regular, workspace::io_error};
use crate::tools::{Tool, ToolContext, ToolError, optional_count, required_str};

/// Messages of a conversation `memory_get` returns when `lines` is not given.
const DEFAULT_MESSAGES: usize = 20;

pub struct MemoryGet {
    index: Arc<dyn MemoryIndex>,
    settings: MemorySettings,
}

impl MemoryGet {
    pub fn new(index: Arc<dyn MemoryIndex>, settings: MemorySettings) -> Self {
        Self { index, settings }
    }

    /// Messages of a past conversation of the run's scope, from message `from` on.
    async fn conversation(
        &self,
        ctx: &ToolContext,
        session: &str,
        from: usize,
        count: usize,
    ) -> Result<String, ToolError> {
        let refused = || ToolError::Refused(format!("conversation `{session}` is not one of this chat's"));
        let scope = ctx.memory.label(&ctx.agent).ok_or_else(refused)?;
        let from_id = i64::try_from(from).unwrap_or(i64::MAX);
        let messages = self.index.conversation_messages(&scope, session, from_id, count).await.map_err(index_error)?;
        let (Some(first), Some(last)) = (messages.first(), messages.last()) else {
            // Also what another scope's conversation gives: nothing to tell it from a wrong name.
            return Err(ToolError::Failed(format!(
                "no message of this chat's conversation `{session}` from message {from} on"
            )));
        };
        let lines: Vec<&str> = messages.iter().map(|message| message.text.as_str()).collect();
        Ok(format!(
            "[conversation {session} messages {}-{}; to read on, from_line={}]\n{}",
            first.id,
            last.id,
            last.id + 1,
            lines.join("\n")
        ))
    }
}

#[async_trait]
impl Tool for MemoryGet {
    fn name(&self) -> &str {
        "memory_get"
    }

    fn description(&self) -> &str {
        "Reads lines of a memory file, or messages of a conversation, that memory_search named."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "e.g. MEMORY.md"},
                "from_line": {"type": "integer", "minimum": 1, "description": "1-based; default 1"},
                "lines": {
                    "type": "integer", "minimum": 1, "maximum": self.settings.max_get_lines,
                    "description": format!("Default {}", self.settings.max_get_lines)
                }
            },
            "required": ["path"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = required_str(&arguments, "path")?;
        let from = optional_count(&arguments, "from_line", usize::MAX)?.unwrap_or(1);
        let max_lines = self.settings.max_get_lines;
        let lines = optional_count(&arguments, "lines", max_lines)?;
        if let Some(session) = path.strip_prefix(CONVERSATION_PREFIX) {
            let count = lines.unwrap_or(DEFAULT_MESSAGES.min(max_lines));
            return self.conversation(ctx, session, from, count).await;
        }
        let count = lines.unwrap_or(max_lines);
        // Refuses another scope's memory, as the file tools do (real path, links resolved).
        let resolved = workspace(ctx)?.resolve(path)?;
        if !is_memory_file(&resolved.shown) {
            return Err(ToolError::Refused(format!(
                "`{path}` is not a memory file; memory_get reads MEMORY.md, USER.md and the .md files under \
                 memory/ (other files: read_file)"
            )));
        }
        blocking(move || read_lines(&resolved, from, count)).await
    }
}

fn read_lines(resolved: &Resolved, from: usize, count: usize) -> Result<String, ToolError> {
    let shown = &resolved.shown;
    let (file, _) = open_regular(resolved)?;
    let mut kept = Vec::new();
    let mut total = 0;
    for line in BufReader::new(file).split(b'\n') {
        let line = line.map_err(|e| io_error("read", shown, &e))?;
        total += 1;
        if total >= from && kept.len() < count {
            kept.push(String::from_utf8_lossy(&line).trim_end_matches('\r').to_owned());
        }
    }
    if kept.is_empty() {
        return Ok(match total {
            0 => format!("(`{shown}` is empty)"),
            _ => format!("(`{shown}` has {total} lines; nothing from line {from} on)"),
        });
    }
    let last = from + kept.len() - 1;
    let more = match last < total {
        true => format!("; to read on, from_line={}", last + 1),
        false => String::new(),
    };
    Ok(format!("[{shown} lines {from}-{last} of {total}{more}]\n{}", kept.join("\n")))
}
