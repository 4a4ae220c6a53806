//! Cron jobs and heartbeat wake-ups.

pub mod schedule;
