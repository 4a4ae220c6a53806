//! End to end through the real binary: a chain of two models with different context windows
//! (`agent.models` with a table entry), the primary on a hosted-like server that fails with a
//! 500 when told to, the fallback on a server whose window is 4,096 tokens (it refuses a longer
//! request with OpenAI's `context_length_exceeded`, naming its window). The conversation is
//! longer than the fallback's window but well within the primary's; or, in a tool-heavy run,
//! the run's own tool results are.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Quirks, Scripted, request_tokens};

use crate::support::{Daemon, Launch};

/// The fallback server's window.
const SMALL_WINDOW: usize = 4096;

/// The two servers: a hosted-like primary and the small fallback.
async fn servers() -> (FakeLlm, FakeLlm) {
    let small = Quirks { context_window: Some(SMALL_WINDOW), ..Quirks::default() };
    (FakeLlm::start().await, FakeLlm::start_with_quirks(small).await)
}

/// The config: `primary/big`, then `small/tiny` with `small_window` configured; neither retried.
fn write_config(dir: &Path, primary: &FakeLlm, small: &FakeLlm, small_window: usize) -> String {
    let path = dir.join("switchboard.toml");
    let text = format!(
        r#"
        [agent]
        models = ["primary/big", {{ model = "small/tiny", context_window = {small_window} }}]
        [providers.primary]
        base_url = "{primary}"
        api_key = "sk-primary"
        max_retries = 0
        [providers.small]
        base_url = "{small}"
        api_key = "sk-small"
        max_retries = 0
        stream = false
        "#,
        primary = primary.base_url(),
        small = small.base_url(),
    );
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

async fn start(dir: &Path, config: &str) -> Daemon {
    start_with(dir, config, &[]).await
}

/// `start`, with more of the environment.
async fn start_with(dir: &Path, config: &str, env: &[(&str, &str)]) -> Daemon {
    // A guest without a budget, offered no tool: a short prompt, so the conversation is what
    // outgrows the small window.
    let mut launch = Launch::new(dir, "run", &["--config", config, "run"])
        .env("SWITCHBOARD_BUDGETS__GUEST", "0")
        .env("SWITCHBOARD_PERMISSIONS__TOOLS__CURRENT_TIME", "owner");
    for (key, value) in env {
        launch = launch.env(key, value);
    }
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;
    daemon
}

/// Turn `n`'s message: about 600 tokens, marked `turn-<n>:`.
fn turn_text(n: usize) -> String {
    format!("turn-{n}: {}", "The quick brown fox jumps over the lazy dog. ".repeat(53).trim())
}

/// Six exchanges of about 1,200 tokens each on the primary: 7,000 tokens and more with the prompt.
async fn a_long_conversation(daemon: &Daemon) {
    for n in 0..6 {
        let body = daemon.say(&turn_text(n)).await;
        assert_eq!(body["model"], "primary/big", "{body}");
    }
}

fn sent(request: &Value, marker: &str) -> bool {
    request["messages"].to_string().contains(marker)
}

#[tokio::test]
async fn a_smaller_fallback_gets_the_request_refitted_to_its_window_and_answers() {
    let (primary, small) = servers().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &primary, &small, SMALL_WINDOW);
    let daemon = start(dir.path(), &config).await;
    a_long_conversation(&daemon).await;

    primary.push(Scripted::server_error());
    let body = daemon.say("and now?").await;
    assert_eq!(
        (body["reply"].as_str(), body["model"].as_str()),
        (Some("echo: and now?"), Some("small/tiny")),
        "{body}"
    );
    let requests = small.requests();
    assert_eq!(requests.len(), 1, "one request, which the small model took: {requests:?}");
    let request = &requests[0];
    assert!(request_tokens(request) <= SMALL_WINDOW, "{} tokens", request_tokens(request));
    assert!(!sent(request, "turn-0:"), "the oldest history goes first");
    assert!(sent(request, "turn-5:") && sent(request, "and now?"), "the newest stays");
    daemon.wait_for_log("refitted the request to the window of the model failed over to").await;
}

