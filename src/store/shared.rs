//! Implementations both stores share: the same SQL runs on SQLite and on PostgreSQL, so each
//! is written once, as an ordinary generic implementation over [`Backend`], which
//! [`super::sqlite::SqliteStore`] and [`super::postgres::PostgresStore`] implement.
//!
//! sqlx's types differ per database, and Rust does not carry a trait's `where` clauses to its
//! users, so each implementation states the sqlx bounds its queries need (which values it binds
//! and decodes) in its own `where` clause; the compiler checks them against both databases.

mod api;
mod approvals;
mod cron;
mod deliveries;
mod heartbeat;
mod lenient;
pub(super) mod memory;
mod pairing;
pub(super) mod runs;
mod subagents;
mod usage;
mod users;
mod windows;

use sqlx::Transaction;

use super::finishing::{FinishRow, Finished};
use super::history_cache::HistoryCache;
use super::{RunKind, StoreError};

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

    /// Removes a file's chunks from the memory index (SQLite's full-text index must be told).
    fn remove_file_chunks(
        tx: &mut Transaction<'static, Self::Db>,
        root: &str,
        path: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
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
