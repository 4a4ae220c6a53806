//! End to end through the real binary in the embedded shape: `switchboard run` with the
//! in-process bus, a SQLite file and the API channel, against a scripted model server.

use std::time::Duration;

use crate::support::{Launch, run_to_exit};
use serde_json::json;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

#[tokio::test]
async fn run_answers_over_http_and_remembers_the_conversation() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;

    let (status, body) = daemon.post(json!({"chat_id": "me", "content": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "echo: hi");
    assert_eq!(body["session_key"], "api:me");
    assert!(body["run_id"].as_str().is_some_and(|id| !id.is_empty()), "{body}");

    let (status, body) = daemon.post(json!({"chat_id": "me", "content": "again", "sender": "alice"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "echo: again");
    // The second call carries the first turn as history.
    let second = &llm.requests()[1];
    let contents: Vec<&str> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .map(switchboard_testkit::fake_llm::without_context_line)
        .collect();
    assert!(contents.contains(&"hi") && contents.contains(&"echo: hi"), "{contents:?}");
    assert!(dir.path().join("switchboard.db").exists(), "no SQLite file in the data dir");
    assert!(!daemon.logs().contains("sk-test-secret"), "the API key leaked into the logs");
}

#[tokio::test]
async fn tool_calls_run_end_to_end() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::ToolCalls(vec![("current_time".into(), json!({"utc_offset": "+01:00"}))]));
    llm.push(Scripted::Text("It is late.".into()));
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;

    let (status, body) = daemon.post(json!({"chat_id": "t", "content": "what time is it?"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "It is late.");
    let second = &llm.requests()[1];
    let tool_result = second["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert!(tool_result["content"].as_str().unwrap().contains("+01:00"), "{tool_result}");
}

#[tokio::test]
async fn provider_errors_become_a_clear_reply() {
    let llm = FakeLlm::start().await;
    for _ in 0..2 {
        llm.push(Scripted::Status { code: 500, retry_after: None, body: json!({"error": {"message": "down"}}) });
    }
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_PROVIDER__MAX_RETRIES", "1")
        .spawn();
    daemon.wait_healthy().await;

    let (status, body) = daemon.post(json!({"chat_id": "x", "content": "hello"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["kind"], "notice");
    assert!(body["reply"].as_str().unwrap().contains("HTTP 500"), "{body}");
    assert_eq!(llm.requests().len(), 2, "one try plus one retry");
    // The next message is answered normally: the failure did not wedge the session.
    let (_, body) = daemon.post(json!({"chat_id": "x", "content": "better?"})).await;
    assert_eq!(body["reply"], "echo: better?");
}

#[tokio::test]
async fn api_checks_token_and_input() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_CHANNELS__API__TOKEN", "letmein")
        .env("SWITCHBOARD_CHANNELS__API__MAX_BODY_BYTES", "1024")
        .spawn();
    daemon.wait_healthy().await;
    let msg = json!({"chat_id": "me", "content": "hi"});

    let (status, body) = daemon.post(msg.clone()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthorized")));
    let (status, _) = daemon.post_with(msg.clone(), Some("wrong")).await;
    assert_eq!(status, 401);
    let (status, body) = daemon.post_with(msg, Some("letmein")).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("echo: hi")));

    let (status, body) = daemon.post_with(json!({"chat_id": "me"}), Some("letmein")).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("content"), "{body}");
    let (status, body) = daemon.post_with(json!({"chat_id": " ", "content": "x"}), Some("letmein")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_body")));
    let (status, body) =
        daemon.post_with(json!({"chat_id": "me", "content": "x", "sender": ""}), Some("letmein")).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("sender"), "{body}");
    assert_eq!(status, 400);
    let (status, body) = daemon.post_with(json!({"chat_id": "me", "content": "x".repeat(4096)}), Some("letmein")).await;
    assert_eq!(status, 413, "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    assert_eq!(llm.requests().len(), 1, "rejected requests must not reach the model");
}

#[tokio::test]
async fn slow_reply_times_out_with_504() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Delay(Duration::from_secs(3), Box::new(Scripted::Text("late".into()))));
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_CHANNELS__API__REPLY_TIMEOUT_SECS", "1")
        .spawn();
    daemon.wait_healthy().await;
    let (status, body) = daemon.post(json!({"chat_id": "me", "content": "hi"})).await;
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["error"]["code"], "reply_timeout");
    assert!(body["error"]["message_id"].is_string());
}

#[tokio::test]
async fn sigterm_lets_the_running_turn_finish_and_exits_zero() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Delay(Duration::from_millis(1500), Box::new(Scripted::Text("finished".into()))));
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    let url = daemon.url("/v1/messages");
    let pending = tokio::spawn(async move {
        reqwest::Client::new().post(url).json(&json!({"chat_id": "me", "content": "slow"})).send().await
    });
    llm.wait_for_requests(1, Duration::from_secs(10)).await;
    daemon.signal("TERM");
    let status = daemon.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "exit status {status}:\n{}", daemon.logs());
    // The in-flight turn was finished and stored before exit.
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["runs"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("completed"), "{stdout}");
    let reply = pending.await.unwrap().unwrap();
    assert_eq!(reply.status(), 200);
}

#[test]
fn missing_provider_fails_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr, _) = run_to_exit(dir.path(), &["run"], &[]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("OPENAI_API_KEY"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

#[test]
fn unknown_config_key_fails_naming_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("switchboard.toml");
    std::fs::write(&file, "[channels.api]\nlisten = \"127.0.0.1:1\"\nlisen = \"typo\"\n").unwrap();
    let (status, stderr, _) = run_to_exit(dir.path(), &["--config", file.to_str().unwrap(), "run"], &[]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("channels.api.lisen"), "{stderr}");
}

#[test]
fn bad_env_value_fails_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr, _) = run_to_exit(dir.path(), &["run"], &[("SWITCHBOARD_WORKER__MAX_CONCURRENT_RUNS", "many")]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("SWITCHBOARD_WORKER__MAX_CONCURRENT_RUNS"), "{stderr}");
}

