//! Cron jobs and their run history, shared by the store backends.
//!
//! Exactly-once firing rests on [`CronStore::claim_cron_run`]: it moves a job's `next_run_at`
//! from the value a scheduler read to the next one and records the occurrence in one
//! transaction, so of two schedulers that read the same value only one gets
//! [`CronClaim::Claimed`]. Times are always passed in (from the injected clock).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_channels::contract::ChatAddress;

use super::StoreError;
use super::pairing::RandomSourceError;
use crate::schedule::Schedule;

/// What a job does when it fires.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Payload {
    /// An agent turn in the session that created the job.
    #[default]
    Turn,
    /// An agent turn in the job's own session `cron:<id>`, replying to the job's chat.
    Isolated,
    /// The message delivered verbatim, without the model.
    Reminder,
}

impl Payload {
    pub fn as_str(self) -> &'static str {
        match self {
            Payload::Turn => "turn",
            Payload::Isolated => "isolated",
            Payload::Reminder => "reminder",
        }
    }

    pub fn parse(text: &str) -> Option<Payload> {
        match text {
            "turn" => Some(Payload::Turn),
            "isolated" => Some(Payload::Isolated),
            "reminder" => Some(Payload::Reminder),
            _ => None,
        }
    }
}

/// What happens to runs that fell due while no scheduler was running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MissedPolicy {
    /// One run now, saying it is late and how many runs were missed.
    #[default]
    RunOnce,
    /// No run; the history says how many were skipped.
    Skip,
}

impl MissedPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            MissedPolicy::RunOnce => "run_once",
            MissedPolicy::Skip => "skip",
        }
    }

    pub fn parse(text: &str) -> Option<MissedPolicy> {
        match text {
            "run_once" => Some(MissedPolicy::RunOnce),
            "skip" => Some(MissedPolicy::Skip),
            _ => None,
        }
    }
}

/// A job to add; the store gives it its id.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCronJob {
    pub name: String,
    pub agent: String,
    /// The session that created the job (with its `<agent>/` prefix); it owns the job.
    pub owner_session: String,
    /// Where results go.
    pub chat: ChatAddress,
    pub payload: Payload,
    pub message: String,
    pub schedule: Schedule,
    /// The IANA zone the job's times are shown in (and cron expressions run in).
    pub tz: String,
    pub missed: MissedPolicy,
    /// The first run; `None` = never (not useful, but not an error either).
    pub next_run_at: Option<DateTime<Utc>>,
    pub created_by_id: String,
    pub created_by_name: String,
    pub created_at: DateTime<Utc>,
    /// 0 when a person made the job; the parent job's + 1 when a cron turn made it.
    pub generation: u32,
    pub parent_job: Option<String>,
    /// The agent run that called the tool (none from the command line).
    pub created_by_run: Option<String>,
    /// The person the job's runs act for (`telegram:42`), with their tools and budget;
    /// `None` = the owner (jobs from the command line).
    pub on_behalf_of: Option<String>,
}

/// A stored job.
#[derive(Debug, Clone, PartialEq)]
pub struct CronJob {
    pub id: String,
    pub enabled: bool,
    pub last_run_at: Option<DateTime<Utc>>,
    pub last_status: Option<String>,
    pub last_error: Option<String>,
    /// When `switchboard cron run` asked for a run now; cleared when it fires.
    pub run_requested_at: Option<DateTime<Utc>>,
    pub job: NewCronJob,
}

impl CronJob {
    /// Finished: it will never fire again (an `at` job that fired).
    pub fn is_finished(&self) -> bool {
        self.job.next_run_at.is_none()
    }
}

/// Limits [`CronStore::add_cron_job`] checks in the same transaction as the insert, so
/// parallel tool calls cannot overrun them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddLimits {
    /// Unfinished jobs the owner session may have.
    pub max_per_session: usize,
    /// Jobs `created_by_run` may have made; `None` = no limit (a person's run).
    pub max_per_run: Option<usize>,
}

/// What [`CronStore::add_cron_job`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum AddOutcome {
    Added(Box<CronJob>),
    /// The session has this many unfinished jobs already.
    SessionFull(usize),
    /// The run has made this many jobs already.
    RunFull(usize),
}

/// The state of one occurrence in the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronRunStatus {
    /// Claimed; its message may not be published yet.
    Pending,
    /// Published on the bus.
    Fired,
    Completed,
    Failed,
    /// Not run (missed while down, policy `skip`).
    Missed,
}

