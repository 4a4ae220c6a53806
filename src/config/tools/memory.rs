//! `[tools.memory]`: memory_search and memory_get over the memory files of a chat's scope.

use serde::{Deserialize, Serialize};

/// memory_search and memory_get.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryToolsConfig {
    pub enabled: bool,
    /// Hits memory_search returns when the model does not ask for a number (it may ask for up
    /// to `max_results`).
    pub default_results: usize,
    /// Hits memory_search returns at most.
    pub max_results: usize,
    /// Bytes of a memory file that are indexed; the rest of a longer file is not searched.
    pub max_file_bytes: usize,
    /// Lines memory_get returns at most per call.
    pub max_get_lines: usize,
}

impl Default for MemoryToolsConfig {
    fn default() -> Self {
        Self { enabled: true, default_results: 5, max_results: 20, max_file_bytes: 4 * 1024 * 1024, max_get_lines: 200 }
    }
}
