//! The attack table of `[tools.exec] sandbox = "bwrap"`: a daemon with secrets in its
//! environment, running as an ordinary user (as under the systemd unit), gets `exec` calls
//! from a scripted model that try what an injected prompt would: read the daemon's environment
//! and data, see its process, write outside the workspace, reach the network, fork without
//! end, eat memory and CPU. Each must fail in the sandbox, and the daemon must keep answering.
//! Needs bubblewrap (`.ci/run` installs it; elsewhere the test skips without it).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch};
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

const SECRET: &str = "sk-proj-Zq8wX3vB6nM1kL4pR7tY0uI2oE";

pub(crate) fn bwrap_present() -> bool {
    let found = Path::new("/usr/bin/bwrap").is_file();
    if !found {
        assert!(std::env::var_os("CI").is_none(), "bubblewrap must be installed in CI (.ci/run installs it)");
        eprintln!("skipped: bubblewrap is not installed (apt-get install bubblewrap)");
    }
    found
}

/// The output of the last `exec` call in `request`, without the untrusted-content markers.
fn exec_output(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let result = messages.iter().rev().find(|m| m["role"] == "tool").expect("no tool result");
    let text = result["content"].as_str().unwrap();
    let inside = text.split_once(">>>\n").and_then(|(_, rest)| rest.rsplit_once("\n<<<END_UNTRUSTED_CONTENT>>>"));
    inside.map_or_else(|| text.to_owned(), |(output, _)| output.to_owned())
}

