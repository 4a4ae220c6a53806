//! Persistence: sessions, the append-only transcript, and runs.
//!
//! Callers see only the [`Store`] trait and its companions, together [`Database`];
//! [`sqlite::SqliteStore`] is the embedded backend (one file) and [`postgres::PostgresStore`]
//! the shared one (one database for every process on every host), chosen by [`open`]. The `runs` table has a unique inbound id, so a
//! redelivered message never produces a second run or reply.

pub mod approvals;
pub mod cron;
mod finish_rule;
mod finishing;
pub mod heartbeat;
mod history_cache;
mod journal;
pub mod lock;
pub mod memory_index;
mod migrate;
pub mod pairing;
pub mod postgres;
pub mod roles;
mod shared;
pub mod sqlite;
pub mod subagents;
pub mod usage;
pub mod users;
mod values;
pub mod windows;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_channels::api::store::ApiStore;
use switchboard_channels::bus::journal::{Journal, JournalRecord};
use switchboard_channels::contract::{OutboundMessage, Usage};
use switchboard_channels::delivery::DeliveryRecord;
use switchboard_channels::pairing::PairingStore;
use thiserror::Error;

use self::cron::CronStore;
use self::heartbeat::HeartbeatStore;
use self::memory_index::MemoryIndex;
use self::pairing::{CodeProblem, PairingAdmin, RandomSourceError};
use self::roles::OwnerRecords;
use self::subagents::SubagentStore;
use self::usage::UsageLedger;
use self::users::{Billing, UserStore};
use self::windows::WindowStore;
use crate::config::{QueueMode, StoreConfig};
use crate::provider::ChatMessage;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("cannot open the database at {path}: {reason}")]
    Open { path: String, reason: String },
    /// The database opened but refuses writes (a file or directory owned by another user, a
    /// read-only mount): found at start, not at the first message.
    #[error(
        "the database at {path} is not writable: {reason}. Check that the file, its directory and its -wal and -shm \
         files belong to the user switchboard runs as"
    )]
    NotWritable { path: String, reason: String },
    #[error("cannot take the lock {path}: {source}")]
    Lock {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Another process holds a conflicting [`lock::StoreLock`].
    #[error(
        "the database {database} is in use by another switchboard process{}: stop it, or give this one another \
         data dir (or store.database_url). `switchboard run` on the in-process bus needs the database to itself; \
         only workers on a NATS bus share one (lock: {lock})",
        holder_list(holders)
    )]
    InUse { database: String, lock: String, holders: Vec<u32> },
    /// The PostgreSQL lock's connection ended and, before this process could take the lock
    /// back, another process took it (see [`lock::KeptLock`]).
    #[error(
        "lost the lock on the database {database} (its connection to PostgreSQL ended) and another switchboard \
         process took it meanwhile{}: this one stops so that two never work on one database. Stop the other process \
         (pg_stat_activity shows its lock connection as application_name '{}') or give this one another database, \
         then start it again",
        backend_list(holders),
        lock::LOCK_APPLICATION
    )]
    LockLost { database: String, holders: Vec<i32> },
    #[error("the task keeping the database lock failed: {0}")]
    LockKeeper(String),
    #[error("database migration {version} failed: {reason}")]
    Migrate { version: i64, reason: String },
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A write grouped with others (`sqlite::grouped`) failed; every write of its group did.
    #[error("database error: {0}")]
    Grouped(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("run {0} does not exist")]
    NoSuchRun(String),
    #[error("session {0} does not exist")]
    NoSuchSession(String),
    /// `finish_run` was refused and wrote nothing: the run already finished (another worker
    /// resumed and finished it first), or the outcome's status was still `Running`.
    #[error("cannot finish run {run_id}: {reason}")]
    Finish { run_id: String, reason: String },
    /// The owner tried to approve a pairing code that cannot be approved.
    #[error("{channel} pairing code {code} {problem}")]
    PairingCode { channel: String, code: String, problem: CodeProblem },
    #[error(transparent)]
    Random(#[from] RandomSourceError),
}

/// ` (pid 42)`, ` (pids 42, 43)`, or nothing when the holders are unknown.
fn holder_list(pids: &[u32]) -> String {
    let list = pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    match pids.len() {
        0 => String::new(),
        1 => format!(" (pid {list})"),
        _ => format!(" (pids {list})"),
    }
}

