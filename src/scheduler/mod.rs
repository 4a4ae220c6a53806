//! Things that happen on a schedule: cron jobs (their scheduler, the `cron` tool and the
//! `switchboard cron` command) and heartbeat wake-ups.

pub mod cli;
pub mod cron;
pub mod heartbeat;
pub mod job;
pub mod spec;
pub mod tool;

pub use cron::{CronError, CronScheduler, CronSettings, TickReport};
pub use tool::CronTool;
