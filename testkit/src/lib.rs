//! Test helpers: scripted OpenAI-compatible ([`fake_llm`]) and Anthropic ([`fake_anthropic`])
//! servers, and an isolated `nats-server` per test ([`nats`]). Dev-only; never linked into
//! the daemon.

pub mod fake_anthropic;
pub mod fake_llm;
pub mod nats;