#[test]
fn help_and_version_read_well() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for word in ["run", "agent", "channel", "--config"] {
        assert!(help.contains(word), "{help}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard")).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("switchboard "));
    drop(dir);
}

/// `switchboard run` killed hard during a turn: after the restart the accepted message is run
/// again from the journal and finished exactly once.
#[tokio::test]
async fn killed_daemon_finishes_the_accepted_message_after_restart() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Delay(Duration::from_secs(60), Box::new(Scripted::Text("never".into()))));
    llm.push(Scripted::Text("done after restart".into()));
    let dir = tempfile::tempdir().unwrap();
    let mut first = Launch::new(dir.path(), "run-1", &["run"]).llm(&llm.base_url()).spawn();
    first.wait_healthy().await;
    let url = first.url("/v1/messages");
    let request = tokio::spawn(async move {
        reqwest::Client::new().post(url).json(&json!({"chat_id": "c", "content": "x"})).send().await
    });
    llm.wait_for_requests(1, Duration::from_secs(10)).await;
    first.kill_hard();
    let _ = request.await;

    let mut second = Launch::new(dir.path(), "run-2", &["run"]).llm(&llm.base_url()).spawn();
    second.wait_healthy().await;
    second.wait_for_log("resuming a run").await;
    llm.wait_for_requests(2, Duration::from_secs(10)).await;
    // The run is recorded once, finished on its second attempt.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, stderr, stdout) = run_to_exit(dir.path(), &["runs"], &[]);
        assert!(status.success(), "{stderr}");
        let rows: Vec<&str> = stdout.lines().filter(|l| l.contains("api:c")).collect();
        if rows.len() == 1 && rows[0].contains("completed") {
            // Columns: run id, date, time, kind, status, try, …
            let attempt = rows[0].split_whitespace().nth(5);
            assert_eq!(attempt, Some("2"), "{}", rows[0]);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "run never completed:\n{stdout}\n{}", second.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn api_requests_in_one_chat_each_get_their_own_answer_at_once() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    // The default settings: a chat's bursts are merged, but not the API's (each request waits for its own answer).
    let mut daemon = Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    let started = std::time::Instant::now();
    let (first, second) = tokio::join!(
        daemon.post(json!({"chat_id": "me", "content": "one"})),
        daemon.post(json!({"chat_id": "me", "content": "two"})),
    );
    assert_eq!((first.0, first.1["reply"].as_str()), (200, Some("echo: one")), "{}", first.1);
    assert_eq!((second.0, second.1["reply"].as_str()), (200, Some("echo: two")), "{}", second.1);
    assert!(started.elapsed() < Duration::from_millis(1500), "an API request waited {:?}", started.elapsed());
}

/// `switchboard run` with `store.database_url`: the history and the runs live in PostgreSQL
/// (no SQLite file is made), a daemon killed mid-turn finishes the accepted message after
/// its restart, and `switchboard runs` reads the same database.
#[tokio::test]
async fn run_on_postgresql_answers_remembers_and_finishes_after_a_kill() {
    let database = switchboard_testkit::postgres::TempDatabase::create();
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let launch = |name| {
        Launch::new(dir.path(), name, &["run"])
            .llm(&llm.base_url())
            .env("SWITCHBOARD_STORE__DATABASE_URL", database.url())
    };
    let mut first = launch("pg-1").spawn();
    first.wait_healthy().await;
    let (status, body) = first.post(json!({"chat_id": "me", "content": "hi"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("echo: hi")), "{body}");

    llm.push(Scripted::Delay(Duration::from_secs(60), Box::new(Scripted::Text("never".into()))));
    llm.push(Scripted::Text("done after restart".into()));
    let url = first.url("/v1/messages");
    let request = tokio::spawn(async move {
        reqwest::Client::new().post(url).json(&json!({"chat_id": "me", "content": "again"})).send().await
    });
    llm.wait_for_requests(2, Duration::from_secs(10)).await;
    first.kill_hard();
    let _ = request.await;

    let mut second = launch("pg-2").spawn();
    second.wait_healthy().await;
    second.wait_for_log("resuming a run").await;
    llm.wait_for_requests(3, Duration::from_secs(10)).await;
    // The resumed turn carries the first one as history, read from PostgreSQL.
    let contents: Vec<String> = llm.requests()[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(contents.iter().any(|c| c == "echo: hi"), "{contents:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while database.sql("SELECT count(*) FROM runs WHERE status = 'completed'") != "2" {
        assert!(std::time::Instant::now() < deadline, "the resumed run never completed:\n{}", second.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(database.sql("SELECT count(*) FROM transcript WHERE session_key = 'api:me'"), "4");
    assert_eq!(database.sql("SELECT max(attempt) FROM runs"), "2");
    let (status, stderr, stdout) =
        run_to_exit(dir.path(), &["runs"], &[("SWITCHBOARD_STORE__DATABASE_URL", database.url())]);
    assert!(status.success(), "{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.contains("api:me") && l.contains("completed")).count(), 2, "{stdout}");
    assert!(!dir.path().join("switchboard.db").exists(), "a SQLite file was made beside PostgreSQL");
    // A restart on a migrated database logs no server notices ("already exists, skipping").
    assert!(!second.logs().contains("notice"), "{}", second.logs());
}
