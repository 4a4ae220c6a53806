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

/// A store the shared SQL runs on: its database and its two connection pools.
pub(crate) trait Backend: Send + Sync + 'static {
    type Db: sqlx::Database;

    /// The pool reads go through.
    fn pool(&self) -> &sqlx::Pool<Self::Db>;

    /// The pool writes go through (on SQLite one connection, so writes never wait on a lock).
    fn write_pool(&self) -> &sqlx::Pool<Self::Db>;
}

// What the shared SQL of cron, users, pairing, sub-agents, approvals, heartbeats and the memory
// index needs beyond `Backend`, each written per backend (`sqlite.rs`, `postgres.rs`).

/// The rows a statement changed. sqlx reports it per database, with no trait over them.
pub(crate) trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

/// A store's check-then-act write transaction: serialised with every other one of the
/// deployment (SQLite's write lock taken up front, PostgreSQL's advisory lock).
pub(crate) trait WriteTransactions: Backend {
    fn begin_write(
        &self,
    ) -> impl Future<Output = Result<sqlx::Transaction<'static, Self::Db>, super::StoreError>> + Send;
}
