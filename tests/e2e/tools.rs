//! The local tools end to end: `switchboard run` offers them, a scripted model uses them, and
//! the effects land in `<data_dir>/workspace` — or are refused back to the model.

use crate::support::Launch;
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

/// The content of the tool result in the messages of `request`.
fn tool_result(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let result = messages.iter().rev().find(|m| m["role"] == "tool").expect("no tool result sent to the model");
    result["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_agent_writes_reads_and_runs_in_its_workspace_only() {
    let llm = FakeLlm::start().await;
    let write = json!({"path": "notes/hello.txt", "content": "hi from the agent\n"});
    llm.push(Scripted::ToolCalls(vec![("write_file".into(), write)]));
    llm.push(Scripted::Text("Saved.".into()));
    llm.push(Scripted::ToolCalls(vec![("read_file".into(), json!({"path": "../../etc/passwd"}))]));
    llm.push(Scripted::Text("I cannot read that.".into()));
    llm.push(Scripted::ToolCalls(vec![(
        "exec".into(),
        json!({"command": "cat notes/hello.txt; echo \"[$OPENAI_API_KEY]\""}),
    )]));
    llm.push(Scripted::Text("Ran it.".into()));
    llm.push(Scripted::ToolCalls(vec![
        ("edit_file".into(), json!({"path": "notes/hello.txt", "old_text": "hi from", "new_text": "hello from"})),
        ("list_dir".into(), json!({"path": "notes"})),
    ]));
    llm.push(Scripted::Text("Edited.".into()));
    let dir = tempfile::tempdir().unwrap();
    // The API's default sender is `api`; as the owner it may use every tool, exec included.
    let mut daemon = Launch::new(dir.path(), "tools", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_USERS__OWNERS", r#"["api:api"]"#)
        .spawn();
    daemon.wait_healthy().await;

    let (status, body) = daemon.post(json!({"chat_id": "w", "content": "save a note"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Saved.")), "{body}");
    let requests = llm.requests();
    let offered: Vec<&str> =
        requests[0]["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    for name in ["read_file", "write_file", "edit_file", "list_dir", "exec"] {
        assert!(offered.contains(&name), "{name} not offered: {offered:?}");
    }
    let written = dir.path().join("workspace/notes/hello.txt");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "hi from the agent\n");
    assert!(tool_result(&llm.requests()[1]).starts_with("created `notes/hello.txt`"));

    let (status, body) = daemon.post(json!({"chat_id": "w", "content": "show me /etc/passwd"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("I cannot read that.")), "{body}");
    let refused = tool_result(&llm.requests()[3]);
    assert!(refused.starts_with("error: refused:") && refused.contains("outside the workspace"), "{refused}");
    assert!(!refused.contains("root:"), "{refused}");

    let (status, body) = daemon.post(json!({"chat_id": "w", "content": "cat it"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Ran it.")), "{body}");
    let ran = tool_result(&llm.requests()[5]);
    assert_eq!(
        ran,
        "<<<UNTRUSTED_CONTENT source=\"exec output\">>>\n[exit code 0]\nhi from the agent\n[]\n<<<END_UNTRUSTED_CONTENT>>>",
        "the API key must not reach commands"
    );

    let (status, body) = daemon.post(json!({"chat_id": "w", "content": "fix the greeting"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Edited.")), "{body}");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "hello from the agent\n");
    let messages = llm.requests()[7]["messages"].as_array().unwrap().clone();
    let results: Vec<&str> =
        messages.iter().filter(|m| m["role"] == "tool").filter_map(|m| m["content"].as_str()).collect();
    let listing = results.last().unwrap();
    assert!(listing.contains("hello.txt"), "{listing}");
}
