//! Test helpers: scripted OpenAI-compatible ([`fake_llm`]) and Anthropic ([`fake_anthropic`])
//! servers, a fake Telegram Bot API ([`fake_telegram`]), a fake Discord REST API and gateway
//! ([`fake_discord`]), and an isolated `nats-server` per test
//! ([`nats`]), and a PostgreSQL database per test ([`postgres`]). Dev-only; never linked into
//! the daemon.

pub mod daemon_process;
pub mod fake_anthropic;
pub mod fake_discord;
pub mod fake_llm;
mod fake_server;
pub mod fake_telegram;
pub mod nats;
pub mod postgres;
