//! Test helpers: scripted OpenAI-compatible ([`fake_llm`]) and Anthropic ([`fake_anthropic`])
//! servers, a fake Telegram Bot API ([`fake_telegram`]), a fake Discord REST API and gateway
//! ([`fake_discord`]), and an isolated `nats-server` per test
//! ([`nats`]), a PostgreSQL database per test ([`postgres`]), a real Matrix homeserver per test
//! ([`synapse`]) with people on it ([`matrix_person`]). Dev-only; never linked into the daemon.

// matrix-sdk's futures nest deeper than the compiler's default limit when spawned.
#![recursion_limit = "256"]

pub mod daemon_process;
pub mod fake_anthropic;
pub mod fake_discord;
pub mod fake_llm;
mod fake_server;
pub mod fake_telegram;
pub mod lossy_proxy;
pub mod matrix_person;
pub mod nats;
pub mod postgres;
pub mod synapse;
