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
    /// of other senders (so strangers cannot flood the owner's list), or when the owner denied
    /// this sender recently (so they are not asked again).
    async fn request(
        &self,
        channel: &str,
        sender_id: &str,
        sender_name: &str,
        ttl: Duration,
        max_pending: usize,
    ) -> Result<Option<PairingRequest>, PairingError>;
}

/// How often a stranger is shown their (unchanged) pairing code at most.
const REMINDER_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// What a direct message from someone not allowed yet leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingAnswer {
    /// Approved by the owner: treat the message like any allowed one.
    Approved,
    /// Send this text (with the code) to the sender.
    Reply(String),
    /// Say nothing: the code was shown recently, the pending list is full, or the store failed
    /// (logged).
    Silent,
}

/// The adapters' side of pairing: asks the store, decides whether to show the code again, and
/// words the answer. One per channel process.
#[derive(Debug, Default)]
pub struct PairingDesk {
    reminded: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// Whether new requests go to the owner (a control desk is there): the stranger is told so.
    owner_asked: bool,
}

impl PairingDesk {
    /// A desk whose new requests are (`owner_asked`) or are not passed on to the owner.
    pub fn new(owner_asked: bool) -> Self {
        Self { owner_asked, ..Self::default() }
    }

    /// Handles a direct message from `sender_id` on `channel` who is not otherwise allowed; with
    /// the answer, the request when it is new (for the owner's notification).
    pub async fn answer(
        &self,
        store: &dyn PairingStore,
        channel: &str,
        sender_id: &str,
        sender_name: &str,
        ttl: Duration,
        max_pending: usize,
    ) -> (PairingAnswer, Option<PairingRequest>) {
        match store.is_approved(channel, sender_id).await {
            Ok(true) => return (PairingAnswer::Approved, None),
            Ok(false) => {}
            Err(err) => {
                tracing::error!(%err, "cannot check pairing; message not answered");
                return (PairingAnswer::Silent, None);
            }
        }
        let request = store.request(channel, sender_id, sender_name, ttl, max_pending).await;
        // Checked for every request, so that showing a new code also starts the quiet period.
        let due = self.due_for_reminder(channel, sender_id);
        match request {
            Ok(Some(request)) if request.new || due => {
                tracing::info!(
                    sender = sender_id,
                    name = sender_name,
                    "pairing requested: approve with `switchboard pairing approve {channel} {}`",
                    request.code
                );
                let reply = PairingAnswer::Reply(code_message(channel, &request.code, ttl, self.owner_asked));
                (reply, Some(request).filter(|request| request.new))
            }
            Ok(Some(_)) => {
                tracing::debug!(sender = sender_id, "pairing code already shown recently");
                (PairingAnswer::Silent, None)
            }
            Ok(None) => {
                tracing::warn!(
                    sender = sender_id,
                    "no pairing code given: too many pending requests, or the owner denied this sender in the last day"
                );
                (PairingAnswer::Silent, None)
            }
            Err(err) => {
                tracing::error!(%err, "cannot create a pairing code");
                (PairingAnswer::Silent, None)
            }
        }
    }

    fn due_for_reminder(&self, channel: &str, sender_id: &str) -> bool {
        let mut reminded = self.reminded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        reminded.retain(|_, at| now.duration_since(*at) < REMINDER_EVERY);
        let key = format!("{channel}:{sender_id}");
        if reminded.contains_key(&key) {
            return false;
        }
        reminded.insert(key, now);
        true
    }
}

/// The text a stranger gets, with their code and the owner's command (for an owner who
/// prefers the shell, or who was not asked).
fn code_message(channel: &str, code: &str, ttl: Duration, owner_asked: bool) -> String {
    let minutes = ttl.as_secs().div_ceil(60);
    let command = format!("`switchboard pairing approve {channel} {code}`");
    if owner_asked {
        format!(
            "Hi! I only talk to people my owner has approved. I've asked them about you, and I'll let you know \
             when they decide.\n\nYour pairing code: {code} (valid for {minutes} minutes). From a shell, the owner \
             approves it with {command}."
        )
    } else {
        format!(
            "Hi! I only talk to people my owner has approved.\n\nYour pairing code: {code}\n\nSend it to my owner; \
             they approve it with {command}. The code is valid for {minutes} minutes."
        )
    }
}
