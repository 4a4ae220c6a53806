//! `[tools.exec]`: The exec tool.

use serde::{Deserialize, Serialize};

/// The exec tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExecToolConfig {
    pub enabled: bool,
}

impl Default for ExecToolConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}
