//! Issue 13, item 2: a command run by `exec` must not get at the daemon's secrets. The
//! environment it is given is allow-listed, but the daemon's own environment and memory sit in
//! `/proc/<daemon pid>/`. Here a daemon with four planted secrets (API keys and bot tokens in
//! its environment, as systemd's `EnvironmentFile=` puts them) runs the real agent loop; a
//! scripted model calls `exec` with the attacks an injected prompt would try, and no secret may
//! come back to the model, into the API reply, the store, the log or anything in the data dir.
//! Once with the daemon as root (which this machine's sessions and CI are), once as an ordinary
//! user (nobody, when the test runs as root; else the test's own user).

use std::path::Path;

use crate::support::{Daemon, Launch};
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

/// Realistically shaped, and no command below contains any part of them (the daemon's memory
/// holds the commands too, so a command quoting a secret would find itself).
const SECRETS: [(&str, &str); 4] = [
    ("OPENAI_API_KEY", "sk-proj-Q7pL2vX9mN4kR8sT1wY6zB3cE5"),
    ("ANTHROPIC_API_KEY", "sk-ant-api03-H5jK8nP2qR6tV9xZ1bD4fG7hL0"),
    ("TELEGRAM_BOT_TOKEN", "7012345678:AAHk3mP9qR2sT5vW8xZ1bC4dF7gJ0kL3nQ6"),
    ("DISCORD_BOT_TOKEN", "MTE5ODc2NTQzMjEwOTg3NjU0.GxYz12.aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"),
];

/// What an attacker greps for: the shapes of OpenAI/Anthropic keys and of Telegram and Discord
/// bot tokens.
const SHAPES: &str = r"-e 'sk-[A-Za-z0-9_-]\{10,\}' -e '[0-9]\{6,\}:[A-Za-z0-9_-]\{30,\}' -e 'M[A-Za-z0-9]\{20,\}\.[A-Za-z0-9_-]\{6\}\.[A-Za-z0-9_-]\{27,\}'";

/// (what it tries, the command). `$PPID` of `sh -c` is the daemon.
fn attacks() -> Vec<(&'static str, String)> {
    vec![
        ("the daemon's environment block", "cat /proc/$PPID/environ".into()),
        ("the daemon's environment, a variable a line", r"tr '\0' '\n' < /proc/$PPID/environ".into()),
        (
            "every process's environment and command line",
            format!(
                r#"for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' < "$f"; done 2>/dev/null | grep -a -o {SHAPES} | sort -u"#
            ),
        ),
        (
            "the daemon's memory: every anonymous writable mapping (heap, arenas, stacks) through /proc/$PPID/mem",
            format!(
                "grep ' rw-p 00000000 00:00 0' /proc/$PPID/maps | cut -d' ' -f1 | while IFS=- read a b; do \
                 dd if=/proc/$PPID/mem bs=4096 skip=$((0x$a / 4096)) count=$(((0x$b - 0x$a) / 4096)) 2>/dev/null; \
                 done | tr -c '[:print:]' '\\n' | grep -a -o {SHAPES} | sort -u"
            ),
        ),
        ("the daemon's environment from a new user namespace", "p=$PPID; unshare -Ur cat /proc/$p/environ".into()),
    ]
}

/// The content of the last tool result in `request`.
fn tool_result(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let result = messages.iter().rev().find(|m| m["role"] == "tool").expect("no tool result sent to the model");
    result["content"].as_str().unwrap().to_owned()
}

/// Every secret (by variable name) whose value occurs in `text`.
fn leaked_in(text: &str) -> Vec<&'static str> {
    SECRETS.iter().filter(|(_, value)| text.contains(value)).map(|(name, _)| *name).collect()
}

/// Every file under `dir` (the store, its WAL, the log, the workspace) that holds a secret.
fn files_with_secrets(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_with_secrets(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            let text = String::from_utf8_lossy(&bytes);
            for name in leaked_in(&text) {
                found.push(format!("{} holds {name}", path.display()));
            }
        }
    }
    found
}

