//! Logs an operator can read: `log_format = "json"` gives one JSON object a line, and in
//! either format a line logged during a run carries the run's id and session.

use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

use crate::support::{Daemon, Launch};

/// Starts a daemon in `format`, sends one API message and waits for its answer.
async fn one_run(dir: &std::path::Path, llm: &FakeLlm, format: &str) -> (Daemon, Value) {
    llm.push(Scripted::Text("hello back".into()));
    let mut daemon = Launch::new(dir, "run", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_LOG_FORMAT", format)
        // What an operator runs with: a run's line must show at `info`.
        .env("SWITCHBOARD_LOG", "info")
        .spawn();
    daemon.wait_healthy().await;
    let (status, reply) = daemon.post(json!({"chat_id": "logs", "content": "hello"})).await;
    assert_eq!(status, 200, "{reply}\n{}", daemon.logs());
    (daemon, reply)
}

#[tokio::test]
async fn json_logs_are_one_object_a_line_with_the_run_and_session_of_the_line() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, reply) = one_run(dir.path(), &llm, "json").await;
    let run_id = reply["run_id"].as_str().unwrap_or_else(|| panic!("no run_id in {reply}"));
    // "run finished" is logged after the reply is handed over, so it may trail the answer.
    daemon.wait_for_log(&format!("\"run_id\":\"{run_id}\"")).await;
    let logs = daemon.logs();
    let lines: Vec<Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}\n{logs}")))
        .collect();
    for line in &lines {
        for key in ["timestamp", "level", "target", "fields"] {
            assert!(line.get(key).is_some(), "no {key} in {line}");
        }
    }
    // `spans` lists the line's spans from the root: the run's is among them.
    let run_span = |line: &Value| -> Option<Value> {
        line["spans"].as_array()?.iter().find(|span| span["run_id"] == run_id).cloned()
    };
    let (during, span) = lines
        .iter()
        .find_map(|line| Some((line, run_span(line)?)))
        .unwrap_or_else(|| panic!("no line carries the run id {run_id}:\n{logs}"));
    assert_eq!((span["session"].as_str(), span["agent"].as_str()), (Some("api:logs"), Some("main")), "{during}");
    assert!(during["fields"]["message"].is_string(), "{during}");
    assert!(during["span"].is_object(), "the innermost span is `span`: {during}");
}

#[tokio::test]
async fn text_logs_show_the_run_id_of_a_line_logged_during_the_run() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, reply) = one_run(dir.path(), &llm, "text").await;
    let run_id = reply["run_id"].as_str().unwrap_or_else(|| panic!("no run_id in {reply}"));
    daemon.wait_for_log("run finished").await;
    let logs = daemon.logs();
    assert!(
        logs.lines().any(|line| line.contains(&format!("run_id={run_id}")) && line.contains("session=api:logs")),
        "no line shows run_id={run_id}:\n{logs}"
    );
}
