//! Test helpers: a scripted OpenAI-compatible server ([`fake_llm`]) and an isolated
//! `nats-server` per test ([`nats`]). Dev-only; never linked into the daemon.

pub mod fake_llm;
pub mod nats;
