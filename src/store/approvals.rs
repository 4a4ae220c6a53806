//! Tool calls that wait for an approver (`[approvals]`), and every decision on them: who asked,
//! for what, who decided what and when, on both stores (`migrations/*/…_approvals.sql`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalStatus {
    Pending,
    Allowed,
    Denied,
    /// Nobody decided in time, or switchboard restarted while it waited.
    Expired,
    /// The run it belonged to was stopped (`/stop`).
    Cancelled,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }
}

impl FromStr for ApprovalStatus {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, StoreError> {
        [Self::Pending, Self::Allowed, Self::Denied, Self::Expired, Self::Cancelled]
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| StoreError::Corrupt(format!("approval status {text:?}")))
    }
}

/// What an approver decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// This call runs.
    AllowOnce,
    /// This call runs, and every later call of the same tool in the same chat without asking.
    AllowChat,
    Deny,
}

impl Verdict {
    pub fn status(self) -> ApprovalStatus {
        match self {
            Self::AllowOnce | Self::AllowChat => ApprovalStatus::Allowed,
            Self::Deny => ApprovalStatus::Denied,
        }
    }

    /// The scope stored with an allowed call.
    fn scope(self) -> &'static str {
        match self {
            Self::AllowOnce => "once",
            Self::AllowChat => "chat",
            Self::Deny => "",
        }
    }
}

/// A call to ask about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApproval {
    pub run_id: String,
    pub session_key: String,
    pub channel: String,
    pub chat_id: String,
    pub tool: String,
    /// As shown to the approver: shortened, secrets redacted.
    pub arguments: String,
    /// The identity the run acts for (`telegram:42`).
    pub requested_by: String,
}

/// A stored approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub code: String,
    pub request: NewApproval,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub status: ApprovalStatus,
    /// `once` or `chat` for an allowed call; empty otherwise.
    pub scope: String,
    pub decided_by: String,
    pub decided_at: Option<DateTime<Utc>>,
    pub reason: String,
}

/// Why a decision was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecideProblem {
    Unknown,
    /// Decided, expired or cancelled already.
    Closed(ApprovalStatus),
}

impl fmt::Display for DecideProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown => f.write_str("is unknown; `switchboard approvals list` shows the open ones"),
            Self::Closed(status) => write!(f, "is no longer open (it is {})", status.as_str()),
        }
    }
}

/// The approvals of the store.
#[async_trait]
pub trait ApprovalStore: Send + Sync {
    /// Records a pending approval that expires after `timeout`; returns it with its code.
    async fn request_approval(&self, request: &NewApproval, timeout: Duration) -> Result<Approval, StoreError>;

    async fn approval(&self, code: &str) -> Result<Option<Approval>, StoreError>;

    /// Decides a pending approval (an allow for the chat also grants the tool there from now
    /// on). `Ok(Err(_))` says why it could not be decided.
    async fn decide_approval(
        &self,
        code: &str,
        verdict: Verdict,
        decided_by: &str,
    ) -> Result<Result<Approval, DecideProblem>, StoreError>;

    /// Closes a pending approval as `status` (expired or cancelled) with `reason`; false when it
    /// was no longer pending.
    async fn close_approval(&self, code: &str, status: ApprovalStatus, reason: &str) -> Result<bool, StoreError>;

    /// Whether `tool` was allowed for the whole chat `session_key`.
    async fn chat_grant(&self, session_key: &str, tool: &str) -> Result<bool, StoreError>;

    /// The newest approvals, the open ones only when `pending_only`.
    async fn list_approvals(&self, pending_only: bool, limit: usize) -> Result<Vec<Approval>, StoreError>;

    /// Closes the pending approvals of run `run_id` as expired with `reason`, returning the
    /// newest of them: a run taken up again after a restart no longer waits for them.
    async fn close_run_approvals(&self, run_id: &str, reason: &str) -> Result<Option<Approval>, StoreError>;
}

/// The reason stored on approvals a start closed.
pub const RESTART_REASON: &str = "switchboard restarted while it waited";

pub(super) fn verdict_scope(verdict: Verdict) -> &'static str {
    verdict.scope()
}
