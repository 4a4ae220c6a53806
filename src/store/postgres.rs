//! The shared store: one PostgreSQL database for every worker and channel process, on any
//! number of hosts (`database_url = "postgres://…"`).
//!
//! The tables are the SQLite store's (`migrations/postgres`), and so is each method's meaning;
//! what differs is concurrency. PostgreSQL has many writers at once, so nothing here relies on
//! a database-wide write lock: a claim is decided by the unique inbound id, a finish locks its
//! run's row (`finish_runs`, one call), a new user's identity by its primary key.
//!
//! Times are stored as unix milliseconds (UTC), as in the SQLite store.

mod compaction;
mod journal;
mod memory;
mod migrate;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::finishing::{self, FinishRow, Finished};
use super::history_cache::HistoryCache;
use super::lock::{DatabaseLock, LockMode, SessionLock};
use super::values::{decode_reply, encode, now_millis, run_record, sql_limit, to_u32, to_u64};
use super::{BusWrites, Conversation, RunClaim, RunOutcome, RunRecord, RunStatus, SessionInfo, Store, StoreError};
use crate::provider::ChatMessage;

/// Connections per process. A turn holds one for a statement at a time, never across the
/// model call, so a few serve hundreds of turns in flight; PostgreSQL's own default limit
/// (100) is shared by every process of a deployment.
const MAX_CONNECTIONS: u32 = 8;

/// How long to wait for a connection (the server restarting, every connection busy).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The advisory lock of [`PostgresStore::begin_write`]: any fixed number, the same in every
/// process ("sb" "wr" in ASCII).
const WRITE_LOCK: i64 = 0x7362_7772;

/// The advisory lock of [`super::Database::lock`] ("sb" "db").
const DAEMON_LOCK: i64 = 0x7362_6462;

/// The columns [`RunRecord`] is read from.
const RUN_COLUMNS: &str = "run_id, inbound_id, session_key, status, attempt, model, input_tokens, \
     output_tokens, usage_estimated, cost_usd, iterations, error, reply_delivered, started_at, finished_at";

/// The PostgreSQL implementation of [`Store`]. Cheap to share behind an `Arc`.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// The URL without its password, for messages.
    shown: String,
    /// Sessions' recent history, for turns: checked against the session's history version on
    /// every turn, so a turn that ran on another worker is never missed.
    history: Arc<HistoryCache>,
}

impl PostgresStore {
    /// Connects to the database at `url` and migrates it to the newest schema.
    ///
    /// Fails with [`StoreError::Open`] if the URL is not valid or the server cannot be reached,
    /// and with [`StoreError::Migrate`] if the database was migrated by a newer build or a
    /// migration fails.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|e: sqlx::Error| StoreError::Open { path: "(the database URL)".into(), reason: e.to_string() })?;
        let shown = shown(&options);
        let open_err = |reason: String| StoreError::Open { path: shown.clone(), reason };
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(|e| open_err(e.to_string()))?;
        migrate::run(&pool).await?;
        Ok(PostgresStore { pool, shown, history: Arc::default() })
    }

    /// Closes the pool, waiting for connections in use to be returned. Later calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The connection pool, for the other tables' implementations in this module tree.
    pub(super) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Starts a write transaction that checks and then acts (a count before an insert, a
    /// user looked up before one is created). Such transactions are serialised across every
    /// process of the deployment by one advisory lock, held to the transaction's end, as the
    /// SQLite store's write lock serialises them; they are operators' commands and tools' set-up,
    /// never the per-turn writes, which are single statements and do not take it.
    pub(super) async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(WRITE_LOCK).execute(&mut *tx).await?;
        Ok(tx)
    }

    async fn finish(&self, row: FinishRow) -> Result<Finished, StoreError> {
        type ResultRow = (String, Option<String>, Option<String>, Option<i64>, Option<i64>, Option<bool>);
        let rows: Vec<ResultRow> = sqlx::query_as(
            "SELECT finished_run, run_session, prior_status, new_version, reply_row, usage_counted \
             FROM finish_runs($1::jsonb)",
        )
        .bind(encode(&[&row])?)
        .fetch_all(&self.pool)
        .await?;
        let Some((run_id, Some(session_key), prior, version, reply_row, usage_counted)) = rows.into_iter().next()
        else {
            return Ok(Finished::NoSuchRun);
        };
        if prior.as_deref() != Some("running") {
            return Ok(Finished::NotRunning);
        }
        let history_version =
            version.ok_or_else(|| StoreError::Corrupt(format!("run {run_id}'s session {session_key} has no row")))?;
        if usage_counted == Some(false)
            && let Some(sender) = &row.billing_sender
        {
            tracing::warn!(channel = ?row.billing_channel, %sender, "a run's usage has no user to be counted for");
        }
        Ok(Finished::Done { session_key, history_version, reply_row })
    }
}

#[async_trait]
impl super::Database for PostgresStore {
    fn location(&self) -> String {
        self.shown.clone()
    }

