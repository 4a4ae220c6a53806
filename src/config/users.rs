//! `[users]`, `[permissions]` and `[budgets]`: who may do what, and how many tokens a month.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::users::Level;

/// Users and owners.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UsersConfig {
    /// Identities (`channel:sender_id`) that always act as owner.
    pub owners: Vec<String>,
    /// The level of a user created by their first message.
    pub default_level: Level,
    /// The level the owner gives a sender by approving them (`switchboard pairing approve`
    /// or `pairing add`); a sender who has a higher level keeps it.
    pub approved_level: Level,
}

impl Default for UsersConfig {
    fn default() -> Self {
        // Someone the owner approved by name is trusted with the everyday tools, not treated
        // like a stranger.
        Self { owners: Vec::new(), default_level: Level::Guest, approved_level: Level::User }
    }
}

/// Which level each tool needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PermissionsConfig {
    /// The level needed by tools that `tools` does not list.
    pub unlisted_tools: Level,
    /// Tool name → the lowest level that is offered the tool.
    pub tools: BTreeMap<String, Level>,
}

impl Default for PermissionsConfig {
    fn default() -> Self {
        let tools = [
            ("current_time", Level::Guest),
            ("read_file", Level::User),
            ("list_dir", Level::User),
            ("write_file", Level::User),
            ("edit_file", Level::User),
            ("web_fetch", Level::User),
            ("web_search", Level::User),
            ("message", Level::User),
            ("cron", Level::User),
            ("spawn", Level::User),
            ("exec", Level::Admin),
        ];
        Self {
            unlisted_tools: Level::Owner,
            tools: tools.into_iter().map(|(name, level)| (name.into(), level)).collect(),
        }
    }
}

/// Monthly token budgets (input + output tokens per UTC calendar month) per level; 0 = unlimited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BudgetsConfig {
    pub guest: u64,
    pub user: u64,
    pub admin: u64,
    pub owner: u64,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        // A guest's turn re-sends the fixed part (the system prompt of an `init` workspace and
        // the one guest tool schema, about 850 tokens) plus the history, which the default
        // `history.keep_user_turns = 20` lets grow to about 4,000 tokens for brief exchanges
        // (150-character messages, 600-character answers): about 1,000 tokens for a first
        // message, about 5,000 once a conversation is long. 250,000 tokens is thus about 60
        // messages in one long conversation and far more in short ones: a real trial, at a
        // cost an owner does not notice. tests/users.rs measures it with real turns.
        Self { guest: 250_000, user: 1_000_000, admin: 0, owner: 0 }
    }
}
