//! DM pairing: who may talk to the bot in direct messages.
//!
//! An unknown sender who writes to the bot in a direct message gets a one-time code from
//! [`PairingStore::request`] and is told to pass it to the owner, who approves it on the
//! command line (`switchboard pairing approve telegram CODE`). Adapters ask
//! [`PairingStore::is_approved`] before forwarding a direct message to the bus. The store
//! behind this trait lives in the daemon crate, next to its other tables.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use thiserror::Error;

/// Why a pairing operation failed.
#[derive(Debug, Error)]
pub enum PairingError {
    /// The backing store failed (I/O, a locked or corrupt database); the message says how.
    #[error("pairing store: {0}")]
    Store(String),
}

/// A pending pairing: the code the user is shown and when it stops working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingRequest {
    pub code: String,
    pub expires_at: DateTime<Utc>,
    /// false when an earlier, still valid code was returned again
    pub new: bool,
}

/// Who may talk to the bot in direct messages, as approved by the owner.
#[async_trait]
pub trait PairingStore: Send + Sync {
    /// Whether `sender_id` on `channel` was approved (and not revoked).
    async fn is_approved(&self, channel: &str, sender_id: &str) -> Result<bool, PairingError>;

    /// The sender's pending code: the still-valid one if any (new = false), else a fresh one
    /// valid for `ttl`. Returns Ok(None) when the channel already has `max_pending` valid codes
    /// of other senders (so strangers cannot flood the owner's list).
    async fn request(
        &self,
        channel: &str,
        sender_id: &str,
        sender_name: &str,
        ttl: Duration,
        max_pending: usize,
    ) -> Result<Option<PairingRequest>, PairingError>;
}
