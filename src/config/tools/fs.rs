//! `[tools.fs]`: File tools: read_file, write_file, edit_file, list_dir.

use serde::{Deserialize, Serialize};

/// File tools: read_file, write_file, edit_file, list_dir.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FsToolsConfig {
    pub enabled: bool,
}

impl Default for FsToolsConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}
