//! Named agents through the in-process worker: a bound chat gets its agent's persona,
//! model, tools and history; other chats get the default agent.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use crate::common::{AgentSpec, BusKind, Setup};
use switchboard::config::{BindingConfig, BudgetsConfig, PermissionsConfig, UsersConfig};
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
use switchboard_channels::{BusExt, Deliveries};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

fn msg(chat: &str, content: &str) -> InboundMessage {
    InboundMessage::user("test", chat, Sender { id: "u1".into(), name: "U".into(), is_bot: false }, content)
}

async fn next_reply(out: &mut Deliveries) -> OutboundMessage {
    let delivery = tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("no reply").unwrap().unwrap();
    let reply = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    reply
}

/// The sender is an owner, so the level filter offers every tool and only the agent's
/// allowlist limits them.
fn owner_settings() -> WorkerSettings {
    let users = UsersConfig { owners: vec!["test:u1".into()], ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    WorkerSettings { access, ..WorkerSettings::default() }
}

fn system_text(request: &Value) -> String {
    request["messages"][0]["content"].as_str().unwrap().to_owned()
}

fn tool_names(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect()
}

fn all_text(request: &Value) -> String {
    request["messages"].to_string()
}

#[tokio::test]
async fn a_bound_chat_gets_its_agent_and_other_chats_the_default() {
    let llm = FakeLlm::start().await;
    for reply in ["main one", "support one", "support two"] {
        llm.push(Scripted::Text(reply.into()));
    }
    let setup = Setup {
        settings: owner_settings(),
        llm: Some(llm),
        agents: vec![
            AgentSpec::new("main", "main-model", "workspace"),
            AgentSpec::new("support", "support-model", "agents/support").allow(&["current_time"]),
        ],
        bindings: vec![BindingConfig { agent: "support".into(), chat: "test:help".into(), ..BindingConfig::default() }],
        ..Setup::new(BusKind::InProcess)
    };
    let h = setup.start().await;
    std::fs::write(h.workspace.join("SOUL.md"), "You are Marvin, the main agent.").unwrap();
    std::fs::write(h.dir.path().join("agents/support/SOUL.md"), "You are Sparky, the support desk.").unwrap();
    let mut out = h.bus.outbound("test").await.unwrap();
    for (chat, text) in [("other", "hello main"), ("help", "first for support"), ("help", "second for support")] {
        h.bus.publish_inbound(&msg(chat, text)).await.unwrap();
        next_reply(&mut out).await;
    }
    let requests = h.llm.requests();
    assert_eq!(requests.len(), 3);
    let (main, support, support2) = (&requests[0], &requests[1], &requests[2]);

    // Persona and model: each agent's own.
    assert!(system_text(main).contains("Marvin"), "{}", system_text(main));
    assert!(!system_text(main).contains("Sparky"));
    assert!(system_text(support).contains("Sparky"), "{}", system_text(support));
    assert!(!system_text(support).contains("Marvin"));
    assert_eq!(main["model"], "main-model");
    assert_eq!(support["model"], "support-model");

    // Tools: the allowlist limits what is offered; the default agent offers all.
    assert_eq!(tool_names(support), ["current_time"]);
    assert!(tool_names(main).contains(&"message".to_owned()), "{:?}", tool_names(main));

    // Histories: the support session sees its own earlier turn and nothing of the other chat.
    assert!(all_text(support2).contains("first for support"));
    assert!(!all_text(support2).contains("hello main"));
    assert!(!all_text(support).contains("hello main"));

    // The default agent keeps the plain key; the support agent's is prefixed.
    assert_eq!(h.store.history("test:other", 10).await.unwrap().len(), 2);
    assert_eq!(h.store.history("support/test:help", 10).await.unwrap().len(), 4);
    assert!(h.store.history("test:help", 10).await.unwrap().is_empty());
    h.shutdown.cancel();
}
