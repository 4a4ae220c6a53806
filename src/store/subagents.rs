//! Sub-agent records (`spawn`): the store's side of [`crate::subagents`].
//!
//! A record goes `queued` → `running` → one of the end states. The worker that runs it holds
//! a lease (`lease_until`) and renews it; a record whose lease ran out belongs to a worker that
//! died, and the reaper ends it as `lost` with a compare-and-set, so exactly one reaper reports
//! it. Every time is passed in by the caller (from its clock), never read here.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_channels::contract::{ChatAddress, Usage};

use super::StoreError;

/// Where a sub-agent is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubagentStatus {
    /// Waiting for a free slot (the global concurrency limit).
    Queued,
    Running,
    Completed,
    Failed,
    /// Ran past its time limit.
    TimedOut,
    /// Stopped by `/stop` or `/new` in its origin session; never announced.
    Cancelled,
    /// Its worker stopped before it finished (the lease ran out).
    Lost,
}

impl SubagentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SubagentStatus::Queued => "queued",
            SubagentStatus::Running => "running",
            SubagentStatus::Completed => "completed",
            SubagentStatus::Failed => "failed",
            SubagentStatus::TimedOut => "timed_out",
            SubagentStatus::Cancelled => "cancelled",
            SubagentStatus::Lost => "lost",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "queued" => SubagentStatus::Queued,
            "running" => SubagentStatus::Running,
            "completed" => SubagentStatus::Completed,
            "failed" => SubagentStatus::Failed,
            "timed_out" => SubagentStatus::TimedOut,
            "cancelled" => SubagentStatus::Cancelled,
            "lost" => SubagentStatus::Lost,
            _ => return None,
        })
    }

    /// Queued or running: it counts against the session's cap and can be cancelled.
    pub fn is_live(self) -> bool {
        matches!(self, SubagentStatus::Queued | SubagentStatus::Running)
    }
}

/// A sub-agent about to be queued.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSubagent {
    pub id: String,
    /// The full session key of the spawning run (with the `<agent>/` prefix if any).
    pub parent_session: String,
    pub parent_agent: String,
    /// Where the result is announced.
    pub chat: ChatAddress,
    /// The parent's isolated session (`metadata.session` of the announcement), if it ran in one.
    pub session: Option<String>,
    pub label: String,
    /// The person the spawning run acted for (`telegram:42`): the announcement's turn gets
    /// their tools and budget. `None` = the owner.
    pub on_behalf_of: Option<String>,
    pub task: String,
    /// The worker instance that runs it.
    pub worker: String,
}

/// A stored sub-agent.
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentRecord {
    pub id: String,
    pub parent_session: String,
    pub parent_agent: String,
    pub chat: ChatAddress,
    pub session: Option<String>,
    pub label: String,
    pub on_behalf_of: Option<String>,
    pub task: String,
    pub status: SubagentStatus,
    pub result: Option<String>,
    pub error: Option<String>,
    pub worker: String,
    pub lease_until: DateTime<Utc>,
    pub cancel_requested: bool,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub announced: bool,
    /// The model usage of its turn; zero until it ended (and for one that never reported any).
    pub usage: Usage,
    /// Its estimated cost; `None` when unknown (a model without a price, or not ended).
    pub cost_usd: Option<f64>,
}

/// What [`SubagentStore::create_subagent`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// Queued.
    Queued,
    /// Not created: the session already has this many queued or running children.
    SessionFull { live: usize },
}

/// What a lease renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Renewed; carry on.
    Renewed,
    /// Renewed, but `/stop` asked (perhaps on another worker) for it to be cancelled.
    CancelRequested,
    /// No longer this worker's live record (a reaper ended it): stop without recording.
    Gone,
}

/// How a sub-agent ended.
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentEnd {
    pub status: SubagentStatus,
    pub result: Option<String>,
    pub error: Option<String>,
    /// The model usage of its turn (zero when the turn was cut off: timed out, cancelled).
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    /// Whose monthly usage `usage` is added to, in the same statement as the end (the person
    /// the sub-agent acted for); `None` for the owner's.
    pub billing: Option<super::users::Billing>,
}

#[async_trait]
pub trait SubagentStore: Send + Sync {
    /// Queues a sub-agent owned by `new.worker` with a lease until `lease_until`, unless its
    /// parent session already has `max_children` queued or running ones. Atomic: two spawns
    /// racing at `max_children - 1` cannot both pass.
    async fn create_subagent(
        &self,
        new: &NewSubagent,
        max_children: usize,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Created, StoreError>;

    /// `queued` → `running` for its worker; `false` (nothing changed) when it is no longer
    /// queued or cancelling it was requested.
    async fn start_subagent(
        &self,
        id: &str,
        worker: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Extends the lease of a live record owned by `worker`.
    async fn renew_subagent_lease(
        &self,
        id: &str,
        worker: &str,
        lease_until: DateTime<Utc>,
    ) -> Result<Renewal, StoreError>;

    /// Ends a live record owned by `worker`. `false` when it was not live and owned (a reaper
    /// ended it first): nothing changed, and the caller must not announce it.
    async fn finish_subagent(
        &self,
        id: &str,
        worker: &str,
        end: &SubagentEnd,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Asks every live child of `parent_session` to stop; returns their ids. The owning worker
    /// sees the request at its next lease renewal.
    async fn request_subagent_cancel(&self, parent_session: &str) -> Result<Vec<String>, StoreError>;

    /// Ends, with a compare-and-set, every live record whose lease ran out before `now`:
    /// `cancelled` when cancelling was requested, else `lost` with `error`. Returns the
    /// records this call ended, so of racing reapers each record goes to exactly one.
    async fn expire_subagent_leases(&self, now: DateTime<Utc>, error: &str) -> Result<Vec<SubagentRecord>, StoreError>;

    /// Ended records with a result to announce (not cancelled) that are not yet marked
    /// announced and ended before `ended_before`, oldest first.
    async fn unannounced_subagents(
        &self,
        ended_before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<SubagentRecord>, StoreError>;

    /// Records that the announcement was published.
    async fn mark_subagent_announced(&self, id: &str) -> Result<(), StoreError>;

    async fn subagent(&self, id: &str) -> Result<Option<SubagentRecord>, StoreError>;

    /// The children of a session, oldest first.
    async fn subagents_of(&self, parent_session: &str) -> Result<Vec<SubagentRecord>, StoreError>;
}
