//! `[workspace]`: what the agents' workspaces keep for the owner.

use serde::{Deserialize, Serialize};

use crate::workspace::protected::DEFAULT_PROTECTED;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkspaceConfig {
    /// Paths relative to each workspace (a trailing `/` for a folder and all it holds) that
    /// only runs of an admin or the owner may write, edit or delete, with any tool.
    pub protected: Vec<String>,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        Self { protected: DEFAULT_PROTECTED.map(str::to_owned).to_vec() }
    }
}
