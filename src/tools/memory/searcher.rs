//! The search behind `memory_search` and recall: the scope's memory files brought up to date
//! in the index, its past conversations indexed, one ranked query over both.

use std::path::Path;
use std::sync::Arc;

use super::{MemorySettings, blocking, chunks, fingerprint, index_error, read_capped, searched_files, workspace};
use crate::store::memory_index::{MemoryHit, MemoryIndex, MemoryQuery};
use crate::tools::fs::Workspace;
use crate::tools::{ToolContext, ToolError};
use crate::workspace::memory::MEMORY_DIR;

/// Daily note files searched at most (about a year of them).
const MAX_NOTES: usize = 400;

/// What a search found.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The memory files searched (those that exist), relative to the workspace.
    pub paths: Vec<String>,
    /// Best first.
    pub hits: Vec<MemoryHit>,
}

/// Searches a run's memory scope (see the module docs); shared by the tool and recall.
pub struct MemorySearcher {
    index: Arc<dyn MemoryIndex>,
    settings: MemorySettings,
}

impl MemorySearcher {
    pub fn new(index: Arc<dyn MemoryIndex>, settings: MemorySettings) -> Self {
        Self { index, settings }
    }

    pub fn settings(&self) -> &MemorySettings {
        &self.settings
    }

    pub fn index(&self) -> &Arc<dyn MemoryIndex> {
        &self.index
    }

    /// The best `limit` matches of `terms` (see [`super::terms`]) in the memory files and
    /// past conversations of `ctx`'s scope. A run without a scope is refused.
    pub async fn find(&self, ctx: &ToolContext, terms: &[String], limit: usize) -> Result<Found, ToolError> {
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
        let query = MemoryQuery { root: &root, paths: &paths, scope: scope.as_deref(), terms, limit };
        let hits = self.index.search_memory(&query).await.map_err(index_error)?;
        Ok(Found { paths, hits })
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
