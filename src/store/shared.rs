//! Implementations both stores share: the same SQL runs on SQLite and on PostgreSQL, and only
//! sqlx's types differ per database, so each is written once as a macro and expanded for
//! [`super::sqlite::SqliteStore`] and [`super::postgres::PostgresStore`].

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
