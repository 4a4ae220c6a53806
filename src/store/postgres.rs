//! The shared store: one PostgreSQL database for every worker and channel process, on any
//! number of hosts (`database_url = "postgres://…"`).
//!
//! The tables are the SQLite store's (`migrations/postgres`), and so is each method's meaning;
//! what differs is concurrency. PostgreSQL has many writers at once, so nothing here relies on
//! a database-wide write lock: a claim is decided by the unique inbound id, a finish locks its
//! run's row (`finish_runs`, one call), a new user's identity by its primary key.
//!
//! Times are stored as unix milliseconds (UTC), as in the SQLite store.

mod finish;
mod journal;
pub(super) mod lock;
mod memory_index;
mod migrate;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Postgres, Transaction};

use self::lock::SessionLock;

use super::finishing::{FinishRow, Finished};
use super::history_cache::HistoryCache;
use super::lock::{DatabaseLock, LockMode};
use super::shared::users::UserRows;
use super::users::User;
use super::values::now_millis;
use super::{RunKind, SessionStart, SharedDir, StoreError};
use crate::config::Identity;

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
        // The server's NOTICEs ("relation … already exists, skipping") would land in the log at
        // INFO on every start; warnings and errors still come through.
        let options = options.options([("client_min_messages", "warning")]);
        let shown = shown(&options);
        let open_err = |reason: String| StoreError::Open { path: shown.clone(), reason };
        // One connection first: a refused or failed login is reported at once with the server's
        // own words, where the pool would retry until its acquire timeout and say only that.
        let probe = options.connect().await.map_err(|e| open_err(e.to_string()))?;
        let _ = probe.close().await;
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

    pub(super) fn write_pool(&self) -> &PgPool {
        &self.pool
    }
}

impl super::shared::Backend for PostgresStore {
    type Db = sqlx::Postgres;

    fn pool(&self) -> &sqlx::Pool<sqlx::Postgres> {
        PostgresStore::pool(self)
    }

    fn write_pool(&self) -> &sqlx::Pool<sqlx::Postgres> {
        PostgresStore::write_pool(self)
    }

    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        PostgresStore::begin_write(self).await
    }

    fn history_cache(&self) -> &HistoryCache {
        &self.history
    }
}

impl super::shared::TurnReads for PostgresStore {
    async fn find_sender(&self, identity: &Identity) -> Result<Option<(User, String)>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        Postgres::find(&mut conn, identity).await
    }

    async fn read_session_start(&self, session_key: &str) -> Result<SessionStart, StoreError> {
        super::shared::sessions::read_start(&self.pool, session_key).await
    }
}

impl super::shared::RunWrites for PostgresStore {
    /// Inserts a new running run for `inbound_id`, and its session's row on first use, in one
    /// statement; false when the inbound id has a run already. The unique inbound id decides
    /// who is first, and the foreign key is checked at the statement's end, when the session
    /// row exists.
    async fn insert_claim(
        &self,
        run_id: &str,
        inbound_id: &str,
        session_key: &str,
        kind: RunKind,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "WITH session AS (INSERT INTO sessions (key, created_at, updated_at) VALUES ($3, $4, $4) \
             ON CONFLICT (key) DO NOTHING) \
             INSERT INTO runs (run_id, inbound_id, session_key, status, attempt, started_at, kind) \
             VALUES ($1, $2, $3, 'running', 1, $4, $5) ON CONFLICT (inbound_id) DO NOTHING",
        )
        .bind(run_id)
        .bind(inbound_id)
        .bind(session_key)
        .bind(now_millis())
        .bind(kind.as_str())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(inserted == 1)
    }

    /// Marks a run's reply as handed to the bus.
    async fn mark_delivered(&self, run_id: &str) -> Result<bool, StoreError> {
        let updated = sqlx::query("UPDATE runs SET reply_delivered = true WHERE run_id = $1")
            .bind(run_id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(updated == 1)
    }

    /// Writes a run's finish: one call of `finish_runs` (see `finish`).
    async fn write_finish(&self, row: FinishRow) -> Result<Finished, StoreError> {
        finish::write(&self.pool, row).await
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
        let options = self.pool.connect_options();
        Ok(DatabaseLock::Connection(SessionLock::take(&options, mode, DAEMON_LOCK, &self.shown).await?))
    }

    fn spans_hosts(&self) -> bool {
        true
    }

    async fn record_shared_dir(&self, dir: &SharedDir) -> Result<SharedDir, StoreError> {
        let recorded: Option<(String, String, String)> = sqlx::query_as(
            "WITH added AS (INSERT INTO shared_dirs (key, mark, path, host, recorded_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (key) DO NOTHING RETURNING mark, path, host) \
             SELECT mark, path, host FROM added UNION ALL SELECT mark, path, host FROM shared_dirs WHERE key = $1",
        )
        .bind(&dir.key)
        .bind(&dir.mark)
        .bind(&dir.path)
        .bind(&dir.host)
        .bind(now_millis())
        .fetch_optional(&self.pool)
        .await?;
        // Nothing when another process inserted the key after this statement's snapshot was
        // taken: its row is committed now.
        let (mark, path, host): (String, String, String) = match recorded {
            Some(row) => row,
            None => {
                sqlx::query_as("SELECT mark, path, host FROM shared_dirs WHERE key = $1")
                    .bind(&dir.key)
                    .fetch_one(&self.pool)
                    .await?
            }
        };
        Ok(SharedDir { key: dir.key.clone(), mark, path, host })
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
