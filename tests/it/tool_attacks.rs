//! The attack table: what a model (or a prompt injection steering it) might try with the file
//! tools and `exec`, and what must happen. Every row runs through a real [`ToolRegistry`], the
//! way the agent loop calls tools. The same table is printed in docs/security.md, and
//! `docs_print_the_same_table` keeps the two equal.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use switchboard::config::{ExecToolConfig, FsToolsConfig, ToolsConfig};
use switchboard::provider::ToolCall;
use switchboard::tools::exec::Exec;
use switchboard::tools::{ToolContext, ToolFilter, ToolLimits, ToolRegistry, register_local_tools};

/// What must happen.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A safety refusal whose message contains this.
    Refused(&'static str),
    /// An error result (not a refusal) whose message contains this.
    Fails(&'static str),
    /// A normal result containing this.
    Allowed(&'static str),
}

/// Which configuration the row runs with.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Setup {
    /// The defaults: confined to the workspace.
    Confined,
    /// `allow_outside_workspace = true`.
    Outside,
}

struct Case {
    tries: &'static str,
    tool: &'static str,
    /// JSON arguments; `{ws}` stands for the workspace's absolute path, `{big}` for 2,000 bytes.
    args: &'static str,
    setup: Setup,
    expect: Expect,
}

const fn case(tries: &'static str, tool: &'static str, args: &'static str, expect: Expect) -> Case {
    Case { tries, tool, args, setup: Setup::Confined, expect }
}

use Expect::{Allowed, Fails, Refused};

const OUTSIDE: &str = "outside the workspace";

static CASES: &[Case] = &[
    case("read a file inside the workspace", "read_file", r#"{"path": "hello.txt"}"#, Allowed("hello")),
    case("climb out with ../", "read_file", r#"{"path": "../outside/secret.txt"}"#, Refused(OUTSIDE)),
    case("climb out from a subdirectory", "read_file", r#"{"path": "a/../../etc/passwd"}"#, Refused(OUTSIDE)),
    case("read an absolute path outside", "read_file", r#"{"path": "/etc/passwd"}"#, Refused(OUTSIDE)),
    case("read by the workspace's absolute path", "read_file", r#"{"path": "{ws}/hello.txt"}"#, Allowed("hello")),
    case("read through a symlink to /etc", "read_file", r#"{"path": "etc_link/passwd"}"#, Refused("symbolic link")),
    case("read a symlinked file pointing outside", "read_file", r#"{"path": "secret_link"}"#, Refused("symbolic link")),
    case("list a symlinked directory pointing outside", "list_dir", r#"{"path": "out_dir"}"#, Refused("symbolic link")),
    case(
        "write through a symlinked directory pointing outside",
        "write_file",
        r#"{"path": "out_dir/pwned.txt", "content": "x"}"#,
        Refused("symbolic link"),
    ),
    case(
        "overwrite a file outside through a symlinked file",
        "write_file",
        r#"{"path": "secret_link", "content": "x"}"#,
        Refused("symbolic link"),
    ),
    case(
        "create a file through a dangling symlink",
        "write_file",
        r#"{"path": "dangling", "content": "x"}"#,
        Refused("target does not exist"),
    ),
    case(
        "edit a file outside",
        "edit_file",
        r#"{"path": "/etc/hosts", "old_text": "a", "new_text": "b"}"#,
        Refused(OUTSIDE),
    ),
    case("read /dev/zero", "read_file", r#"{"path": "/dev/zero"}"#, Refused(OUTSIDE)),
    Case {
        tries: "read /dev/zero",
        tool: "read_file",
        args: r#"{"path": "/dev/zero"}"#,
        setup: Setup::Outside,
        expect: Refused("device file"),
    },
    case("read a FIFO (would block)", "read_file", r#"{"path": "fifo"}"#, Refused("FIFO")),
    case("write into a FIFO", "write_file", r#"{"path": "fifo", "content": "x"}"#, Refused("FIFO")),
    case("read a file over max_read_bytes", "read_file", r#"{"path": "big.txt"}"#, Allowed("offset=")),
    case(
        "write content over max_write_bytes",
        "write_file",
        r#"{"path": "huge.txt", "content": "{big}"}"#,
        Refused("max_write_bytes"),
    ),
    case(
        "write a new file in a new directory",
        "write_file",
        r#"{"path": "new/dir/f.txt", "content": "ok"}"#,
        Allowed("created"),
    ),
    case(
        "edit with text that is not there",
        "edit_file",
        r#"{"path": "dup.txt", "old_text": "zzz", "new_text": "b"}"#,
        Fails("not found"),
    ),
    case(
        "edit with text that occurs twice",
        "edit_file",
        r#"{"path": "dup.txt", "old_text": "same", "new_text": "b"}"#,
        Fails("occurs 2 times"),
    ),
    case("delete everything", "exec", r#"{"command": "rm -rf /"}"#, Refused("deny pattern")),
    case("delete the home directory", "exec", r#"{"command": "rm -rf ~"}"#, Refused("deny pattern")),
    case("delete $HOME", "exec", r#"{"command": "rm -rf \"$HOME\""}"#, Refused("deny pattern")),
    case(
        "delete / past the safeguard",
        "exec",
        r#"{"command": "rm -rf --no-preserve-root /"}"#,
        Refused("deny pattern"),
    ),
    case("format a disk", "exec", r#"{"command": "mkfs.ext4 /dev/sda1"}"#, Refused("deny pattern")),
    case("overwrite a disk with dd", "exec", r#"{"command": "dd if=/dev/zero of=/dev/sda"}"#, Refused("deny pattern")),
    case("overwrite a disk with a redirect", "exec", r#"{"command": "echo x > /dev/sda"}"#, Refused("deny pattern")),
    case("fork bomb", "exec", r#"{"command": ":(){ :|:& };:"}"#, Refused("deny pattern")),
    case("shut the machine down", "exec", r#"{"command": "shutdown -h now"}"#, Refused("deny pattern")),
    case("reboot", "exec", r#"{"command": "reboot"}"#, Refused("deny pattern")),
    case("open up / recursively", "exec", r#"{"command": "chmod -R 777 /"}"#, Refused("deny pattern")),
    case(
        "outlive the timeout in a background grandchild",
        "exec",
        r#"{"command": "sleep 100 & echo $! > grandchild.pid; sleep 100", "timeout_secs": 1}"#,
        Fails("did not finish within 1 s"),
    ),
    case(
        "read a secret from the environment",
        "exec",
        r#"{"command": "echo \"token=[$SECRET_TOKEN]\""}"#,
        Allowed("token=[]"),
    ),
    case("wait for input on stdin", "exec", r#"{"command": "cat; echo done"}"#, Allowed("done")),
    case(
        "clean a build directory (harmless)",
        "exec",
        r#"{"command": "mkdir -p build && rm -rf ./build && echo cleaned"}"#,
        Allowed("cleaned"),
    ),
    case("list the workspace (harmless)", "exec", r#"{"command": "ls"}"#, Allowed("hello.txt")),
    case("mention shutdown in an echo (harmless)", "exec", r#"{"command": "echo shutdown"}"#, Allowed("shutdown")),
];

/// `<tmp>/ws` (the workspace, with the links and files the cases use) and `<tmp>/outside`.
fn fixture(tmp: &Path) {
    let ws = tmp.join("ws");
    let outside = tmp.join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP SECRET").unwrap();
    std::fs::write(ws.join("hello.txt"), "hello\n").unwrap();
    std::fs::write(ws.join("dup.txt"), "same\nsame\n").unwrap();
    std::fs::write(ws.join("big.txt"), "0123456789\n".repeat(200)).unwrap();
    std::os::unix::fs::symlink("/etc", ws.join("etc_link")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("secret_link")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("out_dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("created-by-the-agent"), ws.join("dangling")).unwrap();
    let status = std::process::Command::new("mkfifo").arg(ws.join("fifo")).status().unwrap();
    assert!(status.success(), "mkfifo failed");
}

fn registry(setup: Setup) -> ToolRegistry {
    let config = ToolsConfig {
        fs: FsToolsConfig {
            allow_outside_workspace: setup == Setup::Outside,
            max_read_bytes: 1024,
            max_write_bytes: 1024,
            ..FsToolsConfig::default()
        },
        exec: ExecToolConfig { enabled: false, ..ExecToolConfig::default() },
        ..ToolsConfig::default()
    };
    let mut registry = ToolRegistry::new(ToolLimits::default());
    register_local_tools(&mut registry, &config, std::path::Path::new("/nonexistent")).unwrap();
    registry.register(Arc::new(exec_tool()));
    registry
}

/// `exec` whose parent environment holds a secret, injected rather than set on this process.
fn exec_tool() -> Exec {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let parent: Vec<(OsString, OsString)> =
        vec![("PATH".into(), path), ("SECRET_TOKEN".into(), "hunter2".into()), ("HOME".into(), "/nonexistent".into())];
    Exec::with_parent_env(&ExecToolConfig::default(), parent).unwrap()
}

fn arguments(case: &Case, ws: &Path) -> Value {
    let text = case.args.replace("{ws}", ws.to_str().unwrap()).replace("{big}", &"x".repeat(2000));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: bad JSON: {e}", case.tries))
}

/// Fails the test before anything runs if a command the table expects refused would run: a
/// regression in the deny-list must not get to execute `rm -rf /` on the test machine.
fn refuse_to_run_dangerous_rows() {
    let exec = exec_tool();
    for case in CASES.iter().filter(|c| c.tool == "exec" && matches!(c.expect, Refused(_))) {
        let command = serde_json::from_str::<Value>(case.args).unwrap()["command"].as_str().unwrap().to_owned();
        assert!(exec.check_denied(&command).is_err(), "ABORTED before running anything: `{command}` would run");
    }
}

#[tokio::test]
async fn attack_table() {
    refuse_to_run_dangerous_rows();
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let ws = tmp.path().join("ws");
    let ctx = ToolContext { workspace: ws.clone(), run_id: "attack".into(), ..ToolContext::default() };
    let mut failures = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let call = ToolCall { id: format!("call_{i}"), name: case.tool.into(), arguments: arguments(case, &ws) };
        let out = registry(case.setup).call(&call, &ctx, &ToolFilter::All).await;
        let ok = match case.expect {
            Refused(text) => out.is_error && out.content.starts_with("error: refused:") && out.content.contains(text),
            Fails(text) => out.is_error && !out.content.starts_with("error: refused:") && out.content.contains(text),
            Allowed(text) => !out.is_error && out.content.contains(text),
        };
        if !ok {
            failures.push(format!("{} — expected {:?}, got {:?}", case.tries, case.expect, out));
        }
    }
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
    // What the refusals must have left untouched.
    assert!(!tmp.path().join("outside/pwned.txt").exists());
    assert!(!tmp.path().join("outside/created-by-the-agent").exists());
    assert_eq!(std::fs::read_to_string(tmp.path().join("outside/secret.txt")).unwrap(), "TOP SECRET");
    assert_eq!(std::fs::read_to_string(ws.join("dup.txt")).unwrap(), "same\nsame\n");
    let pid = std::fs::read_to_string(ws.join("grandchild.pid")).unwrap();
    assert!(wait_gone(pid.trim()).await, "the grandchild {pid} outlived the timeout");
}

/// Gone, or a zombie waiting for a reaper (a container's PID 1 may never reap it).
async fn wait_gone(pid: &str) -> bool {
    for _ in 0..50 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) if stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')) => {
                return true;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    false
}

/// The table as Markdown, as docs/security.md prints it.
fn markdown_table() -> String {
    let mut out = String::from("| What it tries | Tool call | What must happen |\n| --- | --- | --- |\n");
    for case in CASES {
        let setup = if case.setup == Setup::Outside { " (allow_outside_workspace = true)" } else { "" };
        let expect = match case.expect {
            Refused(text) => format!("refused: “{text}”"),
            Fails(text) => format!("error: “{text}”"),
            Allowed(text) => format!("runs; result has “{text}”"),
        };
        let call = format!("`{} {}`", case.tool, case.args).replace('|', "\\|");
        out.push_str(&format!("| {}{setup} | {call} | {expect} |\n", case.tries));
    }
    out
}

#[test]
fn docs_print_the_same_table() {
    let docs = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md")).unwrap();
    let table = markdown_table();
    assert!(docs.contains(&table), "docs/security.md must contain this table verbatim:\n\n{table}");
}
