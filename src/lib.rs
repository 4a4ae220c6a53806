//! switchboard: the agent runtime and daemon wiring. Channel adapters and the bus live in the
//! `switchboard-channels` crate.

pub mod agent;
pub mod provider;
pub mod store;
pub mod tools;
pub mod worker;
