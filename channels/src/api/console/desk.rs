//! What the console asks of the daemon. The daemon crate implements [`ConsoleDesk`] on its
//! store, its config and the owner's operations the chat buttons use, so a decision taken in
//! the browser is the same decision as one taken in a chat.

use async_trait::async_trait;
use thiserror::Error;

use super::views::{
    ApprovalItem, CronJobItem, Decided, HealthCheck, NewCronJob, People, Person, ScheduleView, UsagePeriod, UsageReport,
};

/// Why a console operation did nothing.
#[derive(Debug, Error)]
pub enum ConsoleError {
    /// No such person, request, approval or job.
    #[error("{0}")]
    NotFound(String),
    /// The request cannot be done as asked (a bad level, schedule or chat).
    #[error("{0}")]
    Invalid(String),
    /// The request was decided, or expired, before this one.
    #[error("{0}")]
    NoLongerOpen(String),
    /// The store or another service failed; the message is for the log.
    #[error("{0}")]
    Failed(String),
}

/// A decision of the tool approval waiting under a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalDecision {
    AllowOnce,
    /// Allow it and every later call of the same tool in the same chat.
    AllowChat,
    Deny,
}

/// What may be done to a cron job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronAction {
    Pause,
    Resume,
    Delete,
    /// Fire it now, whatever its schedule (the running scheduler picks the request up).
    RunNow,
}

/// The daemon's side of the console. `by` names who acts (`api:<token identity>`), as the
/// decisions record it.
#[async_trait]
pub trait ConsoleDesk: Send + Sync {
    /// Every person with their level, and the pairing requests waiting.
    async fn people(&self) -> Result<People, ConsoleError>;

    /// Sets the level of the person `identity` (`channel:sender_id`) belongs to.
    async fn set_level(&self, identity: &str, level: &str, by: &str) -> Result<Person, ConsoleError>;

    /// Approves (or denies) the pairing request `code` on `channel`; the stranger is told.
    async fn decide_pairing(&self, channel: &str, code: &str, approve: bool, by: &str)
    -> Result<Decided, ConsoleError>;

    /// The tool calls waiting for a decision, then the newest decisions.
    async fn approvals(&self) -> Result<Vec<ApprovalItem>, ConsoleError>;

    /// Decides the waiting tool call `code`.
    async fn decide_approval(&self, code: &str, decision: ApprovalDecision, by: &str) -> Result<Decided, ConsoleError>;

    /// Every cron job and every agent's heartbeat, with times in the owner's time zone.
    async fn schedule(&self) -> Result<ScheduleView, ConsoleError>;

    /// Adds a cron job.
    async fn add_cron_job(&self, job: &NewCronJob, by: &str) -> Result<CronJobItem, ConsoleError>;

    /// Pauses, resumes, deletes or runs the cron job `id`.
    async fn cron_action(&self, id: &str, action: CronAction, by: &str) -> Result<Decided, ConsoleError>;

    /// Tokens and cost per day and per person over `period`.
    async fn usage(&self, period: UsagePeriod) -> Result<UsageReport, ConsoleError>;

    /// The checks `switchboard doctor` makes.
    async fn health(&self) -> Result<Vec<HealthCheck>, ConsoleError>;
}
