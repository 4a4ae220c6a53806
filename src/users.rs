//! The rules about users: permission levels and monthly token budgets.
//!
//! A platform identity (`channel` + sender id) belongs to one user; several identities can be
//! linked to the same user. A user has a [`Level`](crate::config::Level) that decides which tools the model is
//! offered, and a monthly token budget (from its level, or its own override). Levels and
//! [identities](crate::config::Identity) are plain values in the config. A group configured
//! under `[users.groups]` raises everyone in it to at least its level there, and may pool a
//! monthly budget for the whole group ([`GroupRules`]). Users are stored
//! behind [`UserStore`](crate::store::users::UserStore), next to the other sub-stores of [`crate::store::Store`].

mod groups;
mod identities;
mod month;
mod policy;

pub use groups::{BadGroup, GroupPlace, GroupRule, GroupRules};
pub use identities::{unconfigured_channel, unusable_identity};
pub use month::{month_key, next_month_start};
pub use policy::{AccessPolicy, Clock, PolicyError};
