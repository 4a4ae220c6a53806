//! A system message made for a person (their cron job, their sub-agent) runs with that
//! person's tools, read when it runs; one made by the operator runs as owner. Through a real
//! worker, store and bus; the scripted model shows which tools each run was offered.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use switchboard::agent::{Agent, AgentSettings};
use switchboard::config::{ExecToolConfig, ToolsConfig};
use switchboard::provider::openai::{OpenAiConfig, OpenAiProvider};
use switchboard::store::sqlite::SqliteStore;
use switchboard::tools::{ToolLimits, ToolRegistry, register_local_tools};
use switchboard::users::{AccessPolicy, Identity, Level, UserStore};
use switchboard::worker::agents::SYSTEM_ON_BEHALF_OF;
use switchboard::worker::{Worker, WorkerSettings};
use switchboard_channels::bus::memory::MemoryBus;
use switchboard_channels::contract::{ChatAddress, InboundMessage, Origin, OutboundMessage};
use switchboard_channels::{Bus, BusExt};
use switchboard_testkit::fake_llm::FakeLlm;
use tokio_util::sync::CancellationToken;

/// `current_time` (guest), the file tools (user) and `exec` (admin) under the default levels.
fn agent(llm: &FakeLlm, workspace: std::path::PathBuf) -> Agent {
    let provider = OpenAiProvider::new(OpenAiConfig {
        name: "fake".into(),
        base_url: llm.base_url(),
        api_key: None,
        request_timeout: Duration::from_secs(30),
        stream: false,
        extra_headers: vec![],
    })
    .unwrap();
    let mut tools = ToolRegistry::with_builtins(ToolLimits::default());
    let config = ToolsConfig { exec: ExecToolConfig::default(), ..ToolsConfig::default() };
    register_local_tools(&mut tools, &config).unwrap();
    std::fs::create_dir_all(&workspace).unwrap();
    let settings = AgentSettings {
        name: "main".into(),
        system_prompt: "test".into(),
        model: "fake-model".into(),
        max_iterations: 3,
        max_tokens: None,
        temperature: None,
        stream: false,
        prices: Default::default(),
        workspace,
    };
    Agent::new(Arc::new(provider), tools, settings)
}

fn cron_message(id: &str, on_behalf_of: Option<&str>) -> InboundMessage {
    let chat = ChatAddress { channel: "telegram".into(), chat_id: "42".into(), thread_id: None, is_group: false };
    let origin = Origin { kind: "cron".into(), id: "job1".into() };
    let mut msg = InboundMessage::system(id.into(), chat, origin, "scheduled: tidy up");
    if let Some(person) = on_behalf_of {
        msg.metadata.insert(SYSTEM_ON_BEHALF_OF.into(), person.into());
    }
    msg
}

/// The names of the tools the model was offered in request `n`.
fn offered(llm: &FakeLlm, n: usize) -> Vec<String> {
    let requests = llm.requests();
    let tools = requests[n]["tools"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<String> =
        tools.iter().filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned)).collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_system_message_gets_the_tools_of_the_person_it_acts_for() {
    let dir = tempfile::tempdir().unwrap();
    let llm = FakeLlm::start().await;
    let bus = Arc::new(MemoryBus::new(16));
    let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let user = Identity::new("telegram", "7");
    store.set_level(&user, Level::User).await.unwrap();
    let settings = WorkerSettings { access: AccessPolicy::default(), ..WorkerSettings::default() };
    let worker = Worker::new(bus.clone(), store.clone(), Arc::new(agent(&llm, dir.path().join("ws"))), settings);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(worker.run(shutdown.clone()));
    let mut replies = bus.outbound("telegram").await.unwrap();

    let cases = [
        // Made by the operator (a heartbeat, `switchboard cron add`): the owner's tools.
        (None, &["current_time", "edit_file", "exec", "list_dir", "read_file", "write_file"][..]),
        // A user's job: their tools; `exec` is admin-only.
        (Some("telegram:7"), &["current_time", "edit_file", "list_dir", "read_file", "write_file"][..]),
        // A guest's (or someone unknown): only what guests get.
        (Some("telegram:99"), &["current_time"][..]),
    ];
    for (n, (person, expected)) in cases.iter().enumerate() {
        bus.publish_inbound(&cron_message(&format!("cron:job1:{n}"), *person)).await.unwrap();
        let delivery = tokio::time::timeout(Duration::from_secs(10), replies.next()).await.unwrap().unwrap().unwrap();
        let reply: OutboundMessage = delivery.decode().unwrap();
        delivery.ack().await.unwrap();
        assert_eq!(reply.content, "echo: scheduled: tidy up");
        assert_eq!(offered(&llm, n), *expected, "acting for {person:?}");
    }
    shutdown.cancel();
    task.await.unwrap().unwrap();
}
