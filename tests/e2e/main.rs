//! End-to-end tests: the real `switchboard` binary run as a child process against fake chat
//! platforms and models on loopback. One binary, one module per area.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed unwrap is a failed test")]

#[path = "../it/stores.rs"]
mod stores;
#[path = "../support/mod.rs"]
mod support;

mod agent_loop;
mod agents;
mod api_limits;
mod api_openai;
mod api_overload;
mod api_retries;
mod api_sessions;
mod approvals;
mod bad_input;
mod chaos;
mod console;
mod console_decisions;
mod console_web;
mod cron;
mod discord;
mod discord_commands;
mod discord_owner;
mod doctor;
mod embedded;
mod exec_secrets;
mod files_out;
mod local_model;
mod logs;
mod matrix;
mod mcp;
mod metrics;
mod model_windows;
mod nats;
mod nats_faults;
mod operations;
mod owner_buttons;
mod owner_commands;
mod pairing;
mod persona;
mod pg_lock;
mod providers;
mod reload;
mod sandbox;
mod scale_out;
mod session_prefs;
mod skills;
mod steady_state;
mod stored_data;
mod subagents;
mod systemd_units;
mod telegram;
mod tools;
mod wait_limit;
mod web;
mod web_chat;
mod workspace;
