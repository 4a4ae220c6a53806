//! Sub-agents on the shared worker harness: the owner writing on every channel, agents
//! answering as `<name>-model` with the `spawn` tool, and the sub-agent manager attached to
//! them and to the worker.

#![allow(dead_code)]

use std::time::Duration;

use serde_json::Value;
use switchboard::clock::Clock;
use switchboard::config::{BudgetsConfig, PermissionsConfig, UsersConfig};
use switchboard::subagents::SubagentSettings;
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard_channels::contract::{InboundMessage, Sender};
use switchboard_testkit::fake_llm::FakeLlm;

use crate::common::{AgentSpec, BusKind, Setup};

/// The owner who writes in the tests, on every channel.
pub const OWNER_ID: &str = "42";

/// `main` (and the agents the test adds) with sub-agents of default settings on the system clock.
pub fn setup(kind: BusKind) -> Setup {
    setup_with(kind, SubagentSettings::default(), switchboard::clock::system())
}

pub fn setup_with(kind: BusKind, settings: SubagentSettings, clock: Clock) -> Setup {
    Setup {
        settings: owner_settings(),
        agents: vec![agent("main")],
        subagents: Some((settings, clock)),
        ..Setup::new(kind)
    }
}

/// An agent answering as `<name>-model` in its own workspace.
pub fn agent(name: &str) -> AgentSpec {
    AgentSpec::new(name, &format!("{name}-model"), format!("ws-{name}"))
}

/// The owner on every channel the tests use, so every tool is offered.
pub fn owner_settings() -> WorkerSettings {
    let owners = ["telegram", "discord", "test"].iter().map(|c| format!("{c}:{OWNER_ID}")).collect();
    let users = UsersConfig { owners, ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    WorkerSettings { access, ..WorkerSettings::default() }
}

/// The owner's message in a chat, topic or thread.
pub fn message(channel: &str, chat: &str, thread: Option<&str>, is_group: bool, content: &str) -> InboundMessage {
    let sender = Sender { id: OWNER_ID.into(), name: "Olga".into(), is_bot: false };
    let mut msg = InboundMessage::user(channel, chat, sender, content);
    msg.thread_id = thread.map(str::to_owned);
    msg.is_group = is_group;
    msg.mentioned = true;
    msg
}

/// Polls `check` until it is true, for at most 15 s.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn system_text(request: &Value) -> String {
    request["messages"][0]["content"].as_str().unwrap_or_default().to_owned()
}

pub fn tool_names(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().map(|t| t["function"]["name"].as_str().unwrap_or_default().to_owned()).collect()
}

/// The requests made by sub-agents (their prompt is the minimal one).
pub fn subagent_requests(llm: &FakeLlm) -> Vec<Value> {
    llm.requests().into_iter().filter(|r| system_text(r).contains("prompt mode minimal")).collect()
}