/// ` (PostgreSQL backend pid 42)`, or nothing when none is known.
fn backend_list(pids: &[i32]) -> String {
    let list = pids.iter().map(i32::to_string).collect::<Vec<_>>().join(", ");
    match pids.len() {
        0 => String::new(),
        1 => format!(" (PostgreSQL backend pid {list})"),
        _ => format!(" (PostgreSQL backend pids {list})"),
    }
}

/// What a worker should do with an inbound message, decided atomically by [`RunStore::claim_run`].
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "one claim per inbound message; boxing the reply would only change callers' code"
)]
pub enum RunClaim {
    /// First time this inbound id is seen: a run was created; go ahead.
    New { run_id: String },
    /// A run for this inbound id was started before but never finished (its worker died):
    /// it was taken over; run it again from the start.
    Resumed { run_id: String, attempt: u32 },
    /// The run already finished. If its reply was never marked delivered, deliver `reply`
    /// (the same message, same id) and mark it; otherwise there is nothing to do.
    Finished { run_id: String, reply: Option<OutboundMessage>, delivered: bool },
}

/// Final state of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Running,
    Completed,
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
        }
    }
}

/// What a finished run leaves behind.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub status: RunStatus,
    /// Messages to append to the session's transcript (user message first), atomically.
    pub transcript: Vec<ChatMessage>,
    /// The reply to deliver, if any (none for suppressed replies).
    pub reply: Option<OutboundMessage>,
    pub error: Option<String>,
    pub usage: Usage,
    pub model: String,
    /// Estimated cost in USD; `None` when unknown.
    pub cost_usd: Option<f64>,
    pub iterations: u32,
    /// What the conversation weighed after the run: its last model call's input and output
    /// tokens (0 when no model was called).
    pub context_tokens: u64,
    /// Whose monthly usage `usage` is added to, in the same transaction; `None` for runs that
    /// count against no user (system messages).
    pub billing: Option<Billing>,
    /// The memory scope the run was in (`<agent>/<scope>`, see
    /// [`crate::workspace::memory::MemoryScope::label`]), kept with its transcript rows so
    /// memory search finds them in that scope only; `None`: never searched.
    pub memory_scope: Option<String>,
}

impl RunOutcome {
    /// A run that called no model (a command, a notice, a run ended before its turn): nothing
    /// for the transcript, no usage, billed to nobody.
    pub fn without_model(status: RunStatus, reply: Option<OutboundMessage>, error: Option<String>) -> Self {
        Self {
            status,
            transcript: Vec::new(),
            reply,
            error,
            usage: Usage::default(),
            model: String::new(),
            cost_usd: None,
            iterations: 0,
            context_tokens: 0,
            billing: None,
            memory_scope: None,
        }
    }

    /// Answered without a model: `reply` (a notice, a reminder's text) is all of it.
    pub fn answered(reply: OutboundMessage) -> Self {
        Self::without_model(RunStatus::Completed, Some(reply), None)
    }

    /// Failed with `error` without a model's answer; the chat is told `notice`, if any.
    pub fn failed(error: String, notice: Option<OutboundMessage>) -> Self {
        Self::without_model(RunStatus::Failed, notice, Some(error))
    }
}

/// A session's history and summary, as a turn reads them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    /// The newest messages not covered by the summary, oldest first.
    pub history: Vec<ChatMessage>,
    /// The summary of older messages.
    pub summary: Option<HistorySummary>,
}

/// A session's row as a turn reads it before its history: the history version (which every
/// change to what the history shows increments) and the summary. Read with the session's
/// settings when its task starts ([`SessionStore::session_start`]), it spares a turn that
/// starts right after reading it again ([`SessionStore::conversation_from`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionHead {
    /// `false`: the session had no row yet, so no history and no summary.
    pub(in crate::store) found: bool,
    /// `None` also when it does not decode: the history is then read afresh.
    pub(in crate::store) version: Option<i64>,
    pub(in crate::store) summary: Option<HistorySummary>,
}

/// What a session's task reads when it starts, in one row: the chat's choices and the head.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionStart {
    pub prefs: SessionPrefs,
    pub head: SessionHead,
}

/// A session's saved summary of its older messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistorySummary {
    pub text: String,
    /// How many compactions made it (at least one).
    pub compactions: u32,
}

