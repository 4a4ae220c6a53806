//! Skills end to end: the example skill `switchboard init` writes reaches the model, which loads
//! it with `skill_get`; skills added while the daemon runs count at the next turn, and past
//! `skills.inline_max` the prompt stops listing them and `skill_search` finds them.

use crate::support::{Launch, run_to_exit};
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

fn offered(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().map(Vec::as_slice).unwrap_or_default();
    tools.iter().filter_map(|tool| tool["function"]["name"].as_str()).map(str::to_owned).collect()
}

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"].as_str().unwrap().to_owned()
}

fn last_tool_result(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let result = messages.iter().rev().find(|m| m["role"] == "tool").expect("no tool result");
    result["content"].as_str().unwrap().to_owned()
}

fn write_skill(workspace: &std::path::Path, name: &str, description: &str) {
    let folder = workspace.join("skills").join(name);
    std::fs::create_dir_all(&folder).unwrap();
    let text = format!("---\nname: {name}\ndescription: {description}\n---\n\nHow to {description}.\n");
    std::fs::write(folder.join("SKILL.md"), text).unwrap();
}

#[tokio::test]
async fn the_example_skill_is_listed_loaded_and_searched_once_there_are_many() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["init"], &[]);
    assert!(status.success(), "{stdout}\n{stderr}");
    let workspace = dir.path().join("workspace");
    assert!(stdout.contains("skills/meeting-minutes/SKILL.md"), "{stdout}");

    let llm = FakeLlm::start().await;
    llm.push(Scripted::ToolCalls(vec![("skill_get".into(), json!({"name": "meeting-minutes"}))]));
    llm.push(Scripted::Text("Here are the minutes.".into()));
    let mut daemon = Launch::new(dir.path(), "skills", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_USERS__OWNERS", r#"["api:owner"]"#)
        .spawn();
    daemon.wait_healthy().await;

    let (status, body) =
        daemon.post(json!({"chat_id": "me", "sender": "owner", "content": "minutes please: we chose Lisbon"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Here are the minutes.")), "{body}");
    let requests = llm.requests();
    let prompt = system_prompt(&requests[0]);
    assert!(prompt.contains("# Skills") && prompt.contains("- meeting-minutes: Turn a meeting transcript"), "{prompt}");
    let tools = offered(&requests[0]);
    assert!(tools.contains(&"skill_get".into()) && !tools.contains(&"skill_search".into()), "{tools:?}");
    let loaded = last_tool_result(&requests[1]);
    assert!(loaded.starts_with("Skill meeting-minutes (folder skills/meeting-minutes/"), "{loaded}");
    assert!(loaded.contains("Decisions are what was agreed") && loaded.ends_with("template.md"), "{loaded}");

    // Sixteen more skills, written while the daemon runs: seventeen is past the fifteen listed.
    for n in 0..16 {
        write_skill(&workspace, &format!("chore-{n}"), &format!("do household chore number {n}"));
    }
    write_skill(&workspace, "trip-planning", "plan a trip with trains and hotels");
    llm.forget_requests();
    llm.push(Scripted::ToolCalls(vec![("skill_search".into(), json!({"query": "plan our trip to Porto"}))]));
    llm.push(Scripted::Text("Found it.".into()));
    let (status, body) = daemon.post(json!({"chat_id": "me", "sender": "owner", "content": "plan a trip"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Found it.")), "{body}");
    let requests = llm.requests();
    let prompt = system_prompt(&requests[0]);
    assert!(prompt.contains("There are 18 skills: find the one for a task with skill_search."), "{prompt}");
    assert!(!prompt.contains("chore-3"), "many skills are not listed:\n{prompt}");
    assert!(offered(&requests[0]).contains(&"skill_search".into()));
    let found = last_tool_result(&requests[1]);
    assert!(found.starts_with("1. trip-planning: plan a trip with trains and hotels"), "{found}");

    // A guest is offered no skills (skill_get needs the `user` level by default).
    llm.forget_requests();
    let (status, body) = daemon.post(json!({"chat_id": "guest", "sender": "stranger", "content": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    let request = &llm.requests()[0];
    assert!(!offered(request).iter().any(|tool| tool.starts_with("skill_")), "{:?}", offered(request));
    assert!(!system_prompt(request).contains("# Skills"));
}
