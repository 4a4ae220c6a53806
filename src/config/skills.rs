//! `[skills]`: the skill folders of each agent's workspace (see docs/skills.md).

use serde::{Deserialize, Serialize};

/// How agents use the skills in their workspace's `skills/` folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SkillsConfig {
    /// Offer `skill_get` (and `skill_search`) when the workspace has skills.
    pub enabled: bool,
    /// Up to this many skills are listed by name and description in the prompt; with more,
    /// the prompt says how many there are and `skill_search` finds them.
    pub inline_max: usize,
    /// The skills agents may use, by name; empty = all. `[agents.<name>] skills` replaces it
    /// for one agent.
    pub allow: Vec<String>,
}

impl Default for SkillsConfig {
    fn default() -> Self {
        Self { enabled: true, inline_max: 15, allow: Vec::new() }
    }
}
