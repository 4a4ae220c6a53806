//! `memory_search`: ranked full-text search over the scope's memory files.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{
    MemorySettings, blocking, chunks, fingerprint, index_error, read_capped, searched_files, terms, workspace,
};
use crate::store::memory_index::{CONVERSATION_PREFIX, MemoryHit, MemoryIndex, MemoryQuery};
use crate::tools::fs::Workspace;
use crate::tools::{Tool, ToolContext, ToolError, required_str};
use crate::workspace::memory::MEMORY_DIR;

/// Daily note files searched at most (about a year of them).
const MAX_NOTES: usize = 400;
/// Files a result names one by one; the rest are counted.
const MAX_NAMED_FILES: usize = 6;

pub struct MemorySearch {
    index: Arc<dyn MemoryIndex>,
    settings: MemorySettings,
}

impl MemorySearch {
    pub fn new(index: Arc<dyn MemoryIndex>, settings: MemorySettings) -> Self {
        Self { index, settings }
    }

    /// Brings the index of each searched file up to date; returns the files that exist.
    async fn refresh(&self, workspace: &Workspace, root: &str, ctx: &ToolContext) -> Result<Vec<String>, ToolError> {
        let mut present = Vec::new();
        let mut files = searched_files(&ctx.memory);
        if ctx.memory.is_owner() {
            let notes_dir = workspace.root().join(MEMORY_DIR);
            files.extend(blocking(move || Ok(daily_notes(&notes_dir))).await?);
        }
        for file in files {
            // Refused: a link leading to another scope's file. Not searched, never indexed.
            let Ok(resolved) = workspace.resolve(&file) else { continue };
            let max_bytes = self.settings.max_file_bytes;
            let Some(bytes) = blocking(move || read_capped(&resolved, max_bytes)).await? else {
                self.index.forget_memory_file(root, &file).await.map_err(index_error)?;
                continue;
            };
            let print = fingerprint(&bytes);
            if self.index.memory_fingerprint(root, &file).await.map_err(index_error)?.as_deref() != Some(&print) {
                let text = String::from_utf8_lossy(&bytes);
                self.index.index_memory_file(root, &file, &print, &chunks(&text)).await.map_err(index_error)?;
            }
            present.push(file);
        }
        Ok(present)
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
                    "type": "integer", "minimum": 1, "maximum": self.settings.max_results,
                    "description": format!("Default {}", self.settings.default_results)
                }
            },
            "required": ["query"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let query = required_str(&arguments, "query")?;
        let limit = match arguments.get("max_results") {
            None | Some(Value::Null) => self.settings.default_results,
            Some(value) => match value.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) if n >= 1 => n.min(self.settings.max_results),
                _ => return Err(ToolError::InvalidArguments("`max_results` must be an integer of at least 1".into())),
            },
        };
        let terms = terms(query);
        if terms.is_empty() {
            return Err(ToolError::InvalidArguments("`query` has no words to look for".into()));
        }
        if searched_files(&ctx.memory).is_empty() {
            return Err(ToolError::Refused("this run has no memory to search".into()));
        }
        let workspace = workspace(ctx)?;
        let root = workspace.root().to_string_lossy().into_owned();
        let paths = self.refresh(&workspace, &root, ctx).await?;
        let scope = ctx.memory.label(&ctx.agent);
        if let Some(scope) = &scope {
            self.index.index_conversations(&root, scope).await.map_err(index_error)?;
        }
        let search = MemoryQuery { root: &root, paths: &paths, scope: scope.as_deref(), terms: &terms, limit };
        let hits = self.index.search_memory(&search).await.map_err(index_error)?;
        if hits.is_empty() && paths.is_empty() {
            let whose = ctx.memory.describe();
            return Ok(format!("No match for {query:?} in past conversations; no memory file exists yet for {whose}."));
        }
        Ok(render(query, &paths, &hits))
    }
}

/// The owner's daily notes: the `.md` files directly in `memory/` (by convention one per
/// day, `memory/2026-11-26.md`), newest name first, at most [`MAX_NOTES`]. Not its
/// subdirectories: those hold the other scopes' files.
fn daily_notes(notes_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(notes_dir) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.to_lowercase().ends_with(".md"))
        .collect();
    names.sort_unstable_by(|a, b| b.cmp(a));
    names.truncate(MAX_NOTES);
    names.into_iter().map(|name| format!("{MEMORY_DIR}/{name}")).collect()
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

fn render(query: &str, paths: &[String], hits: &[MemoryHit]) -> String {
    let searched = searched(paths);
    if hits.is_empty() {
        return format!("No match for {query:?} in {searched}.");
    }
    let mut out = format!("{} match(es) for {query:?} in {searched}, best first:\n", hits.len());
    for (rank, hit) in hits.iter().enumerate() {
        let place = match hit.path.strip_prefix(CONVERSATION_PREFIX) {
            Some(session) => format!("conversation {session}, message {}", hit.start_line),
            None if hit.end_line == hit.start_line => format!("{} line {}", hit.path, hit.start_line),
            None => format!("{} lines {}-{}", hit.path, hit.start_line, hit.end_line),
        };
        let snippet = hit.snippet.lines().map(str::trim).collect::<Vec<_>>().join(" / ");
        out.push_str(&format!("\n{}. {place}\n   {snippet}\n", rank + 1));
    }
    out.push_str(
        "\nRead a hit in full with memory_get {path, from_line}: for a conversation the path is \
         conversation/<its name> and from_line the message number.",
    );
    out
}
