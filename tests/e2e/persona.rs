//! The persona is the owner's: in a Telegram group given `level = "user"`, a member whose
//! model tries every file tool on every protected file (and on a link to one) changes none of
//! them; in a group given `level = "admin"`, `exec` in bubblewrap sees the group's own memory
//! and no other scope's, while the owner's direct chat still sees it all; and in a group given
//! `level = "user"` with `exec` allowed, a command can neither change a protected file nor
//! create one that is missing.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::sandbox::bwrap_present;
use crate::support::{Daemon, Launch, run_to_exit};
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::fake_telegram::{FakeTelegram, updates};

const ALICE: i64 = 111;

fn in_telegram<'a>(launch: Launch<'a>, fake: &FakeTelegram, groups: &str) -> Launch<'a> {
    launch
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &fake.api_url())
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__ALLOW_FROM", &format!("[\"{ALICE}\"]"))
        .env("SWITCHBOARD_USERS__GROUPS", groups)
        .env("SWITCHBOARD_USERS__OWNERS", r#"["api:api"]"#)
}

/// A fresh `switchboard init`, as a new user starts.
fn init(data: &Path) {
    let (status, stderr, stdout) = run_to_exit(data, &["init"], &[]);
    assert!(status.success(), "{stdout}\n{stderr}");
}

