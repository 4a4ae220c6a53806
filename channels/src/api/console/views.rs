//! What the console's routes answer and take: plain serializable views, filled by the daemon's
//! [`super::desk::ConsoleDesk`]. Times are UTC (RFC 3339) with, where a person reads them, the
//! same time written in the owner's time zone.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// `GET /v1/admin/people`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct People {
    pub people: Vec<Person>,
    /// Pairing requests waiting for the owner, oldest first.
    pub pending: Vec<PairingRequestItem>,
    /// Pairing requests decided in the last 30 days, newest first.
    pub decisions: Vec<PairingDecisionItem>,
    /// The levels a person can be given, lowest first.
    pub levels: Vec<String>,
}

/// A person (a user, with every identity linked to it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Person {
    pub user_id: i64,
    /// The name their newest identity goes by, or their first identity.
    pub name: String,
    /// The level they act with (a configured owner acts as owner whatever is stored).
    pub level: String,
    /// Listed in `users.owners`: their level cannot be lowered from here.
    pub configured_owner: bool,
    pub identities: Vec<IdentityItem>,
    /// Input and output tokens this month (UTC).
    pub tokens_this_month: u64,
    /// When their newest run started, if switchboard recorded one.
    pub last_active: Option<DateTime<Utc>>,
}

/// One of a person's identities.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdentityItem {
    /// `channel:sender_id`.
    pub identity: String,
    pub name: String,
    /// Allowed to write in direct messages by an approved pairing.
    pub paired: bool,
}

/// A stranger's pairing request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairingRequestItem {
    pub channel: String,
    pub code: String,
    pub sender_id: String,
    pub name: String,
    pub expires_at: DateTime<Utc>,
    /// `expires_at` in the owner's time zone.
    pub expires: String,
}

/// A pairing request the owner decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairingDecisionItem {
    pub channel: String,
    pub code: String,
    pub sender_id: String,
    pub name: String,
    /// `approved` or `denied`.
    pub decision: String,
    /// An identity (`telegram:1`, `api:ops`), or `cli`.
    pub decided_by: String,
    pub decided_at: DateTime<Utc>,
    /// `decided_at` in the owner's time zone.
    pub decided: String,
}

/// What a decision or an operation did, in a sentence for the owner.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decided {
    /// `approved`, `denied`, `allowed`, `paused`, `resumed`, `deleted`, `requested`, …
    pub outcome: String,
    pub message: String,
}

/// A tool call that waits, or waited, for an approver.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalItem {
    pub code: String,
    /// `pending`, `allowed`, `denied`, `expired` or `cancelled`.
    pub status: String,
    pub tool: String,
    /// Shortened, secrets redacted.
    pub arguments: String,
    pub requested_by: String,
    /// `channel:chat_id`.
    pub chat: String,
    pub session_key: String,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// An allowed call's scope: `once` or `chat`.
    pub scope: String,
    pub decided_by: String,
    pub decided_at: Option<DateTime<Utc>>,
    pub reason: String,
}

/// `GET /v1/admin/cron`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleView {
    /// The owner's time zone, the one local times are written in and new jobs default to.
    pub timezone: String,
    pub jobs: Vec<CronJobItem>,
    pub heartbeats: Vec<HeartbeatItem>,
    /// The agents a job may run under, the default first.
    pub agents: Vec<String>,
}

/// A cron job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CronJobItem {
    pub id: String,
    pub name: String,
    /// `active`, `paused` or `done` (its schedule has no run left).
    pub state: String,
    /// `turn`, `isolated` or `reminder`.
    pub kind: String,
    /// The schedule in words.
    pub schedule: String,
    /// Where results go, as a session key.
    pub to: String,
    pub agent: String,
    pub message: String,
    /// The job's own time zone.
    pub tz: String,
    pub next_run_at: Option<DateTime<Utc>>,
    /// `next_run_at` in the owner's time zone.
    pub next_run: Option<String>,
    pub last_run_at: Option<DateTime<Utc>>,
    pub last_run: Option<String>,
    pub last_status: Option<String>,
    pub last_error: Option<String>,
    pub created_by: String,
}

/// An agent's heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeartbeatItem {
    pub agent: String,
    pub every_minutes: u64,
    /// `owner`, or the chat it writes to.
    pub target: String,
    /// `08:00–22:00` in its zone; none: at any time.
    pub active_hours: Option<String>,
    pub next_at: Option<DateTime<Utc>>,
    pub next: Option<String>,
    pub last_at: Option<DateTime<Utc>>,
    pub last: Option<String>,
    /// `fired`, or why the slot was skipped.
    pub last_outcome: Option<String>,
}

/// The body of `POST /v1/admin/cron`: one of `at`, `every`, `cron`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NewCronJob {
    /// Where results go, written like a session key (`telegram:-100123`, `api:me`).
    pub to: String,
    /// What the agent is asked to do, or the reminder's text.
    pub message: String,
    /// Once: `+1h`, `2026-12-01 09:00` (in `tz`) or RFC 3339.
    pub at: Option<String>,
    /// Repeatedly: `15m`, `2h`, `1d`.
    pub every: Option<String>,
    /// A crontab expression.
    pub cron: Option<String>,
    /// IANA time zone; default: the owner's.
    pub tz: Option<String>,
    /// `turn` (default), `reminder` (the message as is, no model) or `isolated`.
    pub kind: Option<String>,
    pub name: Option<String>,
    pub agent: Option<String>,
    /// Runs missed while switchboard was down: `run_once` (default) or `skip`.
    pub missed: Option<String>,
}

/// The days `GET /v1/admin/usage` reports: the last `days`, today included, in the owner's
/// time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsagePeriod {
    pub days: u32,
}

/// `GET /v1/admin/usage`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageReport {
    pub timezone: String,
    /// The first and last day, `YYYY-MM-DD`.
    pub from: String,
    pub to: String,
    /// Every day of the period, oldest first (days without runs too).
    pub days: Vec<DayUsage>,
    /// Everyone who had runs, most tokens first; `user_id` none: runs billed to nobody.
    pub people: Vec<PersonUsage>,
    pub total: UsageTotals,
}

/// Finished model runs and what they used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct UsageTotals {
    pub runs: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, served from the provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Known costs in USD.
    pub cost_usd: f64,
    /// Runs of a model without a price, not in `cost_usd`.
    pub unpriced_runs: u64,
}

impl UsageTotals {
    pub fn add(&mut self, other: &UsageTotals) {
        self.runs += other.runs;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cost_usd += other.cost_usd;
        self.unpriced_runs += other.unpriced_runs;
    }

    /// Input and output tokens.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// One day's usage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DayUsage {
    /// `YYYY-MM-DD` in the owner's time zone.
    pub day: String,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// One person's usage over the period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PersonUsage {
    pub user_id: Option<i64>,
    pub name: String,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// A `switchboard doctor` check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthCheck {
    /// `ok`, `warn`, `fail` or `skip`.
    pub status: String,
    pub check: String,
    pub detail: String,
    /// What to do about a failure or warning.
    pub fix: Option<String>,
}
