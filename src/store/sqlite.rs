//! The embedded store: one SQLite file in the data dir.
//!
//! Concurrency: WAL lets readers run beside the one writer, and every write transaction starts
//! with `BEGIN IMMEDIATE`, so it takes the write lock up front and waits (`busy_timeout`) instead
//! of failing with "database is locked" when it later tries to upgrade a read lock. This holds
//! across pools too, so several processes may share one file.
//!
//! Times are stored as unix milliseconds (UTC).

mod compaction;
mod finish;
mod group_writes;
mod grouped;
mod memory_conversations;
mod memory_embeddings;
mod memory_index;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, Transaction};
use switchboard_channels::bus::journal::JournalRecord;
use uuid::Uuid;

use self::group_writes::{ClaimRow, GroupWrites};
use self::grouped::Grouped;
use super::finishing;
use super::history_cache::HistoryCache;
use super::migrate::{self, SQLITE_MIGRATIONS};
use super::values::{decode_reply, from_millis, now_millis, parse_status, run_record, sql_limit, to_u32, to_u64};
use super::{BusWrites, Conversation, RunClaim, RunOutcome, RunRecord, RunStatus, SessionInfo, Store, StoreError};
use crate::provider::ChatMessage;

/// How long a statement waits for another connection's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections for reads: WAL lets them run beside the writer and beside each other.
const MAX_CONNECTIONS: u32 = 4;

/// SQLite's page cache per connection, in KiB (`cache_size` counts KiB when negative); SQLite's
/// default is 2,000. In WAL mode a connection empties its cache whenever another one has
/// written since its last read, which under steady traffic is before nearly every read, so a
/// large cache buys little; the kernel keeps the file's pages anyway. This bounds what the
/// store holds at about `MAX_CONNECTIONS` times this, however large the file grows.
const PAGE_CACHE_KIB: i64 = 512;

/// The writer connection's finishing trigger (`finish`), for the query-plan test.
#[doc(hidden)]
pub const FINISH_SCHEMA: &str = finish::INSTALL;

/// The columns [`RunRecord`] is read from.
const RUN_COLUMNS: &str = "run_id, inbound_id, session_key, status, attempt, model, input_tokens, \
     output_tokens, usage_estimated, cost_usd, iterations, error, reply_delivered, started_at, finished_at";

/// The SQLite implementation of [`Store`]. Cheap to share behind an `Arc`; all methods take
/// `&self` and use the internal connection pool.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// The one connection this process writes through. SQLite has one writer at a time anyway;
    /// writers queued here wait their turn without polling, where writers on several
    /// connections would sleep in SQLite's busy handler (a millisecond and up) for the lock.
    writer: SqlitePool,
    path: PathBuf,
    /// Sessions' recent history, for turns (see `history_cache`).
    history: Arc<HistoryCache>,
    /// Writes that many tasks make at once, grouped into one statement per kind.
    writes: Arc<GroupWrites>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and migrates it to the newest schema.
    ///
    /// Fails with [`StoreError::Open`] if the file cannot be created or opened, and with
    /// [`StoreError::Migrate`] if it was written by a newer build or a migration fails.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let open_err = |reason: String| StoreError::Open { path: path.display().to_string(), reason };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| open_err(format!("cannot create {}: {e}", parent.display())))?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // In WAL mode NORMAL cannot corrupt the database; a power loss may only drop the
            // last commits, which the bus redelivers.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            .pragma("cache_size", format!("-{PAGE_CACHE_KIB}"));
        let pool = connect_waiting_for_wal(options.clone(), SqlitePoolOptions::new().max_connections(MAX_CONNECTIONS))
            .await
            .map_err(|e| open_err(e.to_string()))?;
        migrate::run(&pool, SQLITE_MIGRATIONS).await?;
        let writer = SqlitePoolOptions::new().max_connections(1);
        let writer = connect_waiting_for_wal(options, writer).await.map_err(|e| open_err(e.to_string()))?;
        let writes = Arc::new(GroupWrites::new(&writer));
        Ok(SqliteStore { pool, writer, path: path.to_owned(), history: Arc::default(), writes })
    }

    /// Fails with [`StoreError::NotWritable`] unless a write would succeed. SQLite opens a file
    /// it may not write read-only without a word, and a migrated database needs no write to
    /// open, so without this a daemon would start and then fail every message.
    pub async fn check_writable(&self) -> Result<(), StoreError> {
        let refused =
            |e: sqlx::Error| StoreError::NotWritable { path: self.path.display().to_string(), reason: e.to_string() };
        // `BEGIN IMMEDIATE` alone succeeds on a read-only file; the first changed page does not.
        // The row is rolled back before anything reaches the file.
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await.map_err(refused)?;
        sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES (-1, 0)")
            .execute(&mut *tx)
            .await
            .map_err(refused)?;
        tx.rollback().await.map_err(refused)
    }

    /// The connection pool for reads, for the other tables' implementations in this module tree.
    pub(super) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Deletes the bus journal's row `seq` (grouped with others acked meanwhile); returns once
    /// it is deleted.
    pub(super) async fn remove_journaled(&self, seq: i64) -> Result<(), String> {
        Grouped::write(&self.writes.removals, vec![seq]).await.map(drop)
    }

    /// Adds rows to the bus journal (grouped with others added meanwhile, in order); each
    /// row's `seq`, or `None` when a row with its dedupe id is still pending.
    pub(super) async fn append_journaled(&self, rows: Vec<JournalRecord>) -> Result<Vec<Option<i64>>, String> {
        Grouped::write(&self.writes.appends, rows).await
    }

    /// Closes the pool, waiting for connections in use to be returned. Later calls fail.
    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
    }

    /// Starts a write transaction holding the write lock from its first statement.
    pub(super) async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }
}