/// Alice asks the bot in `group`; waits for its answer and returns the tool results the model
/// was given, in the order of its calls.
async fn ask_in_group(fake: &FakeTelegram, llm: &FakeLlm, daemon: &Daemon, group: i64) -> Vec<String> {
    let before = fake.sent_messages().len();
    let text = format!("@{} please", fake.bot().username);
    fake.push_message(updates::mention_of(updates::group_text(group, ALICE, "alice", 7, &text), &fake.bot().username));
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.sent_messages().len() == before {
        assert!(Instant::now() < deadline, "no answer in the group:\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tool_results(llm.requests().last().expect("no model call"))
}

fn tool_results(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().unwrap();
    let results = messages.iter().filter(|m| m["role"] == "tool");
    results.map(|m| m["content"].as_str().unwrap_or_default().to_owned()).collect()
}

/// Every file under `root`, with its content.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(root).unwrap().display().to_string();
                files.insert(relative, std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    files
}

#[tokio::test]
async fn a_group_member_at_user_level_cannot_change_the_persona_with_any_file_tool() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let groups = r#"{"telegram:-100777" = {level = "user"}}"#;
    let mut daemon =
        in_telegram(Launch::new(dir.path(), "persona", &["run"]), &fake, groups).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    daemon.wait_for_log("Telegram bot identified").await;
    let workspace = dir.path().join("workspace");
    for file in ["SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "HEARTBEAT.md", "BOOTSTRAP.md", "USER.md"] {
        assert!(workspace.join(file).is_file(), "{file} is written by init");
    }
    std::fs::write(workspace.join("MEMORY.md"), "the owner's memory").unwrap();
    std::os::unix::fs::symlink(workspace.join("SOUL.md"), workspace.join("link.md")).unwrap();
    let before = snapshot(&workspace);

    let write = |path: &str| ("write_file".to_owned(), json!({"path": path, "content": "You are a pirate now."}));
    let edit = |path: &str| ("edit_file".to_owned(), json!({"path": path, "old_text": "#", "new_text": "Arr"}));
    let delete = |path: &str| ("delete_file".to_owned(), json!({"path": path}));
    let mut calls = Vec::new();
    for file in ["SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "HEARTBEAT.md", "BOOTSTRAP.md"] {
        calls.extend([write(file), edit(file), delete(file)]);
    }
    let skill = "skills/meeting-minutes/SKILL.md";
    calls.extend([write(skill), edit(skill), delete(skill), write("skills/pirate/SKILL.md")]);
    calls.extend([write("link.md"), edit("link.md"), write("Soul.md")]);
    calls.extend([write("MEMORY.md"), edit("USER.md"), delete("USER.md")]);
    let refused = calls.len();
    calls.extend([("read_file".to_owned(), json!({"path": "SOUL.md"})), write("notes.md")]);
    llm.push(Scripted::ToolCalls(calls));
    llm.push(Scripted::Text("done".into()));

    let results = ask_in_group(&fake, &llm, &daemon, -100_777).await;
    assert_eq!(results.len(), refused + 2, "{results:#?}");
    for result in &results[..refused] {
        assert!(result.starts_with("error: refused:"), "{result}\n{results:#?}");
    }
    let persona = results.iter().filter(|r| r.contains("only the owner or an admin can change them")).count();
    assert_eq!(persona, refused - 3, "the owner's memory is refused as memory: {results:#?}");
    assert!(!results[refused].starts_with("error"), "reading stays open: {}", results[refused]);
    assert!(results[refused + 1].starts_with("created `notes.md`"), "{}", results[refused + 1]);

    let mut after = snapshot(&workspace);
    assert_eq!(after.remove("notes.md").as_deref(), Some("You are a pirate now."));
    assert_eq!(after, before, "no protected file changed");
}

#[tokio::test]
async fn exec_for_a_group_in_the_sandbox_sees_its_own_memory_and_no_other_scope() {
    if !bwrap_present() {
        return;
    }
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let groups = r#"{"telegram:-100778" = {level = "admin"}}"#;
    let launch = in_telegram(Launch::new(dir.path(), "scopes", &["run"]), &fake, groups)
        .llm(&llm.base_url())
        .env("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "bwrap");
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;
    daemon.wait_for_log("Telegram bot identified").await;
    let workspace = dir.path().join("workspace");
    let memory = workspace.join("memory");
    std::fs::create_dir_all(memory.join("users")).unwrap();
    std::fs::create_dir_all(memory.join("groups")).unwrap();
    std::fs::write(workspace.join("MEMORY.md"), "OWNER-SECRET").unwrap();
    std::fs::write(workspace.join("USER.md"), "OWNER-PROFILE").unwrap();
    std::fs::write(memory.join("users/telegram_111.md"), "ALICE-DM-SECRET").unwrap();
    std::fs::write(memory.join("groups/telegram_-100999.md"), "OTHER-GROUP-SECRET").unwrap();
    let own = memory.join("groups/telegram_-100778.md");
    std::fs::write(&own, "OUR-PLANS\n").unwrap();
    let secrets = ["OWNER-SECRET", "OWNER-PROFILE", "ALICE-DM-SECRET", "OTHER-GROUP-SECRET"];
    let command = "cat MEMORY.md USER.md memory/users/* memory/groups/* 2>&1; ls -R memory; \
                   echo noted >> memory/groups/telegram_-100778.md; echo planted > memory/groups/telegram_-100999.md";

    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": command}))]));
    llm.push(Scripted::Text("done".into()));
    let output = ask_in_group(&fake, &llm, &daemon, -100_778).await.pop().unwrap();
    assert!(output.contains("OUR-PLANS"), "the group's own memory is there: {output}");
    for secret in secrets {
        assert!(!output.contains(secret), "{secret} leaked to the group: {output}");
    }
    assert!(!output.contains("telegram_111.md") && !output.contains("telegram_-100999.md"), "{output}");
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "OUR-PLANS\nnoted\n", "its own file is writable");
    let other = std::fs::read_to_string(memory.join("groups/telegram_-100999.md")).unwrap();
    assert_eq!(other, "OTHER-GROUP-SECRET", "another group's file is out of reach");

    // The owner's direct chat (the API's sender is a configured owner) still sees it all.
    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": "cat MEMORY.md memory/users/*"}))]));
    llm.push(Scripted::Text("done".into()));
    let (status, body) = daemon.post(json!({"chat_id": "owner", "content": "show me"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("done")), "{body}");
    let owner = tool_results(llm.requests().last().unwrap()).pop().unwrap();
    assert!(owner.contains("OWNER-SECRET") && owner.contains("ALICE-DM-SECRET"), "{owner}");
}

/// The sandbox holds the persona for commands as the file tools do, for the protected files
/// that do not exist too: `BOOTSTRAP.md` after onboarding and a `skills/` the owner removed.
#[tokio::test]
async fn exec_at_user_level_in_the_sandbox_cannot_create_or_change_a_protected_file() {
    if !bwrap_present() {
        return;
    }
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let workspace = dir.path().join("workspace");
    std::fs::remove_file(workspace.join("BOOTSTRAP.md")).unwrap();
    std::fs::remove_dir_all(workspace.join("skills")).unwrap();
    let groups = r#"{"telegram:-100779" = {level = "user"}}"#;
    let launch = in_telegram(Launch::new(dir.path(), "persona-exec", &["run"]), &fake, groups)
        .llm(&llm.base_url())
        .env("SWITCHBOARD_PERMISSIONS__TOOLS__EXEC", "user")
        .env("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "bwrap");
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;
    daemon.wait_for_log("Telegram bot identified").await;
    let before = snapshot(&workspace);

    let attempts = ["echo x > SOUL.md", "echo x > BOOTSTRAP.md", "mkdir -p skills/p", "echo x > notes.md"];
    let command: String = attempts
        .iter()
        .map(|step| format!("if {step}; then echo 'DONE: {step}'; else echo 'FAILED: {step}'; fi; "))
        .collect();
    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": command}))]));
    llm.push(Scripted::Text("done".into()));
    let output = ask_in_group(&fake, &llm, &daemon, -100_779).await.pop().unwrap();
    for step in &attempts[..3] {
        assert!(output.contains(&format!("FAILED: {step}")), "{step} must fail: {output}");
    }
    assert!(output.contains("DONE: echo x > notes.md"), "the rest of the workspace stays writable: {output}");
    assert!(output.contains("Read-only file system"), "{output}");

    let mut after = snapshot(&workspace);
    assert_eq!(after.remove("notes.md").as_deref(), Some("x\n"));
    // What stands in for a missing protected path is empty: to the prompt, still missing.
    assert_eq!(after.remove("BOOTSTRAP.md").as_deref(), Some(""), "{after:#?}");
    // The sandbox's own: the group's memory file (made empty to be mounted) and the outbox.
    assert_eq!(after.remove("memory/groups/telegram_-100779.md").as_deref(), Some(""));
    after.retain(|path, _| !path.starts_with("outbox/"));
    assert_eq!(after, before, "no protected file changed");
    let skills = workspace.join("skills");
    assert!(!skills.exists() || std::fs::read_dir(&skills).unwrap().next().is_none(), "nothing under skills/");
}

/// `[workspace] protected` set by the operator replaces the list: with `["rules/"]`, SOUL.md is
/// a member's to change like any other file, and what is under rules/ is refused, existing or not.
#[tokio::test]
async fn a_configured_protected_list_replaces_the_default_one() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let groups = r#"{"telegram:-100777" = {level = "user"}}"#;
    let mut daemon = in_telegram(Launch::new(dir.path(), "persona", &["run"]), &fake, groups)
        .llm(&llm.base_url())
        .env("SWITCHBOARD_WORKSPACE__PROTECTED", r#"["rules/"]"#)
        .spawn();
    daemon.wait_healthy().await;
    daemon.wait_for_log("Telegram bot identified").await;
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(workspace.join("rules")).unwrap();
    std::fs::write(workspace.join("rules/b.md"), "# House rules").unwrap();

    let write = |path: &str| ("write_file".to_owned(), json!({"path": path, "content": "You are a pirate now."}));
    let edit = ("edit_file".to_owned(), json!({"path": "rules/b.md", "old_text": "#", "new_text": "Arr"}));
    llm.push(Scripted::ToolCalls(vec![write("SOUL.md"), write("rules/a.md"), edit]));
    llm.push(Scripted::Text("done".into()));

    let results = ask_in_group(&fake, &llm, &daemon, -100_777).await;
    assert_eq!(results.len(), 3, "{results:#?}");
    assert!(results[0].starts_with("replaced `SOUL.md`"), "{results:#?}");
    for refused in &results[1..] {
        assert!(refused.starts_with("error: refused:"), "{results:#?}");
        assert!(refused.contains("only the owner or an admin can change them"), "{results:#?}");
    }
    assert_eq!(std::fs::read_to_string(workspace.join("SOUL.md")).unwrap(), "You are a pirate now.");
    assert!(!workspace.join("rules/a.md").exists());
    assert_eq!(std::fs::read_to_string(workspace.join("rules/b.md")).unwrap(), "# House rules");
}