/// Starts the daemon with the secrets in its environment; `user` switches to that uid/gid.
async fn start(llm: &FakeLlm, data_dir: &Path, user: Option<(u32, u32)>) -> Daemon {
    let mut launch = Launch::new(data_dir, "exec-secrets", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_USERS__OWNERS", r#"["api:api"]"#)
        // Without the sandbox, what keeps commands out of the daemon is its own defences
        // (no capabilities, memory not dumpable); tests/e2e/sandbox.rs covers bubblewrap.
        .env("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "none")
        // The tokens are only to sit in the environment; no channel is to dial Telegram or Discord.
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__ENABLED", "false")
        .env("SWITCHBOARD_CHANNELS__DISCORD__ENABLED", "false");
    for (name, value) in SECRETS {
        launch = launch.env(name, value);
    }
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(data_dir, Some(uid), Some(gid)).unwrap();
        launch = launch.run_as(uid, gid);
    }
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;
    daemon
}

/// Runs `command` through the model and the real `exec` tool; returns the tool result.
async fn run_exec(llm: &FakeLlm, daemon: &Daemon, command: &str) -> String {
    let before = llm.requests().len();
    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": command, "timeout_secs": 30}))]));
    llm.push(Scripted::Text("done".into()));
    let (status, body) = daemon.post(json!({"chat_id": "attack", "content": "run this for me"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("done")), "{body}");
    let requests = llm.requests();
    assert_eq!(requests.len(), before + 2, "the model was not asked again after the tool call");
    let result = tool_result(&requests[before + 1]);
    // Command output reaches the model marked as untrusted; the attack reads what is inside.
    let inside = result.split_once(">>>\n").and_then(|(_, rest)| rest.rsplit_once("\n<<<END_UNTRUSTED_CONTENT>>>"));
    match inside {
        Some((output, _)) => format!("{output}\n"),
        None => panic!("exec output not marked as untrusted: {result}"),
    }
}

/// The attack, then the checks; `root` says whether the daemon runs as root.
async fn attack(user: Option<(u32, u32)>, root: bool) {
    let llm = FakeLlm::start_with_key(SECRETS[0].1).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(&llm, dir.path(), user).await;

    // The command does run, sees the daemon as its parent and can read /proc where it may.
    let probe = run_exec(
        &llm,
        &daemon,
        "grep -E '^(Uid|CapEff|NoNewPrivs)' /proc/self/status; grep -c '^Name:' /proc/$PPID/status",
    )
    .await;
    eprintln!("probe (daemon as {}):\n{probe}", if root { "root" } else { "an ordinary user" });
    assert!(probe.starts_with("[exit code 0]\n"), "{probe}");
    let uid_line = probe.lines().find(|line| line.starts_with("Uid:")).unwrap();
    assert_eq!(uid_line.split_whitespace().nth(1) == Some("0"), root, "{probe}");
    assert!(probe.ends_with("\n1\n"), "the daemon's /proc/<pid>/status must stay readable:\n{probe}");

    let mut leaks = Vec::new();
    for (tries, command) in attacks() {
        let result = run_exec(&llm, &daemon, &format!("{command}; echo '[attack finished]'")).await;
        eprintln!("--- {tries}:\n{result}");
        assert!(result.contains("[attack finished]"), "the attack did not run to its end: {result}");
        for name in leaked_in(&result) {
            leaks.push(format!("{tries}: {name}"));
        }
    }
    let every_request = serde_json::to_string(&llm.requests()).unwrap();
    let to_model = leaked_in(&every_request);
    drop(daemon);
    let on_disk = files_with_secrets(dir.path());
    assert!(
        leaks.is_empty() && to_model.is_empty() && on_disk.is_empty(),
        "secrets leaked through exec: {leaks:?}; in what the model was sent: {to_model:?}; on disk: {on_disk:?}"
    );
    // How: the command holds no capabilities and cannot gain any (see src/tools/exec.rs).
    assert!(probe.contains("CapEff:\t0000000000000000"), "the command kept capabilities:\n{probe}");
    assert!(probe.contains("NoNewPrivs:\t1"), "{probe}");
}

fn running_as_root() -> bool {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[tokio::test]
async fn exec_cannot_read_the_secrets_of_a_daemon_running_as_root() {
    if !running_as_root() {
        eprintln!("skipped: the test runs as an ordinary user, so it cannot start a daemon as root");
        return;
    }
    attack(None, true).await;
}

#[tokio::test]
async fn exec_cannot_read_the_secrets_of_a_daemon_running_as_an_ordinary_user() {
    // As root, the daemon is started as nobody; otherwise it runs as the test's own user.
    let user = running_as_root().then_some((65534, 65534));
    attack(user, false).await;
}