/// Connects, retrying while another process holds the lock that switching a new database to
/// WAL needs: SQLite does not apply the busy timeout to that lock, so two processes starting
/// on one new file at once would otherwise fail with "database is locked".
async fn connect_waiting_for_wal(
    options: SqliteConnectOptions,
    pool: SqlitePoolOptions,
) -> Result<SqlitePool, sqlx::Error> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        let result = pool.clone().connect_with(options.clone()).await;
        match result {
            Err(sqlx::Error::Database(err))
                if err.code().as_deref() == Some("5") && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn claim_run(&self, inbound_id: &str, session_key: &str) -> Result<RunClaim, StoreError> {
        let run_id = Uuid::now_v7().to_string();
        let row =
            ClaimRow { run_id: run_id.clone(), inbound_id: inbound_id.to_owned(), session_key: session_key.to_owned() };
        let inserted = Grouped::write(&self.writes.claims, vec![row]).await.map_err(StoreError::Grouped)?;
        if inserted.first() == Some(&true) {
            return Ok(RunClaim::New { run_id });
        }
        let mut tx = self.begin_write().await?;
        let claim = existing_claim(&mut tx, inbound_id).await?;
        tx.commit().await?;
        Ok(claim)
    }

    async fn history(&self, session_key: &str, limit: usize) -> Result<Vec<ChatMessage>, StoreError> {
        Ok(self.history_rows(session_key, limit).await?.into_iter().map(|(_, message)| message).collect())
    }

    async fn history_rows(&self, session_key: &str, limit: usize) -> Result<Vec<(i64, ChatMessage)>, StoreError> {
        // Rows a compaction covered are summarised on the session, rows up to `archived_through`
        // belong to conversations ended by `/new`; COALESCE: no session row yet means neither.
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT id, message_json FROM transcript WHERE session_key = $1 AND id > \
             COALESCE((SELECT MAX(compacted_through, archived_through) FROM sessions WHERE key = $1), 0) \
             ORDER BY id DESC LIMIT $2",
        )
        .bind(session_key)
        .bind(sql_limit(limit))
        .fetch_all(&self.pool)
        .await?;
        // Fetched newest first so LIMIT keeps the most recent ones; the model wants them oldest first.
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
        compaction::summary(&self.pool, session_key).await
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
        compaction::begin(&self.writer, session_key).await
    }

    async fn finish_compaction(&self, session_key: &str, summary: &str, through_id: i64) -> Result<(), StoreError> {
        self.history.forget(session_key);
        compaction::finish(&self.writer, session_key, summary, through_id).await
    }

    async fn abort_compaction(&self, session_key: &str) -> Result<(), StoreError> {
        compaction::abort(&self.writer, session_key).await
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
        let finished = Grouped::write(&self.writes.finishes, vec![row]).await.map_err(StoreError::Grouped)?;
        let finished = finished.into_iter().next().ok_or_else(|| StoreError::Grouped("no finish result".into()))?;
        match finished.map_err(StoreError::Grouped)? {
            finishing::Finished::Done { session_key, history_version, reply_row } => {
                self.history.append(&session_key, history_version, outcome.transcript.clone());
                Ok(reply_row)
            }
            finishing::Finished::NoSuchRun => Err(StoreError::NoSuchRun(run_id.to_owned())),
            finishing::Finished::NotRunning => Err(refuse("it has already finished")),
        }
    }

    async fn mark_reply_delivered(&self, run_id: &str) -> Result<(), StoreError> {
        // A single write statement needs no explicit transaction: it takes the write lock
        // directly, so `busy_timeout` covers it.
        let updated = sqlx::query("UPDATE runs SET reply_delivered = $1 WHERE run_id = $2")
            .bind(true)
            .bind(run_id)
            .execute(&self.writer)
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
        let mut tx = self.begin_write().await?;
        let now = now_millis();
        ensure_session(&mut tx, session_key, now).await?;
        sqlx::query(
            // The summary belongs to the old conversation too: a new one starts without it.
            "UPDATE sessions SET updated_at = $1, summary = NULL, history_version = history_version + 1, archived_through = \
             COALESCE((SELECT MAX(id) FROM transcript WHERE session_key = $2), 0) WHERE key = $2",
        )
        .bind(now)
        .bind(session_key)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
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
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), COALESCE(MAX(usage_estimated), FALSE) \
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
        let mut tx = self.begin_write().await?;
        let now = now_millis();
        ensure_session(&mut tx, session_key, now).await?;
        sqlx::query("UPDATE sessions SET queue_mode = $1, updated_at = $2 WHERE key = $3")
            .bind(mode)
            .bind(now)
            .bind(session_key)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Creates the session row on first use; later claims leave it alone.
