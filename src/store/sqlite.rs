//! The embedded store: one SQLite file in the data dir.
//!
//! Concurrency: WAL lets readers run beside the one writer, and every write transaction starts
//! with `BEGIN IMMEDIATE`, so it takes the write lock up front and waits (`busy_timeout`) instead
//! of failing with "database is locked" when it later tries to upgrade a read lock. This holds
//! across pools too, so several processes may share one file.
//!
//! Times are stored as unix milliseconds (UTC).

mod finish;
mod group_reads;
mod group_writes;
mod grouped;
mod memory_embeddings;
mod memory_index;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, Transaction};
use switchboard_channels::bus::journal::JournalRecord;

use self::group_reads::GroupReads;
use self::group_writes::{ClaimRow, GroupWrites, SentRow};
use self::grouped::Grouped;
use super::finishing::{FinishRow, Finished};
use super::history_cache::HistoryCache;
use super::migrate::{self, SQLITE_MIGRATIONS};
use super::users::User;
use super::values::{now_millis, sql_limit};
use super::{RunKind, SessionStart, StoreError};
use crate::config::Identity;

/// How long a statement waits for another connection's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections for reads: WAL lets them run beside the writer and beside each other. A read
/// is CPU work in this process, so more readers than cores add no throughput, only a thread,
/// a page cache and a parsed schema each (about 0.3 MB); start-up's concurrent reads open them
/// all at once. Two at least, so one long read (a memory search, an export) does not hold up
/// a turn's.
fn reader_connections() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    u32::try_from(cores).unwrap_or(u32::MAX).clamp(2, 4)
}

/// SQLite's page cache per connection, in KiB (`cache_size` counts KiB when negative); SQLite's
/// default is 2,000. In WAL mode a connection empties its cache whenever another one has
/// written since its last read, which under steady traffic is before nearly every read, so a
/// large cache buys little; the kernel keeps the file's pages anyway. This bounds what the
/// store holds at about the reader connections' number times this, however large the file
/// grows.
const PAGE_CACHE_KIB: i64 = 512;

/// The writer connection's finishing trigger (`finish`), for the query-plan test.
#[doc(hidden)]
pub fn finish_schema() -> &'static str {
    finish::INSTALL.as_str()
}

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
    /// The reads every turn makes, grouped the same way.
    reads: Arc<GroupReads>,
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
        let pool = connect_waiting_for_wal(options.clone(), pool_options(reader_connections()))
            .await
            .map_err(|e| open_err(e.to_string()))?;
        migrate::run(&pool, SQLITE_MIGRATIONS).await?;
        let writer = pool_options(1);
        let writer = connect_waiting_for_wal(options, writer).await.map_err(|e| open_err(e.to_string()))?;
        let writes = Arc::new(GroupWrites::new(&writer));
        let reads = Arc::new(GroupReads::new(&pool));
        Ok(SqliteStore { pool, writer, path: path.to_owned(), history: Arc::default(), writes, reads })
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
        Grouped::run(&self.writes.removals, vec![seq]).await.map(drop)
    }

    /// Adds rows to the bus journal (grouped with others added meanwhile, in order); each
    /// row's `seq`, or `None` when a row with its dedupe id is still pending.
    pub(super) async fn append_journaled(&self, rows: Vec<JournalRecord>) -> Result<Vec<Option<i64>>, String> {
        Grouped::run(&self.writes.appends, rows).await
    }

    /// Closes the pool, waiting for connections in use to be returned. Later calls fail.
    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
    }

    /// The connection writes go through (see [`SqliteStore::writer`]'s field).
    pub(super) fn write_pool(&self) -> &SqlitePool {
        &self.writer
    }

    /// Starts a write transaction holding the write lock from its first statement.
    pub(super) async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// How far outbound message `id` got on `channel` by its delivery record, as `steps`
    /// (grouped with the lookups made meanwhile).
    pub(super) async fn sent_grouped(&self, channel: &str, id: &str) -> Result<Option<i64>, StoreError> {
        let asked = vec![(channel.to_owned(), id.to_owned())];
        let steps = Grouped::run(&self.reads.deliveries, asked).await.map_err(StoreError::Grouped)?;
        Ok(steps.into_iter().next().flatten())
    }

    /// Records how far outbound message `id` got on `channel` (grouped with the records made
    /// meanwhile).
    pub(super) async fn record_sent_grouped(&self, channel: &str, id: &str, steps: i64) -> Result<(), StoreError> {
        let row = SentRow { channel: channel.to_owned(), id: id.to_owned(), steps };
        Grouped::run(&self.writes.sent, vec![row]).await.map_err(StoreError::Grouped)?;
        Ok(())
    }
}