impl CronRunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CronRunStatus::Pending => "pending",
            CronRunStatus::Fired => "fired",
            CronRunStatus::Completed => "completed",
            CronRunStatus::Failed => "failed",
            CronRunStatus::Missed => "missed",
        }
    }

    pub fn parse(text: &str) -> Option<CronRunStatus> {
        [Self::Pending, Self::Fired, Self::Completed, Self::Failed, Self::Missed]
            .into_iter()
            .find(|status| status.as_str() == text)
    }
}

/// One occurrence to record with a claim.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCronRun {
    pub scheduled_for: DateTime<Utc>,
    /// The system message's id; `None` for a missed occurrence (nothing is published).
    pub inbound_id: Option<String>,
    pub status: CronRunStatus,
    pub note: String,
    /// When the claim was made (the scheduler's now).
    pub at: DateTime<Utc>,
}

/// One row of a job's history.
#[derive(Debug, Clone, PartialEq)]
pub struct CronRun {
    pub job_id: String,
    pub scheduled_for: DateTime<Utc>,
    pub inbound_id: Option<String>,
    pub claimed_at: DateTime<Utc>,
    pub fired_at: Option<DateTime<Utc>>,
    pub status: CronRunStatus,
    pub note: String,
    pub error: Option<String>,
}

/// The result of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronClaim {
    Claimed,
    /// Another scheduler claimed this occurrence first (or the job changed since it was read).
    AlreadyClaimed,
}

#[async_trait]
pub trait CronStore: Send + Sync {
    /// Adds a job with a fresh id, unless a limit is reached.
    async fn add_cron_job(&self, job: &NewCronJob, limits: AddLimits) -> Result<AddOutcome, StoreError>;

    async fn cron_job(&self, id: &str) -> Result<Option<CronJob>, StoreError>;

    /// The jobs `owner_session` owns, or every job when `None`, oldest first.
    async fn cron_jobs(&self, owner_session: Option<&str>) -> Result<Vec<CronJob>, StoreError>;

    /// Deletes the job and its history; false when there is no such job (of that owner).
    async fn remove_cron_job(&self, id: &str, owner_session: Option<&str>) -> Result<bool, StoreError>;

    /// Pauses (`enabled = false`) or resumes a job; on resume `next_run_at` replaces the
    /// stored one (runs due while paused are not made up). False when there is no such job.
    async fn set_cron_enabled(
        &self,
        id: &str,
        owner_session: Option<&str>,
        enabled: bool,
        next_run_at: Option<DateTime<Utc>>,
    ) -> Result<bool, StoreError>;

    /// Enabled jobs whose `next_run_at` is at or before `now`.
    async fn due_cron_jobs(&self, now: DateTime<Utc>) -> Result<Vec<CronJob>, StoreError>;

    /// Jobs with a run-now request.
    async fn requested_cron_jobs(&self) -> Result<Vec<CronJob>, StoreError>;

    /// Records a run-now request; false when there is no such job.
    async fn request_cron_run(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Claims one scheduled occurrence: compare-and-set `next_run_at` from `expected` to
    /// `next`, set `last_run_at`/`last_status`, and insert `run` into the history (pruned to
    /// `history_limit` rows), all in one transaction.
    async fn claim_cron_run(
        &self,
        job_id: &str,
        expected: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        run: &NewCronRun,
        history_limit: usize,
    ) -> Result<CronClaim, StoreError>;

    /// Claims a run-now request: clears `run_requested_at` if it is still `requested` and
    /// inserts `run`, in one transaction.
    async fn claim_cron_request(
        &self,
        job_id: &str,
        requested: DateTime<Utc>,
        run: &NewCronRun,
        history_limit: usize,
    ) -> Result<CronClaim, StoreError>;

    /// Claimed occurrences whose message may not have been published yet.
    async fn pending_cron_runs(&self) -> Result<Vec<CronRun>, StoreError>;

    /// Marks a pending occurrence published.
    async fn mark_cron_fired(&self, inbound_id: &str, at: DateTime<Utc>) -> Result<(), StoreError>;

    /// Records how the run of an occurrence ended, on its history row and on its job.
    async fn finish_cron_run(
        &self,
        job_id: &str,
        inbound_id: &str,
        failed: bool,
        error: Option<&str>,
    ) -> Result<(), StoreError>;

    /// The job's most recent history rows, newest first.
    async fn cron_history(&self, job_id: &str, limit: usize) -> Result<Vec<CronRun>, StoreError>;
}

/// A fresh job id: 8 lowercase hex characters from the OS's secure random source.
pub fn generate_job_id() -> Result<String, RandomSourceError> {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).map_err(|e| RandomSourceError(e.to_string()))?;
    Ok(switchboard_channels::hex::hex(&bytes))
}
