//! `/model` through the real daemon: the agent's chain is listed, a chat picks a model that is
//! then asked first (another chat keeps the chain's order), `/status` shows it, and the pick
//! outlives a restart.

use crate::support::Launch;
use serde_json::json;
use switchboard_testkit::fake_llm::FakeLlm;

async fn say(daemon: &crate::support::Daemon, chat: &str, text: &str) -> String {
    let (status, body) = daemon.post(json!({"chat_id": chat, "content": text})).await;
    assert_eq!(status, 200, "{body}");
    body["reply"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_chat_picks_a_model_of_the_chain_for_itself() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let launch = || {
        Launch::new(dir.path(), "models", &["run"])
            .llm(&llm.base_url())
            .env("SWITCHBOARD_AGENT__MODELS", r#"["openai/model-a", "openai/model-b"]"#)
            .spawn()
    };
    let mut daemon = launch();
    daemon.wait_healthy().await;
    let asked = || llm.requests().last().unwrap()["model"].as_str().unwrap().to_owned();

    let listing = say(&daemon, "a", "/model").await;
    assert!(listing.contains("1. openai/model-a\n2. openai/model-b"), "{listing}");
    say(&daemon, "a", "hi").await;
    assert_eq!(asked(), "model-a");

    assert_eq!(say(&daemon, "a", "/model model-b").await, "This chat now uses openai/model-b first.");
    say(&daemon, "a", "hi again").await;
    assert_eq!(asked(), "model-b");
    say(&daemon, "b", "hello").await;
    assert_eq!(asked(), "model-a", "another chat keeps the chain's order");
    assert!(say(&daemon, "a", "/status").await.starts_with("Model: openai/model-b\n"));
    let unknown = say(&daemon, "a", "/model gpt-9").await;
    assert!(unknown.starts_with("\"gpt-9\" is not one of this agent's models"), "{unknown}");

    // The pick is the session's, stored: a restarted daemon keeps it.
    drop(daemon);
    let mut daemon = launch();
    daemon.wait_healthy().await;
    say(&daemon, "a", "after the restart").await;
    assert_eq!(asked(), "model-b");
    assert_eq!(say(&daemon, "a", "/model default").await, "This chat uses the agent's models in order again.");
    say(&daemon, "a", "back").await;
    assert_eq!(asked(), "model-a");
}
