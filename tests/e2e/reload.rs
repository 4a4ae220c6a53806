//! SIGHUP through the real daemon: a changed config applies from the next turn (operator
//! instructions, permissions, a new agent with its binding) without a restart; a broken one is
//! refused with its error and the running config stays.

use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch};
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::FakeLlm;

const FIRST: &str = r#"
[agent]
system_prompt = "OPERATOR-ONE"
"#;

const SECOND: &str = r#"
[agent]
system_prompt = "OPERATOR-TWO"

[permissions.tools]
current_time = "owner"

[agents.helper]
system_prompt = "HELPER-AGENT"

[[bindings]]
agent = "helper"
chat = "api:h"
"#;

async fn wait_for_logged(daemon: &Daemon, needle: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while daemon.logs().matches(needle).count() < count {
        assert!(Instant::now() < deadline, "the log never showed {needle:?} {count} times:\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The system prompt, offered tools and answer of one turn in `chat`.
async fn turn(daemon: &Daemon, llm: &FakeLlm, chat: &str) -> (String, Vec<String>, Value) {
    llm.forget_requests();
    let (status, body) = daemon.post(json!({"chat_id": chat, "sender": "guest", "content": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    let request = &llm.requests()[0];
    let prompt = request["messages"][0]["content"].as_str().unwrap().to_owned();
    let tools = request["tools"].as_array().map(Vec::as_slice).unwrap_or_default();
    let tools = tools.iter().filter_map(|tool| tool["function"]["name"].as_str()).map(str::to_owned).collect();
    (prompt, tools, body)
}

#[tokio::test]
async fn sighup_applies_a_valid_config_from_the_next_turn_and_refuses_a_broken_one() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.toml");
    std::fs::write(&path, FIRST).unwrap();
    let mut daemon =
        Launch::new(dir.path(), "reload", &["run", "--config", path.to_str().unwrap()]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;

    let (prompt, tools, _) = turn(&daemon, &llm, "g").await;
    assert!(prompt.contains("OPERATOR-ONE"), "{prompt}");
    assert!(tools.contains(&"current_time".to_owned()), "a guest gets current_time by default: {tools:?}");

    std::fs::write(&path, SECOND).unwrap();
    daemon.signal("HUP");
    wait_for_logged(&daemon, "config reloaded", 1).await;
    let (prompt, tools, _) = turn(&daemon, &llm, "g").await;
    assert!(prompt.contains("OPERATOR-TWO") && !prompt.contains("OPERATOR-ONE"), "{prompt}");
    assert!(!tools.contains(&"current_time".to_owned()), "now owner-only: {tools:?}");
    let (prompt, _, _) = turn(&daemon, &llm, "h").await;
    assert!(prompt.contains("HELPER-AGENT"), "the new binding routes to the new agent:\n{prompt}");
    assert!(prompt.contains("agent helper; session helper/api:h"), "{prompt}");

    // A broken config: refused with the key that is wrong, and the running one stays.
    std::fs::write(&path, SECOND.replace("[agent]", "[agent]\nsytem_prompt = \"typo\"")).unwrap();
    daemon.signal("HUP");
    wait_for_logged(&daemon, "config reload refused", 1).await;
    assert!(daemon.logs().contains("agent.sytem_prompt"), "the refusal names the key:\n{}", daemon.logs());
    let (prompt, _, _) = turn(&daemon, &llm, "g").await;
    assert!(prompt.contains("OPERATOR-TWO"), "{prompt}");
    assert!(daemon.is_alive());
}

/// Tokens are security: a reload that sets them closes the API from the next request, an
/// admin-only token may send too, and the log names each changed setting that needs a restart.
#[tokio::test]
async fn a_reload_applies_api_tokens_at_once_and_names_what_needs_a_restart() {
    use switchboard_channels::api::access::token_sha256_hex;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.toml");
    std::fs::write(&path, "").unwrap();
    let mut daemon =
        Launch::new(dir.path(), "tokens", &["run", "--config", path.to_str().unwrap()]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    // Chat channels enabled (the default) without a token say so, once each.
    let logs = daemon.logs();
    for (name, variable) in [("Telegram", "TELEGRAM_BOT_TOKEN"), ("Discord", "DISCORD_BOT_TOKEN")] {
        let line = format!("{name} is not running: it is enabled but has no token; set {variable}");
        assert_eq!(logs.matches(&line).count(), 1, "{line}:\n{logs}");
    }
    let ask = json!({"chat_id": "t", "content": "hi"});
    assert_eq!(daemon.post(ask.clone()).await.0, 200, "open on loopback without a token");

    let config = format!(
        "[channels.api]\ntoken = \"sk-reloaded-secret\"\n\n[channels.api.tokens.ops]\nsha256 = \"{}\"\n\
         scopes = [\"admin\"]\n\n[channels.telegram]\nenabled = false\n\n[worker]\nmax_concurrent_runs = 3\n",
        token_sha256_hex("sk-ops-admin-secret")
    );
    std::fs::write(&path, config).unwrap();
    daemon.signal("HUP");
    wait_for_logged(&daemon, "config reloaded", 1).await;
    assert_eq!(daemon.post(ask.clone()).await.0, 401, "the new token is in force at once");
    let (status, body) = daemon.post_with(ask.clone(), Some("sk-reloaded-secret")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = daemon.post_with(ask, Some("sk-ops-admin-secret")).await;
    assert_eq!(status, 200, "an admin token may send too: {body}");
    let logs = daemon.logs();
    assert!(logs.contains("the API's tokens changed: in force from the next request"), "{logs}");
    assert!(logs.contains("these changed settings need a restart to apply: channels.telegram, worker"), "{logs}");
}

/// A setting that needs a restart is judged by what runs, not by the last file read: a reload
/// that moves the API's listen address to loopback moves no listener, so a later reload that
/// removes the token is refused, and the API on every address stays closed to callers
/// without it.
#[tokio::test]
async fn a_listen_address_not_yet_applied_does_not_let_a_reload_open_a_public_api() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.toml");
    let port = crate::support::free_port();
    let config = |listen: &str, token: bool| {
        let token = if token { "token = \"sk-public-secret\"\n" } else { "" };
        format!("[channels.api]\nlisten = \"{listen}:{port}\"\n{token}")
    };
    std::fs::write(&path, config("0.0.0.0", true)).unwrap();
    let mut daemon = Launch::new(dir.path(), "listen", &["run", "--config", path.to_str().unwrap()])
        .listen_in_config(port)
        .llm(&llm.base_url())
        .spawn();
    daemon.wait_healthy().await;
    let ask = json!({"chat_id": "l", "content": "hi"});
    assert_eq!(daemon.post(ask.clone()).await.0, 401);

    std::fs::write(&path, config("127.0.0.1", true)).unwrap();
    daemon.signal("HUP");
    wait_for_logged(&daemon, "need a restart to apply: channels.api", 1).await;

    std::fs::write(&path, config("127.0.0.1", false)).unwrap();
    daemon.signal("HUP");
    wait_for_logged(&daemon, "config reload refused", 1).await;
    let logs = daemon.logs();
    let refusal = logs.lines().find(|line| line.contains("config reload refused")).unwrap();
    assert!(refusal.contains(&format!("the API listens on 0.0.0.0:{port}, beyond loopback")), "{refusal}");
    assert_eq!(daemon.post(ask.clone()).await.0, 401, "the token stays in force");
    let (status, body) = daemon.post_with(ask, Some("sk-public-secret")).await;
    assert_eq!(status, 200, "{body}");

    // Until a restart, every reload names the listen address as not applied.
    std::fs::write(&path, config("127.0.0.1", true)).unwrap();
    daemon.signal("HUP");
    wait_for_logged(&daemon, "need a restart to apply: channels.api", 2).await;
}
