//! switchboard: the agent runtime and daemon wiring. Channel adapters and the bus live in the
//! `switchboard-channels` crate.

pub mod agent;
pub mod assembly;
pub mod cli;
pub mod clock;
pub mod config;
pub mod console;
pub mod context;
pub mod control;
pub mod daemon;
pub mod doctor;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod hygiene;
pub mod metrics;
pub mod prompt;
pub mod provider;
pub mod schedule;
pub mod scheduler;
pub mod store;
pub mod subagents;
pub mod systemd;
pub mod telemetry;
pub mod tokens;
pub mod tools;
pub mod users;
pub mod worker;
pub mod workspace;
pub mod zone;
