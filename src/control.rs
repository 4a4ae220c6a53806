//! The owner's operations: approve or deny a stranger's pairing request, decide a tool call
//! waiting for approval, pause, resume or delete a cron job, and who may do each.
//!
//! One implementation for every way an owner acts: the buttons under notifications on the chat
//! platforms, the owner's chat commands, the web console and the command line. Each decision
//! is recorded with who made it (an identity such as `telegram:42`, or `cli`).

mod cron;
mod deciders;
mod desk;
mod pairing;
mod pairing_notice;
mod people;
mod press;

use std::sync::{Arc, PoisonError, RwLock};

use switchboard_channels::bus::Bus;

pub use self::cron::CronChange;
pub use self::deciders::Deciders;
pub use self::desk::Desk;
pub use self::pairing_notice::local_time;
pub use self::people::{LevelChange, Person, PersonMatch};
pub use self::press::{APPROVERS_ONLY, OWNERS_ONLY};
use crate::config::{Config, Level};
use crate::store::StoreError;
use crate::store::approvals::{Approval, DecideProblem, Verdict};
use crate::store::roles::OwnerRecords;

/// The owner's operations over the store, telling the people concerned through the bus.
pub struct Control {
    store: Arc<dyn OwnerRecords>,
    bus: Arc<dyn Bus>,
    deciders: Deciders,
    /// What an approved stranger's user gets at least (`users.approved_level`).
    approved_level: RwLock<Level>,
}

impl Control {
    pub fn new(store: Arc<dyn OwnerRecords>, bus: Arc<dyn Bus>, config: &Config) -> Self {
        let approved_level = RwLock::new(config.users.approved_level);
        Self { store, bus, deciders: Deciders::from_config(config), approved_level }
    }

    /// Takes what a reloaded config says about people: owners, approvers, levels given.
    pub fn reload(&self, config: &Config) {
        self.deciders.reload(config);
        *self.approved_level.write().unwrap_or_else(PoisonError::into_inner) = config.users.approved_level;
    }

    fn approved_level(&self) -> Level {
        *self.approved_level.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Who may decide what.
    pub fn deciders(&self) -> &Deciders {
        &self.deciders
    }

    pub fn store(&self) -> &Arc<dyn OwnerRecords> {
        &self.store
    }

    /// Decides the tool call waiting with `code`; the waiting run sees the decision within a
    /// poll. `Ok(Err(_))` says why it could not be decided (unknown, or no longer open).
    pub async fn decide_approval(
        &self,
        code: &str,
        verdict: Verdict,
        decided_by: &str,
    ) -> Result<Result<Approval, DecideProblem>, StoreError> {
        let decided = self.store.decide_approval(code, verdict, decided_by).await?;
        if decided.is_ok() {
            tracing::info!(%code, verdict = verdict.status().as_str(), %decided_by, "tool call decided");
        }
        Ok(decided)
    }
}
