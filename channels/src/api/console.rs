//! The owner console: the admin routes under `/v1/admin/…` the web page's console uses (people
//! and levels, pairing requests, tool approvals, cron jobs and heartbeats, usage, health), each
//! refused to a token without the admin scope. The daemon answers them through a
//! [`desk::ConsoleDesk`]; this crate sees only the trait and the plain views it returns.

pub mod desk;
pub(super) mod routes;
pub mod views;
