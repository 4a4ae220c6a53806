//! `[tools]`: limits shared by all tools, and each tool family's own section.

mod exec;
mod fs;
mod memory;
mod web;

use serde::{Deserialize, Serialize};

pub use exec::{ExecToolConfig, SANDBOX_MODES};
pub use fs::FsToolsConfig;
pub use memory::MemoryToolsConfig;
pub use web::WebToolsConfig;

/// The agent's tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolsConfig {
    /// Tool results longer than this many characters are cut in the middle (head and tail kept).
    pub max_result_chars: usize,
    pub fs: FsToolsConfig,
    pub exec: ExecToolConfig,
    pub memory: MemoryToolsConfig,
    pub web: WebToolsConfig,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            max_result_chars: 16_000,
            fs: FsToolsConfig::default(),
            exec: ExecToolConfig::default(),
            memory: MemoryToolsConfig::default(),
            web: WebToolsConfig::default(),
        }
    }
}
