//! `[users]`, `[permissions]`, `[budgets]` and `[rate_limits]`: who may do what, how many tokens
//! a month, and how many messages a minute.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::identity::Level;

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
    /// Per-group settings, keyed by the group: `telegram:<chat id>`, `discord:<channel id>`
    /// or `discord:guild:<server id>`.
    pub groups: BTreeMap<String, GroupAccessConfig>,
}

/// `[users.groups."<group>"]`: what members get in one group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupAccessConfig {
    /// The lowest level anyone runs with in this group; never `owner`.
    pub level: Level,
    /// Tokens per UTC month that everyone in the group uses together; 0 = no shared limit.
    pub budget: u64,
}

impl Default for UsersConfig {
    fn default() -> Self {
        // Someone the owner approved by name is trusted with the everyday tools, not treated
        // like a stranger.
        Self { owners: Vec::new(), default_level: Level::Guest, approved_level: Level::User, groups: BTreeMap::new() }
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
            ("delete_file", Level::User),
            ("web_fetch", Level::User),
            ("web_search", Level::User),
            ("message", Level::User),
            ("cron", Level::User),
            ("spawn", Level::User),
            ("memory_search", Level::User),
            ("memory_get", Level::User),
            ("skill_get", Level::User),
            // Gateways: what they reach is limited by each MCP server's own level.
            ("mcp_tool_search", Level::Guest),
            ("mcp_call", Level::Guest),
            ("skill_search", Level::User),
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
        // cost an owner does not notice. tests/it/users.rs measures it with real turns.
        Self { guest: 250_000, user: 1_000_000, admin: 0, owner: 0 }
    }
}

/// Messages a sender may send per minute, by level; 0 = unlimited. A burst that the worker's
/// debounce answers as one turn counts once; commands (`/stop`, ...) never count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RateLimitsConfig {
    pub guest: u32,
    pub user: u32,
    pub admin: u32,
    pub owner: u32,
}

impl Default for RateLimitsConfig {
    fn default() -> Self {
        // A person in conversation rarely starts more than a few turns a minute; 10 leaves room
        // for quick corrections while one sender cannot keep a group's queue full. Admins and
        // owners run the bot and are not limited.
        Self { guest: 10, user: 30, admin: 0, owner: 0 }
    }
}

impl RateLimitsConfig {
    /// No limit for anyone.
    pub const UNLIMITED: RateLimitsConfig = RateLimitsConfig { guest: 0, user: 0, admin: 0, owner: 0 };

    /// The limit of `level`; `None` = unlimited.
    pub fn per_minute(&self, level: Level) -> Option<u32> {
        let limit = match level {
            Level::Guest => self.guest,
            Level::User => self.user,
            Level::Admin => self.admin,
            Level::Owner => self.owner,
        };
        (limit > 0).then_some(limit)
    }

    /// The lowest limit of any level: below it no sender needs their level looked up.
    pub fn lowest(&self) -> Option<u32> {
        Level::ALL.into_iter().filter_map(|level| self.per_minute(level)).min()
    }
}

/// How a `[users.groups]` key names its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKey<'a> {
    /// A Telegram group or a Discord channel (with its topics or threads): `<channel>:<chat id>`.
    Chat { channel: &'a str, chat_id: &'a str },
    /// Every channel and thread of a Discord server: `discord:guild:<server id>`.
    DiscordGuild { guild_id: &'a str },
}

impl<'a> GroupKey<'a> {
    /// Reads a key, or says what is wrong with it.
    pub fn parse(key: &'a str) -> Result<GroupKey<'a>, String> {
        let numeric = |id: &str| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit());
        let expected = "expected telegram:<group chat id>, discord:<channel id> or discord:guild:<server id>";
        match key.split_once(':') {
            // Telegram gives every group and supergroup a negative id; a positive one is a person.
            Some(("telegram", chat_id)) if chat_id.strip_prefix('-').is_some_and(numeric) => {
                Ok(GroupKey::Chat { channel: "telegram", chat_id })
            }
            Some(("telegram", _)) => {
                Err(format!("{key:?} is not a Telegram group: group chat ids are negative numbers (-100…)"))
            }
            Some(("discord", rest)) => match rest.strip_prefix("guild:") {
                Some(guild_id) if numeric(guild_id) => Ok(GroupKey::DiscordGuild { guild_id }),
                None if numeric(rest) => Ok(GroupKey::Chat { channel: "discord", chat_id: rest }),
                _ => Err(format!("{key:?} is not a Discord channel or server: {expected}")),
            },
            _ => Err(format!("{key:?} is not a group: {expected}")),
        }
    }
}

/// The first bad `[users.groups]` entry, with its key path.
pub(super) fn groups_problem(users: &UsersConfig) -> Option<(String, String)> {
    for (key, group) in &users.groups {
        if let Err(reason) = GroupKey::parse(key) {
            return Some((format!("users.groups.{key}"), reason));
        }
        if group.level == Level::Owner {
            // Owner means everything, the shell included; that is for named people only.
            let reason = "a group cannot make its members owners; name owners in users.owners".to_owned();
            return Some((format!("users.groups.{key}.level"), reason));
        }
    }
    None
}