/// A pool of at most `max` connections that hands out an idle one without pinging it first.
/// sqlx pings by default, to find connections a network peer dropped; a SQLite connection is a
/// thread of this process, and the ping was one more hand-off to it (and back) before every
/// statement run on the pool.
fn pool_options(max: u32) -> SqlitePoolOptions {
    SqlitePoolOptions::new().max_connections(max).test_before_acquire(false)
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

impl super::shared::Backend for SqliteStore {
    type Db = sqlx::Sqlite;

    fn pool(&self) -> &sqlx::Pool<sqlx::Sqlite> {
        SqliteStore::pool(self)
    }

    fn write_pool(&self) -> &sqlx::Pool<sqlx::Sqlite> {
        SqliteStore::write_pool(self)
    }

    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        SqliteStore::begin_write(self).await
    }

    fn history_cache(&self) -> &HistoryCache {
        &self.history
    }
}

impl super::shared::TurnReads for SqliteStore {
    /// Looks up the sender (grouped with the lookups made meanwhile).
    async fn find_sender(&self, identity: &Identity) -> Result<Option<(User, String)>, StoreError> {
        let found = Grouped::run(&self.reads.senders, vec![identity.clone()]).await.map_err(StoreError::Grouped)?;
        Ok(found.into_iter().next().flatten())
    }

    /// Reads the session's row (grouped with the session starts made meanwhile).
    async fn read_session_start(&self, session_key: &str) -> Result<SessionStart, StoreError> {
        let starts = Grouped::run(&self.reads.sessions, vec![session_key.to_owned()]).await;
        let start = starts.map_err(StoreError::Grouped)?.into_iter().next();
        start.ok_or_else(|| StoreError::Grouped("no session row result".into()))
    }
}

impl super::shared::RunWrites for SqliteStore {
    /// Inserts a new running run for `inbound_id` (grouped with the claims made meanwhile);
    /// false when the inbound id has a run already.
    async fn insert_claim(
        &self,
        run_id: &str,
        inbound_id: &str,
        session_key: &str,
        kind: RunKind,
    ) -> Result<bool, StoreError> {
        let row = ClaimRow {
            run_id: run_id.to_owned(),
            inbound_id: inbound_id.to_owned(),
            session_key: session_key.to_owned(),
            kind,
        };
        let inserted = Grouped::run(&self.writes.claims, vec![row]).await.map_err(StoreError::Grouped)?;
        Ok(inserted.first() == Some(&true))
    }

    /// Writes a run's finish (grouped with the finishes made meanwhile).
    async fn write_finish(&self, row: FinishRow) -> Result<Finished, StoreError> {
        let finished = Grouped::run(&self.writes.finishes, vec![row]).await.map_err(StoreError::Grouped)?;
        let finished = finished.into_iter().next().ok_or_else(|| StoreError::Grouped("no finish result".into()))?;
        finished.map_err(StoreError::Grouped)
    }

    /// Marks a run's reply as handed to the bus (grouped with the others marked meanwhile).
    async fn mark_delivered(&self, run_id: &str) -> Result<bool, StoreError> {
        let found = Grouped::run(&self.writes.deliveries, vec![run_id.to_owned()]).await;
        Ok(found.map_err(StoreError::Grouped)?.first() == Some(&true))
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

    /// A SQLite file is one host's: its processes share its directories by construction.
    fn spans_hosts(&self) -> bool {
        false
    }

    async fn record_shared_dir(&self, dir: &super::SharedDir) -> Result<super::SharedDir, StoreError> {
        Ok(dir.clone())
    }
}
