//! `memory_search`: ranked search over the scope's memory files and past conversations.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::searcher::{Found, MemorySearcher};
use super::terms;
use crate::store::memory_index::{CONVERSATION_PREFIX, MemoryHit};
use crate::tools::{Tool, ToolContext, ToolError, optional_count, required_str};

/// Files a result names one by one; the rest are counted.
const MAX_NAMED_FILES: usize = 6;

/// The `memory_search` tool: a [`MemorySearcher`] the model calls.
pub struct MemorySearch {
    searcher: Arc<MemorySearcher>,
}

impl MemorySearch {
    pub fn new(searcher: Arc<MemorySearcher>) -> Self {
        Self { searcher }
    }
}

#[async_trait]
impl Tool for MemorySearch {
    fn name(&self) -> &str {
        "memory_search"
    }

    fn description(&self) -> &str {
        "Searches this chat's memory files and past conversations, also what the prompt no longer shows."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for"},
                "max_results": {
                    "type": "integer", "minimum": 1, "maximum": self.searcher.settings().max_results,
                    "description": format!("Default {}", self.searcher.settings().default_results)
                }
            },
            "required": ["query"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let query = required_str(&arguments, "query")?;
        let settings = self.searcher.settings();
        let limit =
            optional_count(&arguments, "max_results", settings.max_results)?.unwrap_or(settings.default_results);
        let terms = terms(query);
        if terms.is_empty() {
            return Err(ToolError::InvalidArguments("`query` has no words to look for".into()));
        }
        let Found { paths, hits } = self.searcher.find(ctx, query, &terms, limit).await?;
        if hits.is_empty() && paths.is_empty() {
            let whose = ctx.memory.describe();
            return Ok(format!("No match for {query:?} in past conversations; no memory file exists yet for {whose}."));
        }
        Ok(render(query, &paths, &hits))
    }
}

/// What was searched, as the result names it: the files, then the scope's conversations.
fn searched(paths: &[String]) -> String {
    let mut parts = paths.to_vec();
    if parts.len() > MAX_NAMED_FILES {
        let more = parts.len() - MAX_NAMED_FILES;
        parts.truncate(MAX_NAMED_FILES);
        parts.push(format!("{more} more note file(s)"));
    }
    parts.push("past conversations".to_owned());
    parts.join(", ")
}

/// Where a hit is, as results and recall name it: `MEMORY.md lines 3-5`, or
/// `conversation telegram:42, message 1877`.
pub fn place(hit: &MemoryHit) -> String {
    match hit.path.strip_prefix(CONVERSATION_PREFIX) {
        Some(session) => format!("conversation {session}, message {}", hit.start_line),
        None if hit.end_line == hit.start_line => format!("{} line {}", hit.path, hit.start_line),
        None => format!("{} lines {}-{}", hit.path, hit.start_line, hit.end_line),
    }
}

fn render(query: &str, paths: &[String], hits: &[MemoryHit]) -> String {
    let searched = searched(paths);
    if hits.is_empty() {
        return format!("No match for {query:?} in {searched}.");
    }
    let mut out = format!("{} match(es) for {query:?} in {searched}, best first:\n", hits.len());
    for (rank, hit) in hits.iter().enumerate() {
        let snippet = hit.snippet.lines().map(str::trim).collect::<Vec<_>>().join(" / ");
        out.push_str(&format!("\n{}. {}\n   {snippet}\n", rank + 1, place(hit)));
    }
    out.push_str(
        "\nRead a hit in full with memory_get {path, from_line}: for a conversation the path is \
         conversation/<its name> and from_line the message number.",
    );
    out
}