/// The in-process bus's journal writes a finishing run makes in its own transaction (see
/// `StoreJournal` and the worker's `JournalInStore` commit).
#[derive(Debug, Default, Clone, Copy)]
pub struct BusWrites<'a> {
    /// The reply's record, to be appended.
    pub reply: Option<&'a JournalRecord>,
    /// The journal row of the message answered, to be deleted.
    pub answered_row: Option<i64>,
}

/// What a run was for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RunKind {
    /// A turn answering a message.
    #[default]
    Turn,
    /// A compaction's memory flush: the agent writing lasting facts before old history goes.
    MemoryFlush,
    /// A compaction's summary call.
    Summary,
    /// A chat command (`/status`, `/new`, …): recorded like a run so that a redelivery is not
    /// executed again, but no model was called.
    Command,
    /// A message settled without a turn of its own (queue full, dropped, merged into another
    /// turn), recorded for the same reason.
    NoTurn,
    /// A message that waited longer than `worker.max_wait_secs` for its turn: the chat got a
    /// note instead (a heartbeat was skipped); no model was called.
    Expired,
}

impl RunKind {
    pub const ALL: [RunKind; 6] =
        [RunKind::Turn, RunKind::MemoryFlush, RunKind::Summary, RunKind::Command, RunKind::NoTurn, RunKind::Expired];

    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Turn => "turn",
            RunKind::MemoryFlush => "memory_flush",
            RunKind::Summary => "summary",
            RunKind::Command => "command",
            RunKind::NoTurn => "no_turn",
            RunKind::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Option<RunKind> {
        RunKind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// Whether the model was called: what usage counts.
    pub fn calls_the_model(self) -> bool {
        matches!(self, RunKind::Turn | RunKind::MemoryFlush | RunKind::Summary)
    }

    /// What `switchboard runs` and `GET /v1/runs` list: the runs that called the model, and
    /// the messages that expired waiting for one (an answer someone did not get).
    pub fn listed(self) -> bool {
        self.calls_the_model() || self == RunKind::Expired
    }
}

/// A model call made for a session outside a turn (a compaction's flush or summary), recorded
/// as a finished run of its own so that `runs` and the payer's usage show it.
#[derive(Debug, Clone, PartialEq)]
pub struct SideRun {
    pub kind: RunKind,
    pub session_key: String,
    /// Unique per side run: `<inbound id of the turn before it>:<kind>`.
    pub inbound_id: String,
    pub status: RunStatus,
    pub model: String,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub iterations: u32,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    /// Whose monthly usage it is added to, as for the turn it followed.
    pub billing: Option<Billing>,
}

/// A run as listed for operators.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub run_id: String,
    pub inbound_id: String,
    pub session_key: String,
    pub kind: RunKind,
    pub status: RunStatus,
    pub attempt: u32,
    pub model: String,
    pub usage: Usage,
    /// Estimated cost in USD; `None` when unknown.
    pub cost_usd: Option<f64>,
    pub iterations: u32,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub reply_delivered: bool,
}

/// A run of a message: claimed once by inbound id, finished once with its transcript, reply and
/// usage (users live in the same database as runs, so a run's usage is recorded with its
/// outcome), and listed for operators.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Records that `inbound_id` is being worked on in `session_key`, or reports what was
    /// already done for it. Atomic: two workers claiming one inbound id get one `New`.
    async fn claim_run(&self, inbound_id: &str, session_key: &str) -> Result<RunClaim, StoreError> {
        self.claim_run_as(inbound_id, session_key, RunKind::Turn).await
    }

    /// [`RunStore::claim_run`] for a run of `kind` (a new run is recorded as that kind).
    async fn claim_run_as(&self, inbound_id: &str, session_key: &str, kind: RunKind) -> Result<RunClaim, StoreError>;

    /// Whether the run of `inbound_id` is settled: finished (completed or failed) and its
    /// reply, if it has one, published. False when it runs, waits to publish, or has no run.
    async fn run_settled(&self, inbound_id: &str) -> Result<bool, StoreError>;

    /// Finishes a run: appends its transcript, stores the reply, sets status, usage and timings,
    /// and adds the usage to its user's month (`billing`), all in one transaction.
    async fn finish_run(&self, run_id: &str, outcome: &RunOutcome) -> Result<(), StoreError>;

    /// [`RunStore::finish_run`] with the in-process bus's journal writes in the same transaction:
    /// the reply's record appended (and the reply marked delivered, since it is then on the
    /// bus as surely as the run is stored) and the answered message's row deleted. Returns the
    /// reply's journal row, `None` when a row with its id is still pending (it is queued already).
    async fn finish_run_journaled(
        &self,
        run_id: &str,
        outcome: &RunOutcome,
        bus: &BusWrites<'_>,
    ) -> Result<Option<i64>, StoreError>;

    /// Records a finished [`SideRun`] and adds its usage to its payer's month, in one
    /// transaction. A second record with the same inbound id changes nothing.
    async fn record_side_run(&self, run: &SideRun) -> Result<(), StoreError>;

    /// Marks a run's reply as published on the bus.
    async fn mark_reply_delivered(&self, run_id: &str) -> Result<(), StoreError>;

    /// The most recent runs, newest first.
    async fn recent_runs(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError>;
}

