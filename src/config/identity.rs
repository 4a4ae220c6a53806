//! Who people are and what they may do: a platform identity (`telegram:123`) and the
//! permission [`Level`] of its user. Plain values used from the config (owners, per-tool
//! levels) up to the worker, so they live on the ground floor.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

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
    /// Honours width and alignment, so levels line up in tables (`{:<7}`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
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
