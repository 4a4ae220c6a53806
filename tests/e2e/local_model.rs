//! End to end through the real binary, with its default settings (streaming on, a 128k context
//! window configured), against a model server that behaves like llama-cpp-python's: no usage in
//! streamed answers, an empty 200 stream for a request over its window, strict requests.

use crate::support::{Daemon, Launch, run_to_exit};
use serde_json::Value;
use switchboard_testkit::fake_llm::{FakeLlm, Quirks, Scripted};

/// The daemon against `llm`, with extra environment.
async fn daemon(dir: &std::path::Path, llm: &FakeLlm, env: &[(&str, &str)]) -> Daemon {
    let mut launch = Launch::new(dir, "run", &["run"])
        .env("OPENAI_BASE_URL", &llm.base_url())
        .env("SWITCHBOARD_MODEL", "smollm2")
        // A failing request is not retried: these tests script failures one by one.
        .env("SWITCHBOARD_PROVIDER__MAX_RETRIES", "0");
    for (key, value) in env {
        launch = launch.env(key, value);
    }
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;
    daemon
}

#[tokio::test]
async fn streamed_answers_without_usage_are_charged_an_estimate() {
    let llm = FakeLlm::start_with_quirks(Quirks::llama_cpp(1_000_000)).await;
    let dir = tempfile::tempdir().unwrap();
    // A guest budget of a few turns: the estimate must use it up like reported usage would. The
    // guest is offered no tool: the server streams no answer to a request with tools (it is
    // then sent unstreamed, and unstreamed answers report their usage).
    let env = [("SWITCHBOARD_BUDGETS__GUEST", "6000"), ("SWITCHBOARD_PERMISSIONS__TOOLS__CURRENT_TIME", "owner")];
    let daemon = daemon(dir.path(), &llm, &env).await;
    let first = daemon.say("hello there").await;
    assert_eq!(first["reply"], "echo: hello there");
    let usage = &first["usage"];
    assert_eq!(usage["estimated"], true, "{first}");
    assert!(usage["input_tokens"].as_u64().unwrap() > 100, "the prompt is counted: {first}");
    assert!(usage["output_tokens"].as_u64().unwrap() > 0, "{first}");

    let status = daemon.say("/status").await;
    assert!(status["reply"].as_str().unwrap().contains("partly estimated"), "{status}");
    let mut turns = 1;
    let notice = loop {
        let body = daemon.say("and again").await;
        if body["reply"] != "echo: and again" {
            break body;
        }
        turns += 1;
        assert!(turns < 50, "the guest budget is never charged");
    };
    assert!(notice["reply"].as_str().unwrap().contains("allowance"), "{notice}");
    assert!(turns >= 2, "one turn cannot use a 6000-token budget: {turns}");

    let (status, out, _) = run_to_exit(dir.path(), &["runs"], &[]);
    assert!(status.success());
    assert!(out.lines().filter(|line| line.contains("completed")).all(|line| line.contains('~')), "{out}");
}

#[tokio::test]
async fn a_model_with_a_small_window_answers_with_the_default_config() {
    let llm = FakeLlm::start_with_quirks(Quirks::llama_cpp(2048)).await;
    let dir = tempfile::tempdir().unwrap();
    // The owner is offered every tool: the full prompt and the schemas alone pass 2048 tokens.
    let daemon = daemon(dir.path(), &llm, &[("SWITCHBOARD_USERS__OWNERS", "[\"api:api\"]")]).await;
    let first = daemon.say("hi").await;
    assert_eq!(first["reply"], "echo: hi", "{first}");
    daemon.wait_for_log("Set agent.context_window = 2048").await;
    daemon.wait_for_log("turns use the minimal prompt").await;
    // Streamed (empty), then not streamed (the server names its window), then within it:
    // streamed (empty again: llama-cpp-python streams nothing for tools with tool_choice "auto")
    // and not streamed, which answers. Requests with tools are not streamed after that.
    let requests = llm.requests();
    let streamed: Vec<bool> = requests.iter().map(|r| r["stream"] == true).collect();
    assert_eq!(streamed, [true, false, true, false], "{requests:?}");
    daemon.wait_for_log("requests with tools are sent unstreamed from now on").await;
    let last = requests.last().unwrap();
    assert!(switchboard_testkit::fake_llm::request_tokens(last) <= 2048);
    assert!(last["messages"][0]["content"].as_str().unwrap().contains("prompt mode minimal"));

    // A conversation longer than the window keeps being answered, one request per turn.
    let paragraph = "The quick brown fox jumps over the lazy dog. ".repeat(25);
    for n in 0..8 {
        let text = format!("{n}: {}", paragraph.trim());
        let body = daemon.say(&text).await;
        assert_eq!(body["reply"], format!("echo: {text}"), "turn {n}");
    }
    for n in 0..8 {
        let text = format!("{n}: {}", paragraph.trim());
        let sent = llm.requests().iter().filter(|r| last_user_text(r) == text).count();
        assert_eq!(sent, 1, "turn {n} needed a second request");
    }
    assert!(!daemon.logs().contains("could not read"), "{}", daemon.logs());
}

