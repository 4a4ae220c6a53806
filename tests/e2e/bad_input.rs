//! The bad-input corpus (issue 13): hostile and broken input through every door of the real
//! daemon, in both shapes (`switchboard run` with the in-process bus and SQLite, and
//! `switchboard run --nats` on a JetStream server the test spawns). Expected everywhere: a
//! clear error or a dead letter with its reason, no crash, bounded memory, nothing lost and
//! nothing answered twice; after each corpus the daemon still answers a normal message.
//!
//! Figures (time per corpus, the burst's VmRSS before and after) are printed to stderr:
//! `cargo nextest run -E 'binary(e2e) and test(/^bad_input::/)' --no-capture`.

mod api;
mod burst;
mod discord;
mod files;
mod limits;
mod nats_subjects;
mod rig;
mod telegram;