/// A session: its transcript after `/new` and the last compaction, the summary that stands
/// for what a compaction covered, and what its chat chose (`/queue`, `/model`, `/verbose`).
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// The most recent `limit` transcript messages of a session after its last compaction,
    /// oldest first.
    async fn history(&self, session_key: &str, limit: usize) -> Result<Vec<ChatMessage>, StoreError>;

    /// Like [`SessionStore::history`], with each message's transcript id (for compaction).
    async fn history_rows(&self, session_key: &str, limit: usize) -> Result<Vec<(i64, ChatMessage)>, StoreError>;

    /// The session's saved summary; `None` before the first compaction.
    async fn session_summary(&self, session_key: &str) -> Result<Option<HistorySummary>, StoreError>;

    /// What a turn reads of its session: [`SessionStore::history`] and [`SessionStore::session_summary`]
    /// together, from a copy in memory when this process stored the session's last turn.
    async fn conversation(&self, session_key: &str, limit: usize) -> Result<Conversation, StoreError>;

    /// [`SessionStore::conversation`] with the session's head read before (by
    /// [`SessionStore::session_start`]). Only for a turn that starts right after that read:
    /// a change to the history in between is not seen.
    async fn conversation_from(
        &self,
        session_key: &str,
        limit: usize,
        head: SessionHead,
    ) -> Result<Conversation, StoreError>;

    /// Marks a compaction of the session as running. `false` when one already is (and is
    /// not stale), in which case the caller must not compact. Atomic across processes.
    async fn begin_compaction(&self, session_key: &str) -> Result<bool, StoreError>;

    /// Ends a compaction: saves the summary, hides transcript rows up to `through_id` from
    /// [`SessionStore::history`], counts the compaction and clears the running mark, in one statement.
    async fn finish_compaction(&self, session_key: &str, summary: &str, through_id: i64) -> Result<(), StoreError>;

    /// Clears the running mark after a failed compaction; summary and history stay as they were.
    async fn abort_compaction(&self, session_key: &str) -> Result<(), StoreError>;

    /// Starts the session afresh (`/new`): later [`SessionStore::history`] calls see nothing written
    /// before now. The transcript itself is kept.
    async fn archive_session(&self, session_key: &str) -> Result<(), StoreError>;

    /// What `/status` needs to know about a session (defaults if it is new). Its token count
    /// reads every run since `/new`: for commands, not for every turn.
    async fn session_info(&self, session_key: &str) -> Result<SessionInfo, StoreError>;

    /// What the session chose with `/queue`, `/model` and `/verbose` (the defaults for a new
    /// session). One row, read when a session's task starts.
    async fn session_prefs(&self, session_key: &str) -> Result<SessionPrefs, StoreError>;

    /// [`SessionStore::session_prefs`] and the session's head, read together when a session's
    /// task starts (one statement instead of two for its first turn).
    async fn session_start(&self, session_key: &str) -> Result<SessionStart, StoreError>;

    /// Stores the session's model (`/model <name>`); `None` = the agent's chain as configured.
    async fn set_session_model(&self, session_key: &str, model: Option<&str>) -> Result<(), StoreError>;

    /// Stores whether the session gets progress messages while tools run (`/verbose`).
    async fn set_verbose(&self, session_key: &str, verbose: bool) -> Result<(), StoreError>;

    /// Stores the session's queue mode (`/queue <mode>`); `None` = the configured default.
    async fn set_queue_mode(&self, session_key: &str, mode: Option<QueueMode>) -> Result<(), StoreError>;
}

