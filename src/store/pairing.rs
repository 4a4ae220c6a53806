//! DM pairing codes and the owner's view of pairings, shared by the store backends.
//!
//! The adapters' side is [`switchboard_channels::pairing::PairingStore`]; the owner's
//! operations (approve, list, revoke, pre-approve) are methods of the store itself.

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;
use crate::config::Level;

/// The characters of a pairing code: no 0/O or 1/I look-alikes. 32 of them, so a random byte
/// modulo the length picks each one with equal chance.
pub const CODE_ALPHABET: &[u8; 32] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";

/// Characters in a pairing code: 32^8 = 2^40 possible codes.
pub const CODE_LENGTH: usize = 8;

/// Why the store could not produce random bytes for a code.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the system's random source: {0}")]
pub struct RandomSourceError(pub String);

/// A fresh code from the operating system's cryptographically secure random source.
pub fn generate_code() -> Result<String, RandomSourceError> {
    let mut bytes = [0u8; CODE_LENGTH];
    getrandom::fill(&mut bytes).map_err(|e| RandomSourceError(e.to_string()))?;
    Ok(bytes.iter().map(|b| char::from(CODE_ALPHABET[usize::from(*b) % CODE_ALPHABET.len()])).collect())
}

/// A code as the owner typed it, in the stored form: upper case, without the spaces and
/// dashes people add when copying codes (`abcd-efgh` → `ABCDEFGH`).
pub fn normalize_code(typed: &str) -> String {
    typed.chars().filter(|c| !c.is_whitespace() && *c != '-').map(|c| c.to_ascii_uppercase()).collect()
}

/// Why a code the owner gave cannot be approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeProblem {
    /// No such code on that channel (mistyped, or expired long ago and pruned).
    Unknown,
    /// The code's time ran out before it was approved.
    Expired,
    /// The code was approved already.
    Used,
}

impl fmt::Display for CodeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CodeProblem::Unknown => "is unknown (check for typos; codes are 8 letters and digits)",
            CodeProblem::Expired => "has expired; ask the sender to write again for a new code",
            CodeProblem::Used => "was already used",
        })
    }
}

/// The sender a code belonged to, now approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovedPairing {
    pub channel: String,
    pub sender_id: String,
    pub sender_name: String,
    /// The sender's level now: the approved level, or a higher one they had.
    pub level: Level,
}

/// The sender whose request was denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeniedPairing {
    pub channel: String,
    pub sender_id: String,
    pub sender_name: String,
}

/// What approving a sender by id did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderApproval {
    /// False when the sender was approved already.
    pub added: bool,
    /// The sender's level now: the approved level, or a higher one they had.
    pub level: Level,
}

/// One line of the owner's list: a sender waiting with a code, or an approved one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingEntry {
    pub channel: String,
    pub sender_id: String,
    pub sender_name: String,
    pub state: PairingState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingState {
    Pending { code: String, expires_at: DateTime<Utc> },
    Approved { approved_at: DateTime<Utc> },
}

/// A pairing request the owner decided, as `pairing list --all` and the console list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingDecision {
    pub channel: String,
    pub sender_id: String,
    pub sender_name: String,
    pub code: String,
    /// `approved` or `denied`.
    pub decision: String,
    /// An identity (`telegram:1`, `api:ops`), or `cli`.
    pub decided_by: String,
    pub decided_at: DateTime<Utc>,
}

/// The owner's pairing operations (`switchboard pairing …`), in either store.
#[async_trait]
pub trait PairingAdmin: Send + Sync {
    /// Approves the sender a pending code belongs to, marks the code used and gives the
    /// sender's user at least `level` (`users.approved_level`). `code` may be in any case and
    /// contain spaces or dashes. Fails with [`StoreError::PairingCode`] when the code is
    /// unknown on `channel`, has expired or was used already.
    /// `decided_by` is recorded with the request: an identity, or `cli`.
    async fn approve_pairing(
        &self,
        channel: &str,
        code: &str,
        level: Level,
        decided_by: &str,
    ) -> Result<ApprovedPairing, StoreError>;

    /// Refuses the request `code` belongs to, recording who did; the sender gets no new code
    /// for a day. Fails like [`PairingAdmin::approve_pairing`] when the code is not open.
    async fn deny_pairing(&self, channel: &str, code: &str, decided_by: &str) -> Result<DeniedPairing, StoreError>;

    /// Approves a sender by id, without a code; their valid codes are marked used and their
    /// user gets at least `level`. `added` is false when they were approved already (their
    /// stored name is kept).
    async fn approve_sender(
        &self,
        channel: &str,
        sender_id: &str,
        sender_name: &str,
        level: Level,
    ) -> Result<SenderApproval, StoreError>;

    /// Withdraws a sender's approval; false when they were not approved.
    async fn revoke_pairing(&self, channel: &str, sender_id: &str) -> Result<bool, StoreError>;

    /// Senders waiting with a valid code (soonest to expire first), then approved senders
    /// (oldest first), on `channel` or on every channel.
    async fn list_pairings(&self, channel: Option<&str>) -> Result<Vec<PairingEntry>, StoreError>;

    /// The newest `limit` decisions (approved or denied, by whom, when) of the last
    /// [`KEEP_DECISIONS`], newest first, on `channel` or on every channel.
    async fn pairing_decisions(&self, channel: Option<&str>, limit: usize) -> Result<Vec<PairingDecision>, StoreError>;
}

/// How long a decided request is kept, so the owner can read who decided what. (A denied
/// sender gets no new code for a shorter time: until a day after their code would have
/// expired.)
pub const KEEP_DECISIONS: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 60 * 60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alphabet_has_no_look_alikes_or_repeats() {
        for c in b"01IOl" {
            assert!(!CODE_ALPHABET.contains(c), "{}", char::from(*c));
        }
        let mut sorted = CODE_ALPHABET.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 32);
    }

    #[test]
    fn codes_are_eight_alphabet_characters_and_differ() {
        let first = generate_code().unwrap();
        assert_eq!(first.len(), CODE_LENGTH);
        assert!(first.bytes().all(|b| CODE_ALPHABET.contains(&b)), "{first}");
        assert_ne!(first, generate_code().unwrap());
    }

    #[test]
    fn typed_codes_are_normalized() {
        assert_eq!(normalize_code(" abcd-efgh "), "ABCDEFGH");
        assert_eq!(normalize_code("AB CD EF GH"), "ABCDEFGH");
    }
}