    /// A row written and rolled back: a role without the right to write is found at start.
    async fn check_writable(&self) -> Result<(), StoreError> {
        let refused = |e: sqlx::Error| StoreError::NotWritable { path: self.shown.clone(), reason: e.to_string() };
        let mut tx = self.pool.begin().await.map_err(refused)?;
        sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES (-1, 0)")
            .execute(&mut *tx)
            .await
            .map_err(refused)?;
        tx.rollback().await.map_err(refused)
    }

    async fn close(&self) {
        PostgresStore::close(self).await;
    }

    async fn lock(&self, mode: LockMode) -> Result<DatabaseLock, StoreError> {
        let mut connection = self.pool.acquire().await?.detach();
        let take = match mode {
            LockMode::Exclusive => "SELECT pg_try_advisory_lock($1)",
            LockMode::Shared => "SELECT pg_try_advisory_lock_shared($1)",
        };
        let taken: bool = sqlx::query_scalar(take).bind(DAEMON_LOCK).fetch_one(&mut connection).await?;
        if !taken {
            return Err(StoreError::InUse {
                database: self.shown.clone(),
                lock: format!("PostgreSQL advisory lock {DAEMON_LOCK}"),
                holders: Vec::new(),
            });
        }
        Ok(DatabaseLock::Postgres(SessionLock { _connection: connection }))
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn claim_run(&self, inbound_id: &str, session_key: &str) -> Result<RunClaim, StoreError> {
        let run_id = Uuid::now_v7().to_string();
        // The session row is created by the same statement; the foreign key is checked at its
        // end, when the row exists.
        let inserted = sqlx::query(
            "WITH session AS (INSERT INTO sessions (key, created_at, updated_at) VALUES ($3, $4, $4) \
             ON CONFLICT (key) DO NOTHING) \
             INSERT INTO runs (run_id, inbound_id, session_key, status, attempt, started_at) \
             VALUES ($1, $2, $3, 'running', 1, $4) ON CONFLICT (inbound_id) DO NOTHING",
        )
        .bind(&run_id)
        .bind(inbound_id)
        .bind(session_key)
        .bind(now_millis())
        .execute(&self.pool)
        .await?
        .rows_affected();
        if inserted == 1 {
            return Ok(RunClaim::New { run_id });
        }
        // Its worker died (or the bus gave up on it): this claimant takes it over. One
        // statement, so two claimants of one unfinished run each get their own attempt.
        let resumed: Option<(String, i64)> = sqlx::query_as(
            "UPDATE runs SET attempt = attempt + 1 WHERE inbound_id = $1 AND status = 'running' \
             RETURNING run_id, attempt",
        )
        .bind(inbound_id)
        .fetch_optional(&self.pool)
        .await?;
        if let Some((run_id, attempt)) = resumed {
            return Ok(RunClaim::Resumed { attempt: to_u32(attempt, "attempt")?, run_id });
        }
        // Not running, so finished: a finished run never runs again.
        let finished: Option<(String, Option<String>, bool)> =
            sqlx::query_as("SELECT run_id, reply_json, reply_delivered FROM runs WHERE inbound_id = $1")
                .bind(inbound_id)
                .fetch_optional(&self.pool)
                .await?;
        let Some((run_id, reply_json, delivered)) = finished else {
            return Err(StoreError::Corrupt(format!("inbound id {inbound_id} conflicts but has no run")));
        };
        let reply = reply_json.as_deref().map(|json| decode_reply(&run_id, json)).transpose()?;
        Ok(RunClaim::Finished { run_id, reply, delivered })
    }

    async fn history(&self, session_key: &str, limit: usize) -> Result<Vec<ChatMessage>, StoreError> {
        Ok(self.history_rows(session_key, limit).await?.into_iter().map(|(_, message)| message).collect())
    }

    async fn history_rows(&self, session_key: &str, limit: usize) -> Result<Vec<(i64, ChatMessage)>, StoreError> {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT id, message_json FROM transcript WHERE session_key = $1 AND id > \
             COALESCE((SELECT GREATEST(compacted_through, archived_through) FROM sessions WHERE key = $1), 0) \
             ORDER BY id DESC LIMIT $2",
        )
        .bind(session_key)
        .bind(sql_limit(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .rev()
            .map(|(id, json)| {
                serde_json::from_str(&json)
                    .map(|message| (id, message))
                    .map_err(|e| StoreError::Corrupt(format!("transcript row {id} is not a chat message: {e}")))
            })
            .collect()
    }

    async fn session_summary(&self, session_key: &str) -> Result<Option<(String, u32)>, StoreError> {
        Ok(compaction::summary_and_version(&self.pool, session_key).await?.and_then(|(_, summary)| summary))
    }

    async fn conversation(&self, session_key: &str, limit: usize) -> Result<Conversation, StoreError> {
        let Some((version, summary)) = compaction::summary_and_version(&self.pool, session_key).await? else {
            return Ok(Conversation::default());
        };
        if let Some(history) = self.history.get(session_key, version, limit) {
            return Ok(Conversation { history, summary });
        }
        let history = self.history(session_key, limit).await?;
        // Kept under the version read before the rows: should the history have changed in
        // between, the next turn reads a newer version and does not use this copy.
        self.history.put(session_key, version, limit, history.clone());
        Ok(Conversation { history, summary })
    }

    async fn begin_compaction(&self, session_key: &str) -> Result<bool, StoreError> {
        compaction::begin(&self.pool, session_key).await
    }

    async fn finish_compaction(&self, session_key: &str, summary: &str, through_id: i64) -> Result<(), StoreError> {
        self.history.forget(session_key);
        compaction::finish(&self.pool, session_key, summary, through_id).await
    }

    async fn abort_compaction(&self, session_key: &str) -> Result<(), StoreError> {
        compaction::abort(&self.pool, session_key).await
    }

    async fn finish_run(&self, run_id: &str, outcome: &RunOutcome) -> Result<(), StoreError> {
        self.finish_run_journaled(run_id, outcome, &BusWrites::default()).await.map(|_| ())
    }

    async fn finish_run_journaled(
        &self,
        run_id: &str,
        outcome: &RunOutcome,
        bus: &BusWrites<'_>,
    ) -> Result<Option<i64>, StoreError> {
        let refuse = |reason: &str| StoreError::Finish { run_id: run_id.to_owned(), reason: reason.to_owned() };
        if outcome.status == RunStatus::Running {
            return Err(refuse("the outcome's status is still running"));
        }
        let row = finishing::row(run_id, outcome, bus, now_millis())?;
        match self.finish(row).await? {
            Finished::Done { session_key, history_version, reply_row } => {
                self.history.append(&session_key, history_version, outcome.transcript.clone());
                Ok(reply_row)
            }
            Finished::NoSuchRun => Err(StoreError::NoSuchRun(run_id.to_owned())),
            Finished::NotRunning => Err(refuse("it has already finished")),
        }
    }

    async fn mark_reply_delivered(&self, run_id: &str) -> Result<(), StoreError> {
        let updated = sqlx::query("UPDATE runs SET reply_delivered = TRUE WHERE run_id = $1")
            .bind(run_id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if updated == 0 {
            return Err(StoreError::NoSuchRun(run_id.to_owned()));
        }
        Ok(())
    }

    async fn recent_runs(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        // Run ids are UUID v7, time-ordered, so they break ties between runs started in the
        // same millisecond.
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY started_at DESC, run_id DESC LIMIT $1");
        let rows = sqlx::query(&sql).bind(sql_limit(limit)).fetch_all(&self.pool).await?;
        rows.iter().map(run_record).collect()
    }

    async fn archive_session(&self, session_key: &str) -> Result<(), StoreError> {
        self.history.forget(session_key);
        // The summary belongs to the old conversation too: a new one starts without it.
        sqlx::query(
            "INSERT INTO sessions AS s (key, created_at, updated_at) VALUES ($2, $1, $1) \
             ON CONFLICT (key) DO UPDATE SET updated_at = $1, summary = NULL, \
             history_version = s.history_version + 1, \
             archived_through = COALESCE((SELECT MAX(id) FROM transcript WHERE session_key = $2), 0)",
        )
        .bind(now_millis())
        .bind(session_key)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn session_info(&self, session_key: &str) -> Result<SessionInfo, StoreError> {
        let Some((queue_mode, archived_through, compactions)) = sqlx::query_as::<_, (Option<String>, i64, i64)>(
            "SELECT queue_mode, archived_through, compaction_count FROM sessions WHERE key = $1",
        )
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(SessionInfo::default());
        };
        // Runs since `/new`: those that wrote transcript rows after the archive point, or none.
        let (tokens, estimated): (i64, bool) = sqlx::query_as(
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0)::BIGINT, COALESCE(BOOL_OR(usage_estimated), FALSE) \
             FROM runs WHERE session_key = $1 \
             AND run_id IN (SELECT run_id FROM transcript WHERE session_key = $1 AND id > $2)",
        )
        .bind(session_key)
        .bind(archived_through)
        .fetch_one(&self.pool)
        .await?;
        Ok(SessionInfo {
            queue_mode,
            tokens_used: to_u64(tokens, "tokens")?,
            tokens_estimated: estimated,
            compactions: to_u64(compactions, "compaction_count")?,
        })
    }

    async fn queue_mode(&self, session_key: &str) -> Result<Option<String>, StoreError> {
        let mode: Option<Option<String>> = sqlx::query_scalar("SELECT queue_mode FROM sessions WHERE key = $1")
            .bind(session_key)
            .fetch_optional(&self.pool)
            .await?;
        Ok(mode.flatten())
    }

    async fn set_queue_mode(&self, session_key: &str, mode: Option<&str>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at, queue_mode) VALUES ($1, $2, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET queue_mode = $3, updated_at = $2",
        )
        .bind(session_key)
        .bind(now_millis())
        .bind(mode)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// Where `options` connect to, without the password, so it can be logged and shown.
fn shown(options: &PgConnectOptions) -> String {
    format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_url_never_carries_the_password() {
        let options: PgConnectOptions = "postgres://sb:secret@db.lan:6432/sb".parse().unwrap();
        assert_eq!(shown(&options), "postgres://sb@db.lan:6432/sb");
    }
}