#[tokio::test]
async fn a_message_too_long_for_the_window_says_so_and_the_next_is_answered() {
    let llm = FakeLlm::start_with_quirks(Quirks::llama_cpp(2048)).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon(dir.path(), &llm, &[("SWITCHBOARD_AGENT__CONTEXT_WINDOW", "2048")]).await;
    let huge = daemon.say(&"word ".repeat(3000)).await;
    let reply = huge["reply"].as_str().unwrap();
    assert!(reply.contains("does not fit") && reply.contains("shorter message"), "{reply}");
    assert!(!reply.contains("try again in a moment"), "{reply}");
    let next = daemon.say("short one").await;
    assert_eq!(next["reply"], "echo: short one");
}

#[tokio::test]
async fn a_failed_turn_leaves_a_conversation_strict_templates_accept() {
    let quirks = Quirks { alternating_roles: true, ..Quirks::llama_cpp(1_000_000) };
    let llm = FakeLlm::start_with_quirks(quirks).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon(dir.path(), &llm, &[]).await;
    assert_eq!(daemon.say("first").await["reply"], "echo: first");
    llm.push(Scripted::server_error());
    let failed = daemon.say("second").await;
    assert!(failed["reply"].as_str().unwrap().contains("HTTP 500"), "{failed}");
    // The unanswered "second" is stored; the next request must still alternate.
    assert_eq!(daemon.say("third").await["reply"], "echo: third");
    let roles: Vec<String> = llm.requests().last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user", "assistant", "user"]);
}

#[tokio::test]
async fn a_bad_key_says_who_can_fix_it() {
    let llm = FakeLlm::start_with_key("sk-right").await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = daemon(dir.path(), &llm, &[("OPENAI_API_KEY", "sk-wrong")]).await;
    let reply = daemon.say("hi").await["reply"].as_str().unwrap().to_owned();
    assert!(reply.contains("API key") && reply.contains("owner"), "{reply}");
    assert!(!reply.contains("try again in a moment"), "{reply}");
}

#[tokio::test]
async fn a_window_named_while_dropping_history_is_kept_for_later_turns() {
    let llm = FakeLlm::start_with_quirks(Quirks::llama_cpp(4096)).await;
    let dir = tempfile::tempdir().unwrap();
    // A guest (without a budget) offered no tool: a short prompt, so only the growing
    // conversation passes the server's window (and a request with tools, which this server
    // streams nothing for, takes no second request).
    let env = [("SWITCHBOARD_BUDGETS__GUEST", "0"), ("SWITCHBOARD_PERMISSIONS__TOOLS__CURRENT_TIME", "owner")];
    let daemon = daemon(dir.path(), &llm, &env).await;
    let paragraph = "The quick brown fox jumps over the lazy dog.".repeat(30);
    let mut overflowed_at = None;
    for n in 0..12 {
        let text = format!("{n}: {paragraph}");
        assert_eq!(daemon.say(&text).await["reply"], format!("echo: {text}"), "turn {n}");
        // The turn's own model calls (compaction may add calls of its own).
        let sent = llm.requests().iter().filter(|r| last_user_text(r) == text).count();
        match overflowed_at {
            None if sent > 1 => overflowed_at = Some(n),
            None => {}
            Some(_) => assert_eq!(sent, 1, "turn {n} should fit the learned window at once"),
        }
    }
    assert!(overflowed_at.is_some(), "the conversation never reached the server's window");
    daemon.wait_for_log("Set agent.context_window = 4096").await;
}

fn last_user_text(request: &Value) -> &str {
    let messages = request["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let text = messages.iter().rev().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str());
    switchboard_testkit::fake_llm::without_context_line(text.unwrap_or_default())
}

/// `agent.tool_choice = "none"`, as docs/local-models.md advises for a model that cannot use
/// tools: no schema is sent (nor counted against the window, nor listed in the prompt), and a
/// compaction makes no memory flush, which could write nothing without a tool call.
#[tokio::test]
async fn with_tool_choice_none_no_tools_are_sent_and_a_compaction_has_no_flush() {
    let llm = FakeLlm::start_with_quirks(Quirks::llama_cpp(4096)).await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("SWITCHBOARD_USERS__OWNERS", "[\"api:api\"]"),
        ("SWITCHBOARD_AGENT__TOOL_CHOICE", "none"),
        ("SWITCHBOARD_AGENT__CONTEXT_WINDOW", "4096"),
    ];
    let daemon = daemon(dir.path(), &llm, &env).await;
    for n in 0..3 {
        assert_eq!(daemon.say(&format!("note {n}")).await["reply"], format!("echo: note {n}"));
    }
    llm.push(Scripted::Text("Three notes.".into()));
    let compacted = daemon.say("/compact").await;
    assert!(compacted["reply"].as_str().unwrap().starts_with("Compacted:"), "{compacted}");
    let requests = llm.requests();
    for request in &requests {
        assert!(request.get("tools").is_none() && request.get("tool_choice").is_none(), "{request}");
        let system = request["messages"][0]["content"].as_str().unwrap();
        assert!(!system.contains("read_file"), "the prompt lists no tool: {system}");
    }
    assert_eq!(requests.len(), 4, "three turns and the summary, no flush");
    let last = requests[3]["messages"].as_array().unwrap().last().unwrap()["content"].to_string();
    assert!(last.contains(switchboard::context::compaction::SUMMARY_INSTRUCTION), "{last}");
}
