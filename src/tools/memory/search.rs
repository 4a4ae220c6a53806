//! `memory_search`: ranked full-text search over the scope's memory files.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{
    MemorySettings, blocking, chunks, fingerprint, index_error, read_capped, searched_files, terms, workspace,
};
use crate::store::memory_index::{MemoryHit, MemoryIndex, MemoryQuery};
use crate::tools::fs::Workspace;
use crate::tools::{Tool, ToolContext, ToolError, required_str};

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
        for file in searched_files(&ctx.memory) {
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
        "Searches this chat's memory files, also past what the prompt shows. Hits name file and lines."
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
        if paths.is_empty() {
            return Ok(format!("No memory file exists yet for {}.", ctx.memory.describe()));
        }
        let search = MemoryQuery { root: &root, paths: &paths, terms: &terms, limit };
        let hits = self.index.search_memory(&search).await.map_err(index_error)?;
        Ok(render(query, &paths, &hits))
    }
}

fn render(query: &str, paths: &[String], hits: &[MemoryHit]) -> String {
    let files = paths.join(", ");
    if hits.is_empty() {
        return format!("No match for {query:?} in {files}.");
    }
    let mut out = format!("{} match(es) for {query:?} in {files}, best first:\n", hits.len());
    for (rank, hit) in hits.iter().enumerate() {
        let lines = match hit.end_line == hit.start_line {
            true => format!("line {}", hit.start_line),
            false => format!("lines {}-{}", hit.start_line, hit.end_line),
        };
        let snippet = hit.snippet.lines().map(str::trim).collect::<Vec<_>>().join(" / ");
        out.push_str(&format!("\n{}. {} {lines}\n   {snippet}\n", rank + 1, hit.path));
    }
    out.push_str("\nRead a hit in full with memory_get {path, from_line}.");
    out
}
