//! The agent loop through the real daemon: a model that loops on tool calls gets a handful of
//! calls and the person an honest answer; a run whose tool results outgrow the model's window
//! shortens the older ones and goes on, without the overflow path.

use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Quirks, Scripted, request_tokens, user_texts};

use crate::metrics::{sample, scrape_until};
use crate::support::{Daemon, Launch, free_port};

/// The daemon against `llm`, the API's sender an owner (every tool), metrics on `port`.
async fn daemon(dir: &std::path::Path, llm: &FakeLlm, port: u16, env: &[(&str, &str)]) -> Daemon {
    let mut launch = Launch::new(dir, "agent-loop", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_USERS__OWNERS", r#"["api:api"]"#)
        .env("SWITCHBOARD_METRICS__LISTEN", &format!("127.0.0.1:{port}"));
    for (key, value) in env {
        launch = launch.env(key, value);
    }
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;
    daemon
}

async fn say(daemon: &Daemon, chat: &str, text: &str) -> String {
    let (status, body) = daemon.post(json!({"chat_id": chat, "content": text})).await;
    assert_eq!(status, 200, "{body}");
    body["reply"].as_str().unwrap_or_default().to_owned()
}

/// The model calls this turn got: those whose last user message is `question`.
fn calls_for(llm: &FakeLlm, question: &str) -> Vec<Value> {
    llm.requests().into_iter().filter(|r| user_texts(r).last().is_some_and(|text| text == question)).collect()
}

fn call(name: &str, arguments: Value) -> Scripted {
    Scripted::ToolCalls(vec![(name.to_owned(), arguments)])
}

#[tokio::test]
async fn a_model_that_loops_gets_a_handful_of_calls_and_the_person_an_honest_answer() {
    let llm = FakeLlm::start().await;
    // Each conversation's model would go on for ever (twenty steps queued, the iteration limit).
    let (same, alternating, progress) = ("what time is it?", "tidy my notes", "what time is it around the world?");
    for n in 0..20 {
        llm.push_when(same, call("current_time", json!({})));
        let step =
            if n % 2 == 0 { call("read_file", json!({"path": "notes.md"})) } else { call("list_dir", json!({})) };
        llm.push_when(alternating, step);
    }
    for n in 0..6 {
        llm.push_when(progress, call("current_time", json!({"utc_offset": format!("+0{n}:00")})));
    }
    llm.push_when(progress, Scripted::Text("Noon in London, and so on.".into()));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let daemon = daemon(dir.path(), &llm, port, &[]).await;

    let reply = say(&daemon, "a", same).await;
    assert!(reply.contains("kept repeating the same step"), "{reply}");
    let calls = calls_for(&llm, same);
    assert_eq!(calls.len(), 4, "the default agent.loop_detection is 3: three calls and one more");
    let told = calls[3]["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(told.contains("this is a loop") && told.contains("`current_time`"), "{told}");

    let reply = say(&daemon, "b", alternating).await;
    assert!(reply.contains("kept repeating the same step"), "{reply}");
    assert_eq!(calls_for(&llm, alternating).len(), 5, "read, list, read, list (not run), read: stopped");

    // The same tool with other arguments each time is progress, not a loop.
    assert_eq!(say(&daemon, "c", progress).await, "Noon in London, and so on.");
    assert_eq!(calls_for(&llm, progress).len(), 7);

    daemon.wait_for_log("the model is looping on tool calls").await;
    daemon.wait_for_log("looping on tool calls after it was told; run stopped").await;
    let stopped = [("agent", "main"), ("outcome", "stopped")];
    let text = scrape_until(port, |text| sample(text, "switchboard_tool_loops_total", &stopped) == Some(2.0)).await;
    let warned = [("agent", "main"), ("outcome", "warned")];
    assert_eq!(sample(&text, "switchboard_tool_loops_total", &warned), Some(2.0), "{text}");
}

#[tokio::test]
async fn loop_detection_can_be_turned_off() {
    let llm = FakeLlm::start().await;
    for _ in 0..5 {
        llm.push(call("current_time", json!({})));
    }
    let dir = tempfile::tempdir().unwrap();
    let env = [("SWITCHBOARD_AGENT__LOOP_DETECTION", "0"), ("SWITCHBOARD_AGENT__MAX_ITERATIONS", "5")];
    let daemon = daemon(dir.path(), &llm, free_port(), &env).await;
    let reply = say(&daemon, "a", "what time is it?").await;
    assert!(reply.contains("stopped after 5 steps"), "{reply}");
    assert_eq!(llm.requests().len(), 5);
}

/// The model's context window in the fake server and in the configuration.
const WINDOW: usize = 16_384;

#[tokio::test]
async fn a_run_whose_tool_results_outgrow_the_window_shortens_the_older_ones_and_answers() {
    let quirks = Quirks { context_window: Some(WINDOW), ..Quirks::default() };
    let llm = FakeLlm::start_with_quirks(quirks).await;
    for name in ["a", "b", "c", "d"] {
        llm.push(call("read_file", json!({"path": format!("{name}.txt")})));
    }
    llm.push(Scripted::Text("I read all four.".into()));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let env = [
        ("SWITCHBOARD_AGENT__CONTEXT_WINDOW", &WINDOW.to_string() as &str),
        // A refused call is not retried by the provider: the overflow would show at once.
        ("SWITCHBOARD_PROVIDER__MAX_RETRIES", "0"),
    ];
    let daemon = daemon(dir.path(), &llm, port, &env).await;
    // Four files of 20,000 characters: each read returns `tools.max_result_chars` (16,000),
    // about 4,000 tokens, and four of them do not fit the window beside the prompt.
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    for name in ["a", "b", "c", "d"] {
        let line = format!("{name} {}\n", "lorem ipsum ".repeat(8));
        std::fs::write(workspace.join(format!("{name}.txt")), line.repeat(20_000 / line.len())).unwrap();
    }

    assert_eq!(say(&daemon, "files", "read the four files").await, "I read all four.");
    let requests = llm.requests();
    assert_eq!(requests.len(), 5, "no call was refused: {:?}", requests.iter().map(request_tokens).collect::<Vec<_>>());
    assert!(requests.iter().all(|request| request_tokens(request) <= WINDOW));
    let results = tool_results(&requests[4]);
    assert_eq!(results.len(), 4);
    assert!(results[0].contains("[shortened to fit the context window:"), "{}", results[0]);
    assert!(!results[3].contains("[shortened"), "the latest result is whole");
    daemon.wait_for_log("shortened older tool results of the run to fit the context window").await;
    let main = [("agent", "main")];
    scrape_until(port, |text| sample(text, "switchboard_run_compactions_total", &main).is_some_and(|n| n >= 1.0)).await;

    // The session keeps the shortened results: the next turn fits without cutting them again.
    llm.push(Scripted::Text("You're welcome.".into()));
    assert_eq!(say(&daemon, "files", "thanks").await, "You're welcome.");
    let next = llm.requests().pop().unwrap();
    assert!(request_tokens(&next) <= WINDOW);
    assert!(tool_results(&next)[0].contains("[shortened to fit the context window:"));
}

fn tool_results(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().unwrap();
    messages.iter().filter(|m| m["role"] == "tool").filter_map(|m| m["content"].as_str()).map(str::to_owned).collect()
}
