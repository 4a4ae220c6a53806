//! Things that happen on a schedule: cron jobs, their scheduler, the `cron` tool and the
//! `switchboard cron` command.

pub mod cli;
pub mod cron;
pub mod job;
pub mod schedule;
pub mod spec;
pub mod tool;

pub use cron::{CronError, CronScheduler, CronSettings, TickReport};
pub use tool::CronTool;
