//! Memory tools: `memory_search` (ranked full-text search) and `memory_get` (lines of a memory
//! file), over the memory files of the run's memory scope only (see docs/memory.md, "Search").
//!
//! The files are read fresh at each search and re-indexed in the store's
//! [`MemoryIndex`] when their fingerprint changed, so an edit is searchable at once and
//! a file longer than the prompt's `agent.memory_max_chars` stays searchable as a whole.

mod chunk;
mod get;
mod search;
mod searcher;
mod semantic;

use std::io::Read;
use std::sync::Arc;

use serde_json::Value;
use sha2::Digest;

pub use chunk::{chunks, terms};
pub use get::MemoryGet;
pub use search::{MemorySearch, place};
pub use searcher::{Found, MemorySearcher};
pub use semantic::EmbeddingSettings;

use super::fs::{Resolved, Workspace, open_regular};
use super::{ToolContext, ToolError, ToolRegistry, untrusted};
use crate::config::MemoryToolsConfig;
use crate::store::StoreError;
use crate::workspace::memory::{MEMORY_DIR, MemoryScope, OWNER_MEMORY, OWNER_PROFILE};

/// Limits of the memory tools (from `[tools.memory]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySettings {
    pub default_results: usize,
    pub max_results: usize,
    pub max_file_bytes: usize,
    pub max_get_lines: usize,
}

impl From<&MemoryToolsConfig> for MemorySettings {
    fn from(config: &MemoryToolsConfig) -> Self {
        Self {
            default_results: config.default_results,
            max_results: config.max_results,
            max_file_bytes: config.max_file_bytes,
            max_get_lines: config.max_get_lines,
        }
    }
}

impl Default for MemorySettings {
    fn default() -> Self {
        Self::from(&MemoryToolsConfig::default())
    }
}

/// Adds `memory_search` and `memory_get` over `searcher` when `[tools.memory]` enables them.
/// What they return is wrapped as untrusted content, like `read_file`'s: a group's memory
/// holds what its members said.
pub fn register(registry: &mut ToolRegistry, searcher: &Arc<MemorySearcher>, config: &MemoryToolsConfig) {
    if !config.enabled {
        return;
    }
    let search = Arc::new(MemorySearch::new(Arc::clone(searcher)));
    registry.register(Arc::new(untrusted::Untrusted::new(search, search_source)));
    let get = Arc::new(MemoryGet::new(Arc::clone(searcher.index()), *searcher.settings()));
    registry.register(Arc::new(untrusted::Untrusted::new(get, get_source)));
}

fn search_source(arguments: &Value) -> String {
    format!("memory_search results for {}", arguments.get("query").and_then(Value::as_str).unwrap_or("?"))
}

fn get_source(arguments: &Value) -> String {
    format!("memory_get {}", arguments.get("path").and_then(Value::as_str).unwrap_or("?"))
}

/// The files `memory_search` covers in `scope`, relative to the workspace: the owner's
/// `MEMORY.md` and `USER.md`, or the chat's own file.
pub fn searched_files(scope: &MemoryScope) -> Vec<String> {
    match scope {
        MemoryScope::None => Vec::new(),
        MemoryScope::Owner => vec![OWNER_MEMORY.to_owned(), OWNER_PROFILE.to_owned()],
        MemoryScope::Group { .. } | MemoryScope::Person { .. } => scope.file_shown().into_iter().collect(),
    }
}

/// Whether `relative` (a real path relative to the workspace) is a memory file: `MEMORY.md`,
/// `USER.md`, or a Markdown file under `memory/`.
pub fn is_memory_file(relative: &str) -> bool {
    let lowercase = relative.to_lowercase();
    let at_root = [OWNER_MEMORY, OWNER_PROFILE].iter().any(|name| lowercase == name.to_lowercase());
    let under_dir = lowercase.strip_prefix(MEMORY_DIR).is_some_and(|rest| rest.starts_with('/'));
    at_root || (under_dir && lowercase.ends_with(".md"))
}

/// The run's workspace, its paths checked against the run's memory scope (never beyond the
/// workspace).
fn workspace(ctx: &ToolContext) -> Result<Workspace, ToolError> {
    Workspace::for_run(ctx, false)
}

/// A file's first `max_bytes` bytes; `None` when it does not exist.
fn read_capped(resolved: &Resolved, max_bytes: usize) -> Result<Option<Vec<u8>>, ToolError> {
    if resolved.path.symlink_metadata().is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(None);
    }
    let (file, _) = open_regular(resolved)?;
    let mut bytes = Vec::new();
    file.take(max_bytes as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| super::fs::workspace::io_error("read", &resolved.shown, &e))?;
    Ok(Some(bytes))
}

/// What the index compares to tell a changed file: its size and SHA-256.
fn fingerprint(bytes: &[u8]) -> String {
    let digest = sha2::Sha256::digest(bytes);
    let hex = switchboard_channels::hex::hex(&digest);
    format!("{}:{hex}", bytes.len())
}

fn index_error(error: StoreError) -> ToolError {
    ToolError::Failed(format!("the memory index failed: {error}"))
}

/// Runs blocking file work off the async threads.
async fn blocking<T, F>(work: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
{
    tokio::task::spawn_blocking(work).await.map_err(|e| ToolError::Failed(format!("the memory tool stopped: {e}")))?
}

#[cfg(test)]
mod tests;
