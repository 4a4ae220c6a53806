//! Things that happen on a schedule: cron jobs (their scheduler, the `cron` tool and the hooks
//! the worker calls during a cron run; the `switchboard cron` command is in [`crate::cli`])
//! and heartbeat wake-ups.

pub mod cron;
pub mod heartbeat;
pub mod hooks;
pub mod job;
pub mod owner_job;
pub mod spec;
pub mod tool;

pub use cron::{CronError, CronScheduler, CronSettings, TickReport};
pub use tool::CronTool;
