//! `switchboard init` and the workspace files reaching the model, through the real binary.

use crate::support::{Launch, run_to_exit};
use serde_json::json;
use switchboard_testkit::fake_llm::FakeLlm;

const BOOTSTRAP: [&str; 7] =
    ["AGENTS.md", "SOUL.md", "USER.md", "IDENTITY.md", "TOOLS.md", "HEARTBEAT.md", "MEMORY.md"];

#[test]
fn init_creates_config_and_workspace_and_keeps_edits_on_a_second_run() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["init"], &[]);
    assert!(status.success(), "{stdout}\n{stderr}");
    // The default location: the platform config dir (XDG_CONFIG_HOME in the test).
    let config = dir.path().join("config/switchboard/config.toml");
    let workspace = dir.path().join("workspace");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), include_str!("../../config.example.toml"));
    for name in BOOTSTRAP {
        assert!(workspace.join(name).is_file(), "{name} missing:\n{stdout}");
        assert!(stdout.contains(&format!("created {}", workspace.join(name).display())), "{stdout}");
    }
    assert!(stdout.contains("switchboard run"), "no next step:\n{stdout}");

    std::fs::write(workspace.join("SOUL.md"), "My own persona.").unwrap();
    std::fs::remove_file(workspace.join("USER.md")).unwrap();
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["init"], &[]);
    assert!(status.success(), "{stdout}\n{stderr}");
    assert_eq!(std::fs::read_to_string(workspace.join("SOUL.md")).unwrap(), "My own persona.");
    assert!(stdout.contains(&format!("kept    {}", workspace.join("SOUL.md").display())), "{stdout}");
    assert!(stdout.contains(&format!("kept    {}", config.display())), "{stdout}");
    assert!(stdout.contains(&format!("created {}", workspace.join("USER.md").display())), "{stdout}");
}

#[test]
fn init_writes_the_config_where_told() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("etc/sb.toml");
    let (status, stderr, stdout) = run_to_exit(
        dir.path(),
        &["init", "--config", path.to_str().unwrap()],
        &[("SWITCHBOARD_AGENT__WORKSPACE", "ws")],
    );
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(path.is_file());
    // The workspace follows the configuration, environment included.
    assert!(dir.path().join("ws/AGENTS.md").is_file(), "{stdout}");
}

#[test]
fn init_also_creates_each_named_agent_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sb.toml");
    let (status, stderr, stdout) = run_to_exit(
        dir.path(),
        &["init", "--config", path.to_str().unwrap()],
        &[("SWITCHBOARD_AGENTS", r#"{support = {system_prompt = "Be kind."}}"#)],
    );
    assert!(status.success(), "{stdout}\n{stderr}");
    for name in BOOTSTRAP {
        assert!(dir.path().join("agents/support").join(name).is_file(), "{name} missing:\n{stdout}");
    }
}

#[tokio::test]
async fn the_persona_in_soul_md_and_the_owners_memory_reach_the_model() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("SOUL.md"), "You speak like a cheerful pirate.").unwrap();
    std::fs::write(workspace.join("MEMORY.md"), "The owner's cat is called Biscuit.").unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_AGENT__TIMEZONE", "Europe/Berlin")
        .env("SWITCHBOARD_USERS__OWNERS", r#"["api:alice"]"#)
        .spawn();
    daemon.wait_healthy().await;

    let (status, body) = daemon.post(json!({"chat_id": "me", "content": "hi", "sender": "alice"})).await;
    assert_eq!(status, 200, "{body}");
    let requests = llm.requests();
    let system = &requests[0]["messages"][0];
    assert_eq!(system["role"], "system");
    let prompt = system["content"].as_str().unwrap();
    for needle in [
        "You speak like a cheerful pirate.",
        "The owner's cat is called Biscuit.",
        "# Operator instructions\n\nYou are a helpful assistant.",
        "session api:me",
        "NO_REPLY",
    ] {
        assert!(prompt.contains(needle), "system prompt lacks {needle:?}:\n{prompt}");
    }
    // The time (in the configured zone) and the speaker come with the message.
    let line = switchboard_testkit::fake_llm::context_lines(&requests[0]).pop().flatten().unwrap_or_default();
    assert!(line.contains("(Europe/Berlin, UTC+0") && line.contains("from alice (id alice), level owner"), "{line}");

    // MEMORY.md is the owner's: someone else's direct chat gets a memory file of its own.
    let (status, body) = daemon.post(json!({"chat_id": "bob", "content": "hi", "sender": "bob"})).await;
    assert_eq!(status, 200, "{body}");
    let prompt = llm.requests()[1]["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(prompt.contains("cheerful pirate") && !prompt.contains("Biscuit"), "{prompt}");
    assert!(prompt.contains("memory/users/api_bob.md is the memory of this direct chat"), "{prompt}");
}

#[tokio::test]
async fn the_first_direct_chat_with_the_owner_follows_bootstrap_md_until_the_agent_deletes_it() {
    use switchboard_testkit::fake_llm::Scripted;
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["init"], &[]);
    assert!(status.success(), "{stdout}\n{stderr}");
    let workspace = dir.path().join("workspace");
    assert!(workspace.join("BOOTSTRAP.md").is_file(), "{stdout}");

    let llm = FakeLlm::start().await;
    let mut daemon = Launch::new(dir.path(), "onboarding", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_USERS__OWNERS", r#"["api:owner"]"#)
        .env("SWITCHBOARD_USERS__DEFAULT_LEVEL", "user")
        .spawn();
    daemon.wait_healthy().await;
    let prompt_of = |request: &serde_json::Value| request["messages"][0]["content"].as_str().unwrap().to_owned();

    // Someone else's chat is no introduction to the owner.
    let (status, body) = daemon.post(json!({"chat_id": "bob", "sender": "bob", "content": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    assert!(!prompt_of(&llm.requests()[0]).contains("# First run"));

    llm.forget_requests();
    llm.push(Scripted::Text("Hello! I am new here. What would you like to call me?".into()));
    let (status, body) = daemon.post(json!({"chat_id": "me", "sender": "owner", "content": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    let prompt = prompt_of(&llm.requests()[0]);
    assert!(prompt.contains("# First run\n\nBOOTSTRAP.md is in your workspace"), "{prompt}");
    assert!(prompt.contains("what they would like to call you"), "{prompt}");

    // The owner answers; the agent writes what it learned and ends the introductions.
    llm.forget_requests();
    llm.push(Scripted::ToolCalls(vec![
        ("write_file".into(), json!({"path": "IDENTITY.md", "content": "Your name is Pip."})),
        ("write_file".into(), json!({"path": "USER.md", "content": "The owner is Ada, in Lisbon."})),
        ("delete_file".into(), json!({"path": "BOOTSTRAP.md"})),
    ]));
    llm.push(Scripted::Text("Nice to meet you, Ada. I am Pip.".into()));
    let (status, body) = daemon
        .post(json!({"chat_id": "me", "sender": "owner", "content": "Call yourself Pip. I am Ada, in Lisbon."}))
        .await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Nice to meet you, Ada. I am Pip.")), "{body}");
    assert!(!workspace.join("BOOTSTRAP.md").exists());

    llm.forget_requests();
    let (status, body) =
        daemon.post(json!({"chat_id": "me", "sender": "owner", "content": "what is your name?"})).await;
    assert_eq!(status, 200, "{body}");
    let prompt = prompt_of(&llm.requests()[0]);
    assert!(!prompt.contains("# First run"), "{prompt}");
    assert!(prompt.contains("Your name is Pip.") && prompt.contains("The owner is Ada, in Lisbon."), "{prompt}");
}
