//! End to end through the real binary: Anthropic as the only provider (from the environment),
//! and a failing OpenAI-compatible primary with an Anthropic fallback (from a config file),
//! with the run's cost in the reply and in `switchboard runs`.

use crate::support::{Launch, run_to_exit};
use serde_json::json;
use switchboard_testkit::fake_anthropic::FakeAnthropic;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

#[tokio::test]
async fn anthropic_key_alone_runs_the_agent() {
    let anthropic = FakeAnthropic::start_with_key("sk-ant-e2e-secret").await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"])
        .env("ANTHROPIC_API_KEY", "sk-ant-e2e-secret")
        .env("ANTHROPIC_BASE_URL", &anthropic.base_url())
        .env("SWITCHBOARD_MODEL", "claude-e2e")
        .spawn();
    daemon.wait_healthy().await;

    let (status, body) = daemon.post(json!({"chat_id": "me", "content": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "echo: hi");
    assert_eq!(body["model"], "anthropic/claude-e2e");
    // No prices configured: the cost is unknown, not zero.
    assert!(body["cost_usd"].is_null(), "{body}");
    let (_, body) = daemon.post(json!({"chat_id": "me", "content": "again"})).await;
    assert_eq!(body["reply"], "echo: again");
    let second = &anthropic.requests()[1];
    // The system prompt as a text block, marked as a prompt-cache breakpoint.
    let system = &second["system"][0];
    assert!(system["text"].as_str().is_some_and(|text| !text.is_empty()), "{second}");
    assert_eq!(system["cache_control"], json!({"type": "ephemeral"}), "{second}");
    let roles: Vec<&str> = second["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert!(!daemon.logs().contains("sk-ant-e2e-secret"), "the API key leaked into the logs");
}

#[tokio::test]
async fn failing_openai_primary_falls_back_to_anthropic_and_cost_is_recorded() {
    let (openai, anthropic) = (FakeLlm::start().await, FakeAnthropic::start().await);
    for _ in 0..4 {
        openai.push(Scripted::server_error());
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    let text = format!(
        r#"
        [agent]
        models = ["primary/gpt-e2e", "backup/claude-e2e"]
        [providers.primary]
        base_url = "{openai}"
        api_key = "sk-openai-e2e"
        max_retries = 1
        [providers.backup]
        kind = "anthropic"
        base_url = "{anthropic}"
        api_key = "sk-ant-e2e"
        max_retries = 0
        [prices."claude-e2e"]
        input_per_mtok = 3.0
        output_per_mtok = 15.0
        "#,
        openai = openai.base_url(),
        anthropic = anthropic.base_url(),
    );
    std::fs::write(&config, text).unwrap();
    let config_arg = config.to_str().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["--config", config_arg, "run"]).spawn();
    daemon.wait_healthy().await;

    let (status, body) = daemon.post(json!({"chat_id": "me", "content": "hello"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "echo: hello");
    assert_eq!(body["model"], "backup/claude-e2e");
    let cost = body["cost_usd"].as_f64().expect("a cost for a priced model");
    assert!(cost > 0.0, "{body}");
    assert_eq!(openai.requests().len(), 2, "one try and one retry before failing over");
    daemon.wait_for_log("failing over to the next in the chain").await;
    daemon.wait_for_log("answered by a fallback model").await;

    let (status, stderr, stdout) = run_to_exit(dir.path(), &["--config", config_arg, "runs"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("COST") && stdout.contains(&format!("${cost:.4}")), "{stdout}");
    assert!(stdout.contains("backup/claude-e2e"), "{stdout}");
}