/// Everything a turn touches: its run, its session, its sender's user and budget, and what
/// cron, heartbeats, sub-agents, approvals and the models' windows keep. The worker takes it;
/// narrower consumers take one of its roles.
pub trait Store:
    RunStore
    + SessionStore
    + UserStore
    + CronStore
    + HeartbeatStore
    + SubagentStore
    + approvals::ApprovalStore
    + WindowStore
    + Send
    + Sync
{
}

impl<T> Store for T where
    T: RunStore
        + SessionStore
        + UserStore
        + CronStore
        + HeartbeatStore
        + SubagentStore
        + approvals::ApprovalStore
        + WindowStore
        + ?Sized
{
}

/// What a session chose with chat commands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionPrefs {
    /// `/queue`; `None` = the configured default (also for a stored name no mode has).
    pub queue_mode: Option<QueueMode>,
    /// `/model`: the chain entry (`provider/model`) tried first; `None` = the chain's order.
    pub model: Option<String>,
    /// `/verbose on`: a short progress message as each tool starts.
    pub verbose: bool,
}

/// A session's settings and totals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionInfo {
    /// Set by `/queue`; `None` = the configured default.
    pub queue_mode: Option<QueueMode>,
    /// What the session's runs since the last `/new` used: its turns and the calls its
    /// compactions made (`used.estimated`: some counts are estimates).
    pub used: Usage,
    /// What they cost; `None` when unknown for any of them (a model without a price).
    pub cost_usd: Option<f64>,
    /// The newest finished turn since the last `/new`.
    pub last_turn: Option<LastTurn>,
    /// Compactions of the session's history.
    pub compactions: u64,
}

/// A session's newest turn, as `/status` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LastTurn {
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    /// What the conversation weighed after it (see [`RunOutcome::context_tokens`]).
    pub context_tokens: u64,
}

/// Everything switchboard keeps in its database, whichever store holds it: what the assembly
/// and the operator's commands open. Each consumer is given the role it uses, upcast from it
/// (the roles of several traits are in [`roles`]).
#[async_trait]
pub trait Database:
    Store + MemoryIndex + PairingStore + PairingAdmin + Journal + DeliveryRecord + ApiStore + UsageLedger + OwnerRecords
{
    /// Where it is, for messages: a file's path, or a server's URL without the password.
    fn location(&self) -> String;

    /// Fails with [`StoreError::NotWritable`] unless a write would succeed, so a daemon that
    /// cannot write finds out at start, not at the first message.
    async fn check_writable(&self) -> Result<(), StoreError>;

    /// Closes its connections, waiting for those in use. Later calls fail.
    async fn close(&self);

    /// Takes the database's lock in `mode` (see [`lock`]), failing at once with
    /// [`StoreError::InUse`] when another process holds a conflicting one.
    async fn lock(&self, mode: lock::LockMode) -> Result<lock::DatabaseLock, StoreError>;

    /// Whether processes on several hosts may use this database (PostgreSQL), or one host's
    /// only (a SQLite file).
    fn spans_hosts(&self) -> bool;

    /// Records `dir` as the directory its key names for every process of this database, unless
    /// one is recorded already; returns the recorded one. A store of one host records nothing
    /// and returns `dir`.
    async fn record_shared_dir(&self, dir: &SharedDir) -> Result<SharedDir, StoreError>;
}

/// A directory every process of a deployment must see as one (see `record_shared_dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedDir {
    /// What it is for: `workspace main`, `telegram media`.
    pub key: String,
    /// The id in the directory's mark file (`workspace::mark`).
    pub mark: String,
    /// Where this process sees it.
    pub path: String,
    /// The host that recorded it.
    pub host: String,
}

/// The configured store: the PostgreSQL database at `database_url` when one is set, otherwise
/// the SQLite file at `path`; migrated to the newest schema.
pub async fn open(config: &StoreConfig) -> Result<Arc<dyn Database>, StoreError> {
    Ok(if config.database_url.is_empty() {
        Arc::new(sqlite::SqliteStore::open(&config.path).await?)
    } else {
        Arc::new(postgres::PostgresStore::connect(&config.database_url).await?)
    })
}
