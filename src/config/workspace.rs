//! `[workspace]`: what the agents' workspaces keep for the owner.

use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkspaceConfig {
    /// Paths relative to each workspace (a trailing `/` for a folder and all it holds) that
    /// only runs of an admin or the owner may write, edit or delete, with any tool.
    pub protected: Vec<String>,
    /// Days the files runs sent from their `outbox/` are kept (for the API's download links
    /// and redeliveries), and folders of runs that never finished; at least 1.
    pub outbox_keep_days: u64,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        Self { protected: DEFAULT_PROTECTED.map(str::to_owned).to_vec(), outbox_keep_days: 7 }
    }
}

impl WorkspaceConfig {
    /// How long sent files are kept.
    pub fn outbox_keep(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.outbox_keep_days.max(1) * 24 * 3600)
    }
}

/// What `[workspace] protected` holds unless the config says otherwise.
pub const DEFAULT_PROTECTED: [&str; 9] = [
    "SOUL.md",
    "IDENTITY.md",
    "AGENTS.md",
    "TOOLS.md",
    "HEARTBEAT.md",
    "BOOTSTRAP.md",
    "skills/",
    "MEMORY.md",
    "USER.md",
];

/// Why a `[workspace] protected` entry cannot be used: it must name a path inside the
/// workspace.
pub fn protected_problem(entries: &[String]) -> Option<String> {
    entries.iter().find_map(|entry| {
        let path = Path::new(entry);
        let leaves = path.components().any(|part| !matches!(part, Component::Normal(_) | Component::CurDir));
        if entry.trim_end_matches('/').is_empty() || leaves {
            Some(format!("{entry:?} is not a path inside the workspace (relative, without `..`)"))
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_must_stay_inside_the_workspace() {
        assert_eq!(protected_problem(&DEFAULT_PROTECTED.map(str::to_owned)), None);
        for bad in ["/etc/passwd", "../SOUL.md", "a/../../b", "", "/"] {
            assert!(protected_problem(&[bad.to_owned()]).is_some(), "{bad}");
        }
    }
}
