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
