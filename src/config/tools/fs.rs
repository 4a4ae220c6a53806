//! `[tools.fs]`: File tools: read_file, write_file, edit_file, list_dir.

use serde::{Deserialize, Serialize};

/// File tools: read_file, write_file, edit_file, list_dir.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FsToolsConfig {
    pub enabled: bool,
    /// Let file tools reach paths outside the workspace (symlinks included). Off by default:
    /// the agent stays in its workspace.
    pub allow_outside_workspace: bool,
    /// Bytes `read_file` returns at most per call; longer files are cut with a note.
    pub max_read_bytes: usize,
    /// Largest content `write_file` and `edit_file` write, in bytes.
    pub max_write_bytes: usize,
    /// Entries `list_dir` shows at most.
    pub max_list_entries: usize,
}

impl Default for FsToolsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allow_outside_workspace: false,
            max_read_bytes: 256 * 1024,
            max_write_bytes: 1024 * 1024,
            max_list_entries: 500,
        }
    }
}