async fn ensure_session(tx: &mut Transaction<'_, Sqlite>, key: &str, now: i64) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO sessions (key, created_at, updated_at) VALUES ($1, $2, $2) ON CONFLICT (key) DO NOTHING")
        .bind(key)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// What to do about an inbound id that already has a run.
async fn existing_claim(tx: &mut Transaction<'_, Sqlite>, inbound_id: &str) -> Result<RunClaim, StoreError> {
    let row: Option<(String, String, Option<String>, bool)> =
        sqlx::query_as("SELECT run_id, status, reply_json, reply_delivered FROM runs WHERE inbound_id = $1")
            .bind(inbound_id)
            .fetch_optional(&mut **tx)
            .await?;
    let Some((run_id, status, reply_json, delivered)) = row else {
        return Err(StoreError::Corrupt(format!("inbound id {inbound_id} conflicts but has no run")));
    };
    match parse_status(&status)? {
        RunStatus::Running => {
            // Its worker died (or the bus gave up on it): this claimant takes it over.
            let attempt: i64 =
                sqlx::query_scalar("UPDATE runs SET attempt = attempt + 1 WHERE run_id = $1 RETURNING attempt")
                    .bind(&run_id)
                    .fetch_one(&mut **tx)
                    .await?;
            Ok(RunClaim::Resumed { attempt: to_u32(attempt, "attempt")?, run_id })
        }
        RunStatus::Completed | RunStatus::Failed => {
            let reply = reply_json.as_deref().map(|json| decode_reply(&run_id, json)).transpose()?;
            Ok(RunClaim::Finished { run_id, reply, delivered })
        }
    }
}

#[async_trait]
impl super::Database for SqliteStore {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    async fn check_writable(&self) -> Result<(), StoreError> {
        SqliteStore::check_writable(self).await
    }

    async fn close(&self) {
        SqliteStore::close(self).await;
    }

    async fn lock(&self, mode: super::lock::LockMode) -> Result<super::lock::DatabaseLock, StoreError> {
        super::lock::StoreLock::acquire(&self.path, mode).map(super::lock::DatabaseLock::File)
    }
}