/// Runs `command` through the model and the real `exec` tool; returns its output and how long
/// the whole turn took.
async fn run_exec(llm: &FakeLlm, daemon: &Daemon, command: &str) -> (String, Duration) {
    llm.forget_requests();
    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": command, "timeout_secs": 20}))]));
    llm.push(Scripted::Text("done".into()));
    let started = Instant::now();
    let (status, body) = daemon.post(json!({"chat_id": "attack", "content": "run this"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("done")), "{body}");
    (exec_output(&llm.requests()[1]), started.elapsed())
}

fn running_as_root() -> bool {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[tokio::test]
async fn commands_in_the_sandbox_cannot_reach_the_daemon_the_system_or_the_network() {
    if !bwrap_present() {
        return;
    }
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let mut launch = Launch::new(data, "sandbox", &["run"])
        .llm(&llm.base_url())
        .env("OPENAI_API_KEY", SECRET)
        .env("SWITCHBOARD_USERS__OWNERS", r#"["api:api"]"#)
        .env("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "bwrap")
        // RLIMIT_NPROC counts every process and thread of the user, other tests' daemons
        // running as nobody too: room for them, far below the 400 the bomb tries.
        .env("SWITCHBOARD_TOOLS__EXEC__MAX_PROCESSES", "128")
        .env("SWITCHBOARD_TOOLS__EXEC__MAX_MEMORY_MB", "256")
        .env("SWITCHBOARD_TOOLS__EXEC__MAX_CPU_SECS", "2");
    if running_as_root() {
        // RLIMIT_NPROC does not bind root; the packaged unit runs the daemon as its own user.
        std::os::unix::fs::chown(data, Some(65534), Some(65534)).unwrap();
        launch = launch.run_as(65534, 65534);
    }
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;
    let workspace = data.join("workspace");

    // It runs, in the workspace, and may write there.
    let (out, _) = run_exec(&llm, &daemon, "pwd; echo kept > notes.txt && cat notes.txt").await;
    assert!(out.contains(&format!("{}\nkept", workspace.display())), "{out}");
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "kept\n");

    // The daemon's environment and process: another PID namespace, so neither is there.
    let (out, _) =
        run_exec(&llm, &daemon, r"for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ; cat $p/comm; done 2>/dev/null")
            .await;
    assert!(!out.contains(SECRET), "the daemon's key reached the command:\n{out}");
    assert!(!out.lines().any(|line| line == "switchboard"), "the daemon's process is visible:\n{out}");

    // Its data: the store and logs in the data dir are hidden (only the workspace is there).
    let (out, _) = run_exec(&llm, &daemon, &format!("ls -A {}; ls -A $HOME", data.display())).await;
    assert!(!out.contains("switchboard.db") && !out.contains("sandbox.log"), "{out}");

    // Writing outside the workspace: the system is read-only, /tmp private, the data dir empty.
    let marker = format!("pwned-{}", std::process::id());
    let (out, _) = run_exec(
        &llm,
        &daemon,
        &format!("echo x > /usr/{marker}; echo x > /tmp/{marker}; echo x > {}/{marker}; ls /tmp", data.display()),
    )
    .await;
    assert!(out.contains("Read-only file system") || out.contains("Permission denied"), "{out}");
    for outside in [Path::new("/usr").join(&marker), Path::new("/tmp").join(&marker), data.join(&marker)] {
        assert!(!outside.exists(), "{} was written from the sandbox:\n{out}", outside.display());
    }

    // The network: none, not even loopback to the model server next door.
    let probe = format!(
        "curl -s -m 3 -o /dev/null -w '%{{http_code}}' {}/v1/models; echo; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
        llm.base_url()
    );
    let (out, _) = run_exec(&llm, &daemon, &probe).await;
    assert!(out.contains("\n000\nlo"), "the command reached the network:\n{out}");

    // A fork bomb meets the process limit, and ends with the command.
    // In a subshell, which dies at the limit ("Cannot fork"); counted with builtins only, as
    // the shell cannot fork a `ls` either while the sleeps hold every slot.
    let bomb = "(i=0; while [ $i -lt 400 ]; do sleep 30 & i=$((i+1)); done) 2>/dev/null; \
                set -- /proc/[0-9]*; echo \"$# processes\"";
    let (out, _) = run_exec(&llm, &daemon, bomb).await;
    let count: usize =
        out.split(" processes").next().and_then(|s| s.lines().last()?.trim().parse().ok()).unwrap_or(usize::MAX);
    assert!(count <= 128, "{count} processes in the sandbox:\n{out}");

    // Memory and CPU: the command fails, quickly, and the daemon does not.
    let (out, took) =
        run_exec(&llm, &daemon, r#"awk 'BEGIN { s = "x"; while (1) s = s s }'; echo "awk ended: $?""#).await;
    assert!(out.contains("awk ended: ") && !out.contains("awk ended: 0"), "{out}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    let (out, took) = run_exec(&llm, &daemon, "while :; do :; done").await;
    assert!(!out.contains("did not finish"), "the CPU limit did not stop the loop before the timeout:\n{out}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(daemon.is_alive());
    let (out, _) = run_exec(&llm, &daemon, "echo still here").await;
    assert!(out.ends_with("still here"), "{out}");
}

/// What running as root means for `exec` is in the start-up log, as `doctor` says it; a daemon
/// started as an ordinary user says nothing of root.
#[tokio::test]
async fn the_start_up_log_says_what_running_as_root_means_for_exec() {
    let as_root_line =
        |logs: &str| logs.lines().find(|line| line.contains("the daemon runs as root")).map(str::to_owned);
    let dir = tempfile::tempdir().unwrap();
    let daemon = Launch::new(dir.path(), "run", &["run"])
        .llm("http://127.0.0.1:9/v1")
        .env("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "none")
        .spawn();
    daemon.wait_for_log("switchboard started").await;
    let said = as_root_line(&daemon.logs());
    if !running_as_root() {
        assert_eq!(said, None);
        return;
    }
    let said = said.unwrap_or_else(|| panic!("nothing said of root at start:\n{}", daemon.logs()));
    assert!(said.contains("WARN") && said.contains("max_processes (RLIMIT_NPROC) does not bind root"), "{said}");
    assert!(said.contains("without the sandbox a command can read and change every file"), "{said}");

    let other = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(other.path(), Some(65534), Some(65534)).unwrap();
    let daemon = Launch::new(other.path(), "run", &["run"])
        .llm("http://127.0.0.1:9/v1")
        .env("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "none")
        .run_as(65534, 65534)
        .spawn();
    daemon.wait_for_log("switchboard started").await;
    assert_eq!(as_root_line(&daemon.logs()), None, "{}", daemon.logs());
}