#[tokio::test]
async fn a_window_a_fallback_names_is_its_own_and_kept_across_a_restart() {
    let (primary, small) = servers().await;
    let dir = tempfile::tempdir().unwrap();
    // The small server's window is configured larger than it is: it refuses and names 4096.
    let config = write_config(dir.path(), &primary, &small, 2 * SMALL_WINDOW);
    let mut daemon = start(dir.path(), &config).await;
    a_long_conversation(&daemon).await;

    // The primary fails twice: before the refusal, and when the turn is tried with less history.
    primary.push(Scripted::server_error());
    primary.push(Scripted::server_error());
    let body = daemon.say("and now?").await;
    assert_eq!(body["model"], "small/tiny", "{body}");
    daemon.wait_for_log(r#"{ model = "small/tiny", context_window = 4096 }"#).await;
    let requests = small.requests();
    assert!(request_tokens(&requests[0]) > SMALL_WINDOW, "fitted to the configured 8192 at first");
    assert!(request_tokens(requests.last().unwrap()) <= SMALL_WINDOW);
    // The primary's window is not the fallback's: its next request carries the whole conversation.
    let body = daemon.say("and the primary?").await;
    assert_eq!(body["model"], "primary/big", "{body}");
    assert!(sent(primary.requests().last().unwrap(), "turn-0:"), "the primary's budget shrank");

    daemon.signal("TERM");
    daemon.wait_exit(Duration::from_secs(20)).await;
    let daemon = start(dir.path(), &config).await;
    // Two more long exchanges: refitted to the configured 8192, the request would pass 4096.
    for n in 6..8 {
        assert_eq!(daemon.say(&turn_text(n)).await["model"], "primary/big");
    }
    primary.push(Scripted::server_error());
    let asked_before = small.requests().len();
    let body = daemon.say(&turn_text(8)).await;
    assert_eq!(body["model"], "small/tiny", "{body}");
    let requests = small.requests();
    assert_eq!(requests.len(), asked_before + 1, "no refusal first: {:?}", &requests[asked_before..]);
    assert!(request_tokens(requests.last().unwrap()) <= SMALL_WINDOW);
    daemon.wait_for_log("using the context window the model's server named before the restart").await;
}

/// The primary reads two large files, then fails: the fallback gets the run with no history to
/// drop, its older tool result shortened to fit its window, and answers.
#[tokio::test]
async fn a_tool_heavy_run_failing_over_to_a_smaller_model_has_its_older_results_shortened() {
    let (primary, small) = servers().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &primary, &small, SMALL_WINDOW);
    // The guest is offered `read_file` alone; each file is about 3,000 tokens.
    let daemon = start_with(dir.path(), &config, &[("SWITCHBOARD_PERMISSIONS__TOOLS__READ_FILE", "guest")]).await;
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    for name in ["a", "b"] {
        let line = format!("{name} {}\n", "lorem ipsum ".repeat(8));
        std::fs::write(workspace.join(format!("{name}.txt")), line.repeat(12_000 / line.len())).unwrap();
    }
    for name in ["a", "b"] {
        primary.push(Scripted::ToolCalls(vec![("read_file".into(), json!({"path": format!("{name}.txt")}))]));
    }
    primary.push(Scripted::server_error());
    small.push(Scripted::Text("Both read.".into()));

    let body = daemon.say("read a.txt and b.txt").await;
    assert_eq!((body["reply"].as_str(), body["model"].as_str()), (Some("Both read."), Some("small/tiny")), "{body}");
    let requests = small.requests();
    assert_eq!(
        requests.len(),
        1,
        "taken at once, no overflow first: {:?}",
        requests.iter().map(request_tokens).collect::<Vec<_>>()
    );
    assert!(request_tokens(&requests[0]) <= SMALL_WINDOW, "{} tokens", request_tokens(&requests[0]));
    let results = tool_results(&requests[0]);
    assert_eq!(results.len(), 2, "{results:#?}");
    assert!(results[0].contains("[shortened to fit the context window:"), "{}", results[0]);
    assert!(results[0].contains("a lorem ipsum"), "the head stays: {}", results[0]);
    assert!(sent(&requests[0], "read a.txt and b.txt"), "the question stays");
    daemon.wait_for_log("refitted the request to the window of the model failed over to").await;
    // Only the fallback's request was shortened: the primary's next turn has the results whole.
    let next = daemon.say("thanks").await;
    assert_eq!(next["model"], "primary/big", "{next}");
    let whole = tool_results(primary.requests().last().unwrap());
    assert!(whole.iter().all(|result| !result.contains("[shortened")), "{whole:#?}");
}

fn tool_results(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().unwrap();
    messages.iter().filter(|m| m["role"] == "tool").filter_map(|m| m["content"].as_str()).map(str::to_owned).collect()
}
