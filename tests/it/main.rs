//! In-process integration tests: the daemon's parts assembled in the test process (through
//! the production builder), real SQLite files, real NATS servers, fake chat platforms and models.
//! One binary, one module per area.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed unwrap is a failed test")]

mod common;
mod cron_support;
mod stores;
#[path = "../support/mod.rs"]
mod support;

mod acting_for;
mod agents;
mod anthropic;
mod api_store;
mod approvals_store;
mod architecture;
mod bursts;
mod compaction;
mod control;
mod control_desk;
mod cron;
mod cron_clock;
mod delivery_record;
mod discord;
mod discord_buttons;
mod docs;
mod finish_rule;
mod group_chat;
mod groups;
mod heartbeat;
mod hygiene;
mod journal;
mod limits;
mod memory_embeddings;
mod memory_scopes;
mod memory_search;
mod model_windows;
mod month_cost;
mod owner_commands;
mod prompt_cache;
mod provider;
mod query_plans;
mod run_limits;
mod sessions;
mod small_windows;
mod store;
mod store_memory;
mod store_shared;
mod stored_data;
mod subagents;
mod telegram;
mod tool_attacks;
mod traces;
mod turn_writes;
mod usage_ledger;
mod users;
mod vision;
mod voice;
mod web_attacks;
mod worker;
