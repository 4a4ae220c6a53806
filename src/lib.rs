//! switchboard: the agent runtime and daemon wiring. Channel adapters and the bus live in the
//! `switchboard-channels` crate.

pub mod config;
pub mod provider;
pub mod store;
