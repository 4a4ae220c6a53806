//! Users, permission levels and monthly token budgets.
//!
//! A platform identity (`channel` + sender id) belongs to one user; several identities can be
//! linked to the same user. A user has a [`Level`] that decides which tools the model is
//! offered, and a monthly token budget (from its level, or its own override). Persistence is
//! behind [`UserStore`], so each store backend implements it next to its [`crate::store::Store`].

mod month;
mod policy;

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use switchboard_channels::contract::Usage;
use thiserror::Error;

pub use month::{month_key, next_month_start};
pub use policy::{AccessPolicy, Clock};

use crate::store::StoreError;

/// What a user may do, lowest first; a higher level may do everything a lower one may.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    #[default]
    Guest,
    User,
    Admin,
    Owner,
}

impl Level {
    pub const ALL: [Level; 4] = [Level::Guest, Level::User, Level::Admin, Level::Owner];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Guest => "guest",
            Level::User => "user",
            Level::Admin => "admin",
            Level::Owner => "owner",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not a level name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0:?} is not a level (guest, user, admin or owner)")]
pub struct BadLevel(pub String);

impl FromStr for Level {
    type Err = BadLevel;

    fn from_str(text: &str) -> Result<Level, BadLevel> {
        Level::ALL.into_iter().find(|level| level.as_str() == text).ok_or_else(|| BadLevel(text.to_owned()))
    }
}

/// Who wrote a message, as the platform knows them: `telegram:123`, `api:me`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    pub channel: String,
    pub sender_id: String,
}

impl Identity {
    pub fn new(channel: &str, sender_id: &str) -> Identity {
        Identity { channel: channel.to_owned(), sender_id: sender_id.to_owned() }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.channel, self.sender_id)
    }
}

/// A string that is not `channel:sender_id`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0:?} is not an identity (expected channel:sender_id, e.g. telegram:123456)")]
pub struct BadIdentity(pub String);

impl FromStr for Identity {
    type Err = BadIdentity;

    /// Splits at the first `:`: channel names have none, sender ids may (`matrix:@a:b.org`).
    fn from_str(text: &str) -> Result<Identity, BadIdentity> {
        match text.split_once(':') {
            Some((channel, sender)) if !channel.trim().is_empty() && !sender.trim().is_empty() => {
                Ok(Identity::new(channel, sender))
            }
            _ => Err(BadIdentity(text.to_owned())),
        }
    }
}

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
    /// The stored level; [`AccessPolicy::effective_level`] may raise it (configured owners).
    pub level: Level,
    /// This user's own monthly token budget (0 = unlimited); `None` = its level's budget.
    pub budget: Option<u64>,
    pub created_at: DateTime<Utc>,
}

/// A user with everything an operator listing wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSummary {
    pub user: User,
    /// With display names, ordered by channel and id.
    pub identities: Vec<(Identity, String)>,
    /// Tokens used in the month asked for.
    pub used: Usage,
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

    /// Every user with its identities and its usage in `month`, by id.
    async fn list_users(&self, month: &str) -> Result<Vec<UserSummary>, StoreError>;
}
