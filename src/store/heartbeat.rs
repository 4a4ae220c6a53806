//! What heartbeats keep in the store: each agent's next slot and last outcome, and the
//! owners' most recent direct chats. Times are passed in from the injected clock.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_channels::contract::ChatAddress;

use super::StoreError;
use crate::config::Identity;

/// An agent's heartbeat row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatState {
    /// When the next heartbeat is due: the slot a scheduler claims.
    pub next_at: DateTime<Utc>,
    /// When the last slot was used (fired or skipped).
    pub last_at: Option<DateTime<Utc>>,
    /// How it went, as `fired`, `skipped: …`.
    pub last_outcome: Option<String>,
}

/// A claim: move the slot on from `slot` to `next`, recording what this slot did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotClaim<'a> {
    pub agent: &'a str,
    /// The `next_at` the caller read; the claim fails when it changed meanwhile.
    pub slot: DateTime<Utc>,
    pub next: DateTime<Utc>,
    pub now: DateTime<Utc>,
    pub outcome: &'a str,
}

/// The most recent direct chat an owner wrote in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerChat {
    /// `channel:sender_id`.
    pub identity: String,
    pub chat: ChatAddress,
    pub at: DateTime<Utc>,
}

#[async_trait]
pub trait HeartbeatStore: Send + Sync {
    /// The agent's row, created with `first_at` as its next slot if it has none yet.
    async fn heartbeat_state(&self, agent: &str, first_at: DateTime<Utc>) -> Result<HeartbeatState, StoreError>;

    /// Every agent's row, by agent name; read only (no row is created).
    async fn heartbeat_states(&self) -> Result<BTreeMap<String, HeartbeatState>, StoreError>;

    /// Compare-and-set: moves the agent's `next_at` from `claim.slot` to `claim.next` and
    /// records the outcome. `false` (nothing written) when `next_at` is no longer
    /// `claim.slot`: another scheduler claimed the slot first.
    async fn claim_heartbeat_slot(&self, claim: &SlotClaim<'_>) -> Result<bool, StoreError>;

    /// Compare-and-set of the agent's `next_at` alone, from `from` to `to` (a rescheduled
    /// slot, not a used one: `last_at` and `last_outcome` stay). `false` when `next_at` is no
    /// longer `from`.
    async fn move_heartbeat_slot(
        &self,
        agent: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Notes that owner `identity` wrote to `agent` in the direct chat `chat` at `at`; an
    /// older time than the one stored changes nothing.
    async fn record_owner_chat(
        &self,
        agent: &str,
        identity: &Identity,
        chat: &ChatAddress,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// The direct chat any owner wrote to `agent` in most recently.
    async fn latest_owner_chat(&self, agent: &str) -> Result<Option<OwnerChat>, StoreError>;

    /// Every owner's latest direct chat with `agent` (one per owner identity): where a system
    /// message acting for nobody may use the owner's memory.
    async fn owner_chats(&self, agent: &str) -> Result<Vec<OwnerChat>, StoreError>;

    /// Whether a run of the session is `running` and started after `started_after`; an older
    /// one was left behind by a worker that crashed and is not coming back.
    async fn session_has_running_run(
        &self,
        session_key: &str,
        started_after: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
}
