//! The search behind `memory_search` and recall: the scope's memory files brought up to date
//! in the index, its past conversations indexed, one ranked query over both; with embeddings
//! on, that ranking fused with one by meaning ([`super::semantic`]).

use std::path::Path;
use std::sync::Arc;

use super::semantic::{EmbeddingSettings, Semantic, fuse};
use super::{MemorySettings, blocking, chunks, fingerprint, index_error, read_capped, searched_files, workspace};
use crate::provider::embeddings::Embedder;
use crate::store::memory_index::{ChunkQuery, MemoryHit, MemoryIndex, MemoryQuery};
use crate::tools::fs::Workspace;
use crate::tools::{ToolContext, ToolError};
use crate::workspace::memory::MEMORY_DIR;

/// Daily note files searched at most (about a year of them).
const MAX_NOTES: usize = 400;

/// Hits of each ranking that reciprocal rank fusion looks at (at least the limit asked for).
const FUSION_DEPTH: usize = 50;

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
    /// Ranking by meaning too (`[memory.embeddings]`); `None`: full text only.
    semantic: Option<Semantic>,
}

impl MemorySearcher {
    pub fn new(index: Arc<dyn MemoryIndex>, settings: MemorySettings) -> Self {
        Self { index, settings, semantic: None }
    }

    /// Ranks by meaning too, with vectors from `embedder`.
    pub fn with_embeddings(self, embedder: Arc<dyn Embedder>, settings: EmbeddingSettings) -> Self {
        Self { semantic: Some(Semantic::new(embedder, settings)), ..self }
    }

    pub fn settings(&self) -> &MemorySettings {
        &self.settings
    }

    pub fn index(&self) -> &Arc<dyn MemoryIndex> {
        &self.index
    }

    /// The best `limit` matches of `text` in the memory files and past conversations of
    /// `ctx`'s scope: by its `terms` (see [`super::terms`]), and with embeddings on by its
    /// meaning too. A run without a scope is refused.
    pub async fn find(
        &self,
        ctx: &ToolContext,
        text: &str,
        terms: &[String],
        limit: usize,
    ) -> Result<Found, ToolError> {
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
        let Some(semantic) = &self.semantic else {
            let hits = self.index.search_memory(&query).await.map_err(index_error)?;
            return Ok(Found { paths, hits });
        };
        let depth = limit.max(FUSION_DEPTH);
        let mut hits = self.index.search_memory(&MemoryQuery { limit: depth, ..query }).await.map_err(index_error)?;
        let chunks = ChunkQuery { root: &root, paths: &paths, scope: scope.as_deref(), limit: semantic.max_chunks() };
        match semantic.rank(self.index.as_ref(), chunks, text, depth).await {
            Ok(similar) => hits = fuse(hits, similar, limit),
            Err(error) => {
                // The model gets the full-text ranking, as without embeddings; the operator the log.
                tracing::warn!(%error, "memory search: ranking by words only, embeddings failed");
                hits.truncate(limit);
            }
        }
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
