//! Users as stored: records, identities linked to them and monthly usage (theirs and that of
//! configured groups), behind
//! [`UserStore`]. The rules about users (levels, budgets, who may do what) are in
//! [`crate::users`].

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_channels::contract::Usage;

use super::StoreError;
use crate::config::{Identity, Level};

/// A user's database id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserId(pub i64);

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A user as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: UserId,
    /// The stored level; [`crate::users::AccessPolicy::effective_level`] may raise it (configured owners).
    pub level: Level,
    /// This user's own monthly token budget (0 = unlimited); `None` = its level's budget.
    pub budget: Option<u64>,
    pub created_at: DateTime<Utc>,
}

/// A user with everything an operator listing wants.
#[derive(Debug, Clone, PartialEq)]
pub struct UserSummary {
    pub user: User,
    /// With display names, ordered by channel and id.
    pub identities: Vec<(Identity, String)>,
    /// Tokens used in the month asked for.
    pub used: Usage,
    /// What they cost.
    pub cost: MonthCost,
}

/// The estimated cost of a month's usage (`[prices]`): the sum of the runs whose cost is
/// known, and the tokens of those whose model had no price (or that were counted before
/// switchboard counted costs), which the sum leaves out.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MonthCost {
    pub usd: f64,
    pub unpriced_tokens: u64,
}

impl std::ops::Add for MonthCost {
    type Output = MonthCost;

    fn add(self, other: MonthCost) -> MonthCost {
        MonthCost {
            usd: self.usd + other.usd,
            unpriced_tokens: self.unpriced_tokens.saturating_add(other.unpriced_tokens),
        }
    }
}

/// Whose monthly usage a run's tokens are added to, and for which month.
///
/// By identity rather than user id: if an operator merges the user while the run is going on,
/// the tokens still land on the user the identity belongs to when the run finishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Billing {
    pub identity: Identity,
    /// `YYYY-MM` (UTC) of the month the run started in, the month its budget was checked in.
    pub month: String,
    /// The configured group (`[users.groups]` key) the run was in: its tokens count for the
    /// group's month too.
    pub group: Option<String>,
}

/// What [`UserStore::link`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkOutcome {
    /// The second identity was new and now belongs to the first one's user.
    Linked { user: User },
    /// Both identities already belonged to that user.
    AlreadyLinked { user: User },
    /// The second identity had a user of its own: all of that user's identities and usage were
    /// moved to the first one's user (which keeps its level and budget) and `merged` was deleted.
    Merged { user: User, merged: User },
}

/// Persistence of users, identities and monthly usage.
///
/// Writes that create users are race-safe: two first messages from one identity at once make
/// one user.
#[async_trait]
pub trait UserStore: Send + Sync {
    /// The user an identity belongs to, created at `new_level` on first sight. Refreshes the
    /// stored display name when it changed.
    async fn resolve_user(&self, identity: &Identity, display_name: &str, new_level: Level)
    -> Result<User, StoreError>;

    /// Sets a user's level; an identity never seen yet gets a new user at that level.
    async fn set_level(&self, identity: &Identity, level: Level) -> Result<User, StoreError>;

    /// Sets (or with `None` clears) a user's own monthly budget; an identity never seen yet
    /// gets a new user at `new_level`.
    async fn set_budget(&self, identity: &Identity, budget: Option<u64>, new_level: Level) -> Result<User, StoreError>;

    /// Makes `second` belong to `first`'s user (created at `new_level` if `first` is new).
    async fn link(&self, first: &Identity, second: &Identity, new_level: Level) -> Result<LinkOutcome, StoreError>;

    /// Tokens a user used in `month` (`YYYY-MM`).
    async fn monthly_usage(&self, user: UserId, month: &str) -> Result<Usage, StoreError>;

    /// Tokens used in `month` in the configured group `group` (its `[users.groups]` key).
    async fn group_usage(&self, group: &str, month: &str) -> Result<Usage, StoreError>;

    /// What the group's usage in `month` cost.
    async fn group_cost(&self, group: &str, month: &str) -> Result<MonthCost, StoreError>;

    /// Every user with its identities and its usage in `month`, by id.
    async fn list_users(&self, month: &str) -> Result<Vec<UserSummary>, StoreError>;
}
