//! Who may decide: owners decide pairing requests and cron jobs; approvers (`[approvals]
//! approvers`, by default the owners) decide tool calls.

use std::collections::BTreeSet;
use std::sync::{PoisonError, RwLock};

use crate::config::{Config, Identity, Level};
use crate::store::StoreError;
use crate::store::users::UserStore;

/// The identities named in the config, replaced whole on reload.
#[derive(Debug, Default)]
pub struct Deciders {
    named: RwLock<Named>,
}

#[derive(Debug, Default, Clone)]
struct Named {
    /// In the config's order: the first on a channel is the one told about strangers.
    owners: Vec<Identity>,
    /// Empty: the owners decide.
    approvers: BTreeSet<Identity>,
    /// The level a user first seen gets (so a lookup creates them as a message would).
    new_user_level: Level,
}

impl Deciders {
    pub fn from_config(config: &Config) -> Self {
        let deciders = Self::default();
        deciders.reload(config);
        deciders
    }

    /// Takes the owners and approvers of a reloaded config.
    pub fn reload(&self, config: &Config) {
        // The config was validated at load: every entry is an identity.
        let named = Named {
            owners: config.users.owners.iter().filter_map(|owner| owner.parse().ok()).collect(),
            approvers: config.approvals.approvers.iter().filter_map(|approver| approver.parse().ok()).collect(),
            new_user_level: config.users.default_level,
        };
        *self.named.write().unwrap_or_else(PoisonError::into_inner) = named;
    }

    fn named(&self) -> Named {
        self.named.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// An owner: named in `users.owners`, or raised to owner in the store (`/level`, the CLI).
    /// `name` is the person's display name, kept as a message of theirs would keep it.
    pub async fn is_owner(&self, store: &dyn UserStore, identity: &Identity, name: &str) -> Result<bool, StoreError> {
        let named = self.named();
        if named.owners.contains(identity) {
            return Ok(true);
        }
        Ok(store.resolve_user(identity, name, named.new_user_level).await?.level == Level::Owner)
    }

    /// May decide tool calls waiting for approval.
    pub async fn is_approver(
        &self,
        store: &dyn UserStore,
        identity: &Identity,
        name: &str,
    ) -> Result<bool, StoreError> {
        let named = self.named();
        if named.approvers.is_empty() {
            return self.is_owner(store, identity, name).await;
        }
        Ok(named.approvers.contains(identity))
    }

    /// The owners named in the config on `channel`, in the config's order.
    pub fn named_owners_on(&self, channel: &str) -> Vec<Identity> {
        self.named().owners.into_iter().filter(|owner| owner.channel == channel).collect()
    }

    /// Every owner named in the config (`users.owners`): owners whatever the store says.
    pub fn named_owners(&self) -> Vec<Identity> {
        self.named().owners
    }

    /// The level a person first seen gets (`users.default_level`).
    pub fn new_user_level(&self) -> Level {
        self.named().new_user_level
    }
}
