//! Implementations both stores share: the same SQL runs on SQLite and on PostgreSQL, so each
//! is written once, as an ordinary generic implementation over [`Backend`], which
//! [`super::sqlite::SqliteStore`] and [`super::postgres::PostgresStore`] implement.
//!
//! sqlx's types differ per database, and Rust does not carry a trait's `where` clauses to its
//! users, so each implementation states the sqlx bounds its queries need (which values it binds
//! and decodes) in its own `where` clause; the compiler checks them against both databases.
//! Statements that run inside a transaction are associated functions of a trait over the
//! database (`users::UserRows`, `cron::CronRows`, `pairing::PairingRows`), implemented once with
//! their bounds, so a caller names one bound (`B::Db: UserRows`) instead of repeating them.

mod api;
mod approvals;
mod cron;
pub(super) mod deliveries;
mod heartbeat;
pub(super) mod lenient;
pub(super) mod memory_index;
mod pairing;
pub(super) mod runs;
pub(super) mod sessions;
mod subagents;
mod usage;
pub(super) mod users;
mod windows;

use sqlx::Transaction;

use super::finishing::{FinishRow, Finished};
use super::history_cache::HistoryCache;
use super::users::User;
use super::{RunKind, SessionStart, StoreError};
use crate::config::Identity;

/// A store the shared SQL runs on: its database, its two connection pools, and the pieces each
/// backend does its own way.
pub(in crate::store) trait Backend: Send + Sync + 'static {
    type Db: sqlx::Database<QueryResult: RowsAffected>;

    /// The pool reads go through.
    fn pool(&self) -> &sqlx::Pool<Self::Db>;

    /// The pool writes go through (on SQLite one connection, so writes never wait on a lock).
    fn write_pool(&self) -> &sqlx::Pool<Self::Db>;

    /// Starts a write transaction that checks and then acts, serialised with every other such
    /// transaction on the database (SQLite's write lock, PostgreSQL's advisory lock).
    fn begin_write(&self) -> impl Future<Output = Result<Transaction<'static, Self::Db>, StoreError>> + Send;

    /// Sessions' recent history, for turns (see `history_cache`).
    fn history_cache(&self) -> &HistoryCache;
}

/// The writes of a turn, which each backend makes its own way: one round trip each.
pub(in crate::store) trait RunWrites: Backend {
    /// Inserts a new running run for `inbound_id` (and its session's row on first use); false
    /// when the inbound id has a run already.
    fn insert_claim(
        &self,
        run_id: &str,
        inbound_id: &str,
        session_key: &str,
        kind: RunKind,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Writes a run's finish (see `finish_rule`).
    fn write_finish(&self, row: FinishRow) -> impl Future<Output = Result<Finished, StoreError>> + Send;

    /// Marks the reply of run `run_id` as handed to the bus; false when there is no such run.
    fn mark_delivered(&self, run_id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// The reads of a turn, which each backend makes its own way (SQLite groups them).
pub(in crate::store) trait TurnReads: Backend {
    /// The user behind `identity` and the display name stored with it; `None` for a stranger.
    fn find_sender(
        &self,
        identity: &Identity,
    ) -> impl Future<Output = Result<Option<(User, String)>, StoreError>> + Send;

    /// The session's settings and head, read when its task starts (the defaults for a session
    /// without a row).
    fn read_session_start(&self, session_key: &str) -> impl Future<Output = Result<SessionStart, StoreError>> + Send;
}

/// How many rows a statement changed, which sqlx reports per database.
pub(in crate::store) trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::sqlite::SqliteQueryResult::rows_affected(self)
    }
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        sqlx::postgres::PgQueryResult::rows_affected(self)
    }
}

/// What each store's search engine decides in the memory index (`memory_index`): FTS5 on
/// SQLite, a generated `tsvector` on PostgreSQL.
pub(in crate::store) trait SearchEngine: Backend {
    /// The ranked hits of a query with terms, somewhere to look and a limit.
    fn search(
        &self,
        query: &super::memory_index::MemoryQuery<'_>,
    ) -> impl Future<Output = Result<Vec<super::memory_index::MemoryHit>, super::StoreError>> + Send;

    /// The files' chunks in the order of `query.paths`, `query.limit` at most.
    fn file_chunks(
        &self,
        query: &super::memory_index::ChunkQuery<'_>,
    ) -> impl Future<Output = Result<Vec<memory_index::ChunkRow>, super::StoreError>> + Send;

    /// The kept vectors of `model` for `hashes` (some), as stored: text hash and bytes.
    fn cached_vectors(
        &self,
        model: &str,
        hashes: &[String],
    ) -> impl Future<Output = Result<Vec<(String, Vec<u8>)>, super::StoreError>> + Send;

    /// Adds one chunk, and its words to the index.
    fn add_chunk(
        tx: &mut sqlx::Transaction<'static, Self::Db>,
        root: &str,
        path: &str,
        lines: (i64, i64),
        text: &str,
        scope: Option<&str>,
    ) -> impl Future<Output = Result<(), super::StoreError>> + Send;

    /// Removes a file's chunks, and their words from the index.
    fn remove_file_chunks(
        tx: &mut sqlx::Transaction<'static, Self::Db>,
        root: &str,
        path: &str,
    ) -> impl Future<Output = Result<(), super::StoreError>> + Send;
}
