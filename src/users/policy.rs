//! [`AccessPolicy`]: the configured rules, applied to one user at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::{BadIdentity, Identity, Level};
use crate::config::{BudgetsConfig, PermissionsConfig, UsersConfig};
use crate::store::users::{User, UserSummary};
use crate::tools::ToolFilter;

use super::groups::{BadGroup, GroupPlace, GroupRule, GroupRules};

pub use crate::clock::Clock;

/// A config the policy cannot be built from.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("users.owners: {0}")]
    Owner(#[from] BadIdentity),
    #[error(transparent)]
    Group(#[from] BadGroup),
}

/// Who is an owner, which level each tool needs, and how many tokens each level may use a month.
#[derive(Clone)]
pub struct AccessPolicy {
    owners: BTreeSet<Identity>,
    default_level: Level,
    tool_levels: BTreeMap<String, Level>,
    /// Levels of tools by the start of their name (`files__` for an MCP server's tools), for
    /// tools `tool_levels` does not name.
    prefix_levels: Vec<(String, Level)>,
    unlisted_tools: Level,
    budgets: BudgetsConfig,
    groups: GroupRules,
    clock: Clock,
}

impl std::fmt::Debug for AccessPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessPolicy")
            .field("owners", &self.owners)
            .field("default_level", &self.default_level)
            .field("tool_levels", &self.tool_levels)
            .field("unlisted_tools", &self.unlisted_tools)
            .field("budgets", &self.budgets)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl Default for AccessPolicy {
    /// The policy of the default configuration: no owners, new users are guests.
    fn default() -> Self {
        let users = UsersConfig::default();
        Self::build(
            BTreeSet::new(),
            GroupRules::default(),
            &users,
            &PermissionsConfig::default(),
            &BudgetsConfig::default(),
        )
    }
}

impl AccessPolicy {
    /// The policy the config describes. Fails on an owner that is not `channel:sender_id` or
    /// a group key that names no group (config validation reports both earlier, with the key).
    pub fn from_config(
        users: &UsersConfig,
        permissions: &PermissionsConfig,
        budgets: &BudgetsConfig,
    ) -> Result<Self, PolicyError> {
        let owners = users.owners.iter().map(|owner| owner.parse()).collect::<Result<_, _>>()?;
        let groups = GroupRules::from_config(&users.groups)?;
        Ok(Self::build(owners, groups, users, permissions, budgets))
    }

    fn build(
        owners: BTreeSet<Identity>,
        groups: GroupRules,
        users: &UsersConfig,
        permissions: &PermissionsConfig,
        budgets: &BudgetsConfig,
    ) -> Self {
        Self {
            owners,
            default_level: users.default_level,
            tool_levels: permissions.tools.clone(),
            prefix_levels: Vec::new(),
            unlisted_tools: permissions.unlisted_tools,
            budgets: budgets.clone(),
            groups,
            clock: Arc::new(Utc::now),
        }
    }

    /// The same policy reading the time from `clock`.
    pub fn with_clock(self, clock: Clock) -> Self {
        Self { clock, ..self }
    }

    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    fn is_owner(&self, identity: &Identity) -> bool {
        self.owners.contains(identity)
    }

    /// The level a user first seen through `identity` is created with.
    pub fn new_user_level(&self, identity: &Identity) -> Level {
        if self.is_owner(identity) { Level::Owner } else { self.default_level }
    }

    /// The level a message from `identity` runs with: the user's, or owner for a configured
    /// owner whatever the stored level says (so the config cannot be overridden from the store).
    pub fn effective_level(&self, identity: &Identity, user: &User) -> Level {
        if self.is_owner(identity) { Level::Owner } else { user.level }
    }

    /// A listed user's level, as lists show it: owner when one of their identities is a
    /// configured owner (they act as owner writing from it), else the stored one.
    pub fn listed_level(&self, summary: &UserSummary) -> Level {
        let identities = summary.identities.iter();
        identities
            .map(|(identity, _)| self.effective_level(identity, &summary.user))
            .max()
            .unwrap_or(summary.user.level)
    }

    /// The configured group a message written at `place` belongs to, if any.
    pub fn group(&self, place: GroupPlace<'_>) -> Option<&GroupRule> {
        self.groups.find(place)
    }

    /// Every configured group.
    pub fn groups(&self) -> impl Iterator<Item = &GroupRule> {
        self.groups.all()
    }

    /// The level someone whose own level is `level` runs with in `group`: the group's level if
    /// that is higher. A group never lowers anyone.
    pub fn level_in(&self, level: Level, group: Option<&GroupRule>) -> Level {
        group.map_or(level, |group| level.max(group.level))
    }

    /// The minimum level a tool needs. Tools the config does not list need `unlisted_tools`
    /// (owner by default): a newly added tool is never open to everyone by accident.
    pub fn tool_level(&self, tool: &str) -> Level {
        let by_prefix = || self.prefix_levels.iter().find(|(prefix, _)| tool.starts_with(prefix.as_str())).map(|p| p.1);
        self.tool_levels.get(tool).copied().or_else(by_prefix).unwrap_or(self.unlisted_tools)
    }

    /// This policy with the levels of tools whose names start with a prefix (each MCP server's
    /// `level` for `<server>__`); a tool `[permissions.tools]` names keeps its own.
    pub fn with_prefix_levels(mut self, prefixes: impl IntoIterator<Item = (String, Level)>) -> Self {
        self.prefix_levels.extend(prefixes);
        self
    }

    /// The tools among `names` that `level` may use.
    pub fn tool_filter<'a>(&self, level: Level, names: impl Iterator<Item = &'a str>) -> ToolFilter {
        ToolFilter::Only(names.filter(|name| self.tool_level(name) <= level).map(str::to_owned).collect())
    }

    /// The user's monthly token budget at `level`; `None` = unlimited.
    pub fn budget(&self, level: Level, user: &User) -> Option<u64> {
        let budget = user.budget.unwrap_or_else(|| self.level_budget(level));
        (budget > 0).then_some(budget)
    }

    /// The configured budget of a level (0 = unlimited).
    pub fn level_budget(&self, level: Level) -> u64 {
        match level {
            Level::Guest => self.budgets.guest,
            Level::User => self.budgets.user,
            Level::Admin => self.budgets.admin,
            Level::Owner => self.budgets.owner,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::users::UserId;

    fn user(level: Level, budget: Option<u64>) -> User {
        User { id: UserId(1), level, budget, created_at: Utc::now() }
    }

    fn policy(owners: &[&str]) -> AccessPolicy {
        let users = UsersConfig { owners: owners.iter().map(|o| o.to_string()).collect(), ..UsersConfig::default() };
        AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap()
    }

    #[test]
    fn configured_owners_are_owners_whatever_the_store_says() {
        let policy = policy(&["telegram:1"]);
        let owner = Identity::new("telegram", "1");
        let other = Identity::new("telegram", "2");
        assert_eq!(policy.new_user_level(&owner), Level::Owner);
        assert_eq!(policy.new_user_level(&other), Level::Guest);
        assert_eq!(policy.effective_level(&owner, &user(Level::Guest, None)), Level::Owner);
        assert_eq!(policy.effective_level(&other, &user(Level::Admin, None)), Level::Admin);
    }

    #[test]
    fn tools_are_offered_by_level_and_unlisted_ones_need_an_owner() {
        let policy = policy(&[]);
        let names = ["current_time", "exec", "read_file", "write_file", "brand_new_tool"];
        let allowed = |level| match policy.tool_filter(level, names.into_iter()) {
            ToolFilter::Only(set) => set.into_iter().collect::<Vec<_>>(),
            ToolFilter::All => panic!("a level filter lists its tools"),
        };
        assert_eq!(allowed(Level::Guest), ["current_time"]);
        assert_eq!(allowed(Level::User), ["current_time", "read_file", "write_file"]);
        assert_eq!(allowed(Level::Admin), ["current_time", "exec", "read_file", "write_file"]);
        assert_eq!(allowed(Level::Owner).len(), names.len());
    }

    #[test]
    fn budgets_come_from_the_level_unless_the_user_has_one() {
        let policy = policy(&[]);
        assert_eq!(policy.budget(Level::Guest, &user(Level::Guest, None)), Some(250_000));
        assert_eq!(policy.budget(Level::Admin, &user(Level::Admin, None)), None);
        assert_eq!(policy.budget(Level::Guest, &user(Level::Guest, Some(5))), Some(5));
        // An override of 0 means unlimited, like a level budget of 0.
        assert_eq!(policy.budget(Level::Guest, &user(Level::Guest, Some(0))), None);
    }

    #[test]
    fn a_group_raises_levels_but_never_lowers_them() {
        let groups = [("telegram:-100".to_owned(), crate::config::GroupAccessConfig { level: Level::User, budget: 0 })];
        let users = UsersConfig { groups: groups.into(), ..UsersConfig::default() };
        let policy =
            AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
        let group = policy.group(GroupPlace { channel: "telegram", chat_id: "-100", guild_id: None });
        assert_eq!(group.map(|g| g.key.as_str()), Some("telegram:-100"));
        assert_eq!(policy.level_in(Level::Guest, group), Level::User);
        assert_eq!(policy.level_in(Level::Admin, group), Level::Admin);
        assert_eq!(policy.level_in(Level::Guest, None), Level::Guest);
    }

    #[test]
    fn identities_and_levels_parse() {
        assert_eq!("matrix:@a:b.org".parse::<Identity>().unwrap(), Identity::new("matrix", "@a:b.org"));
        assert!("telegram".parse::<Identity>().is_err());
        assert!(":1".parse::<Identity>().is_err());
        assert!("telegram:".parse::<Identity>().is_err());
        assert_eq!("admin".parse::<Level>().unwrap(), Level::Admin);
        assert!("root".parse::<Level>().is_err());
        assert!(Level::Guest < Level::User && Level::User < Level::Admin && Level::Admin < Level::Owner);
    }
}
