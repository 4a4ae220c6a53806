use std::time::Instant;

use super::*;

fn config() -> ExecToolConfig {
    ExecToolConfig::default()
}

fn exec_with(config: &ExecToolConfig) -> Exec {
    let parent = [("PATH", "/usr/local/bin:/usr/bin:/bin"), ("SECRET_TOKEN", "hunter2"), ("LANG", "C.UTF-8")];
    Exec::with_parent_env(config, parent.map(|(k, v)| (k.into(), v.into()))).unwrap()
}

fn context() -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext { workspace: dir.path().join("ws"), ..ToolContext::default() };
    (dir, ctx)
}

async fn run_ok(exec: &Exec, ctx: &ToolContext, args: Value) -> String {
    exec.execute(args, ctx).await.unwrap()
}

/// Gone, or a zombie waiting for a reaper that may not exist in a container.
fn process_is_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

async fn wait_gone(pid: &str) -> bool {
    for _ in 0..50 {
        if process_is_gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn runs_in_the_workspace_and_reports_exit_code_and_output() {
    let (_dir, ctx) = context();
    let exec = exec_with(&config());
    let out = run_ok(&exec, &ctx, json!({"command": "pwd; echo out; echo err >&2; exit 3"})).await;
    let root = ctx.workspace.canonicalize().unwrap();
    assert_eq!(out, format!("[exit code 3]\n{}\nout\nerr\n", root.display()));
    assert_eq!(run_ok(&exec, &ctx, json!({"command": "true"})).await, "[exit code 0]\n(no output)");
}

#[tokio::test]
async fn stdin_is_empty_and_the_environment_is_allow_listed() {
    let (_dir, ctx) = context();
    let exec = exec_with(&config());
    let out =
        run_ok(&exec, &ctx, json!({"command": "cat; echo \"[$SECRET_TOKEN][$LANG]\"; env | grep -c SECRET"})).await;
    assert_eq!(out, "[exit code 1]\n[][C.UTF-8]\n0\n");
}

/// The command holds no capabilities and cannot gain any (no_new_privs); a root test process
/// also empties the bounding set.
#[tokio::test]
async fn the_command_runs_without_capabilities_and_cannot_gain_any() {
    let (_dir, ctx) = context();
    let exec = exec_with(&config());
    let out = run_ok(&exec, &ctx, json!({"command": "grep -E '^(Cap|NoNewPrivs)' /proc/self/status"})).await;
    let none = "0000000000000000";
    for line in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert!(out.contains(&format!("{line}:\t{none}\n")), "{line} not empty:\n{out}");
    }
    assert!(out.contains("NoNewPrivs:\t1\n"), "{out}");
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        assert!(out.contains(&format!("CapBnd:\t{none}\n")), "root keeps a bounding set:\n{out}");
    }
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let (_dir, ctx) = context();
    let exec = exec_with(&config());
    let started = Instant::now();
    let command = "sleep 100 & echo $! > bg.pid; echo started; sleep 100";
    let err = exec.execute(json!({"command": command, "timeout_secs": 1}), &ctx).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    let message = err.to_string();
    assert!(message.contains("did not finish within 1 s") && message.contains("started"), "{message}");
    let pid = std::fs::read_to_string(ctx.workspace.join("bg.pid")).unwrap();
    assert!(wait_gone(pid.trim()).await, "the backgrounded grandchild {pid} survived");
}

#[tokio::test]
async fn background_jobs_do_not_outlive_a_finished_command() {
    let (_dir, ctx) = context();
    let exec = exec_with(&config());
    let started = Instant::now();
    let out = run_ok(&exec, &ctx, json!({"command": "sleep 100 & echo $!"})).await;
    assert!(started.elapsed() < Duration::from_secs(10), "waited for the background job");
    let pid = out.lines().nth(1).unwrap();
    assert!(wait_gone(pid).await, "background job {pid} survived");
}

/// The pid a detached process wrote to `file` in the workspace, once it has.
async fn pid_written_to(ctx: &ToolContext, file: &str) -> String {
    for _ in 0..50 {
        if let Ok(pid) = std::fs::read_to_string(ctx.workspace.join(file))
            && pid.ends_with('\n')
        {
            return pid.trim().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no pid in {file}");
}

/// What docs/security.md says of `setsid`: a process that has left the command's process group
/// outlives the command; one that still writes to the output dies of SIGPIPE once the output
/// is no longer read (OUTPUT_GRACE after the command ended). The commands wait until the
/// detached process has written its pid, which it does after setsid(): when the command ends
/// first, the group kill and setsid() race (the doc says so), and the test would be a coin toss.
#[tokio::test]
async fn a_setsid_process_outlives_the_command_unless_it_keeps_writing_to_the_output() {
    let (_dir, ctx) = context();
    let exec = exec_with(&config());
    let detached = "setsid -f sh -c 'echo $$ > quiet.pid; exec sleep 60' > /dev/null 2>&1; until [ -s quiet.pid ]; do sleep 0.05; done";
    assert_eq!(run_ok(&exec, &ctx, json!({"command": detached})).await, "[exit code 0]\n(no output)");
    let quiet = pid_written_to(&ctx, "quiet.pid").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let survived = !process_is_gone(&quiet);
    // SAFETY: kill(2) takes no pointers; the pid is the detached test process.
    unsafe { libc::kill(quiet.parse().unwrap(), libc::SIGKILL) };
    assert!(survived, "the detached process {quiet} did not outlive the command");

    let started = Instant::now();
    let writer = "setsid -f sh -c 'echo $$ > writer.pid; while :; do echo tick; sleep 0.2; done'; \
                  until [ -s writer.pid ]; do sleep 0.05; done";
    let out = run_ok(&exec, &ctx, json!({"command": writer})).await;
    let waited = started.elapsed();
    assert!(waited >= OUTPUT_GRACE && waited < Duration::from_secs(10), "returned after {waited:?}");
    assert!(out.contains("tick") && out.contains("kept the output open"), "{out}");
    let writer = pid_written_to(&ctx, "writer.pid").await;
    assert!(wait_gone(&writer).await, "the detached writer {writer} lived on after its output closed");
}

#[tokio::test]
async fn long_output_keeps_head_and_tail() {
    let (_dir, ctx) = context();
    let exec = exec_with(&ExecToolConfig { max_output_bytes: 100, ..config() });
    let out = run_ok(&exec, &ctx, json!({"command": "echo START; seq 1 100000; echo END"})).await;
    assert!(out.starts_with("[exit code 0]\nSTART\n1\n"), "{out}");
    assert!(out.ends_with("100000\nEND\n"), "{out}");
    assert!(out.contains("bytes of output cut"), "{out}");
    assert!(out.len() < 250, "{}", out.len());
}

#[tokio::test]
async fn timeout_argument_is_checked_and_capped() {
    let (_dir, ctx) = context();
    let exec = exec_with(&ExecToolConfig { timeout_secs: 5, max_timeout_secs: 7, ..config() });
    assert_eq!(exec.time_limit(&json!({})).unwrap(), Duration::from_secs(5));
    assert_eq!(exec.time_limit(&json!({"timeout_secs": 1000})).unwrap(), Duration::from_secs(7));
    for bad in [json!({"timeout_secs": 0}), json!({"timeout_secs": "10"}), json!({"timeout_secs": -1})] {
        assert!(matches!(exec.time_limit(&bad), Err(ToolError::InvalidArguments(_))), "{bad}");
    }
    assert!(exec.timeout().unwrap() > Duration::from_secs(7));
    let err = exec.execute(json!({"command": "  "}), &ctx).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(_)));
}

#[test]
fn bad_deny_patterns_are_reported() {
    let config = ExecToolConfig { deny_patterns: vec!["(".into()], ..config() };
    let err = Exec::with_parent_env(&config, Vec::new()).err().unwrap();
    assert_eq!(err.pattern, "(");
}

/// The default deny-list against commands it must refuse and look-alikes it must let through.
#[test]
fn default_deny_list_refuses_destructive_commands_only() {
    let exec = exec_with(&config());
    let denied = [
        "rm -rf /",
        "rm -rf /*",
        "rm -fr ~",
        "rm -rf ~/",
        "rm -rf $HOME",
        "rm -rf \"$HOME\"",
        "rm -rf ${HOME}/",
        "rm -rf --no-preserve-root /",
        "sudo rm -r -f / ",
        "cd /tmp && rm -rf /etc",
        "rm -rf /usr/",
        "mkfs.ext4 /dev/sda1",
        "mkfs -t ext4 /dev/sdb",
        "dd if=/dev/zero of=/dev/sda bs=1M",
        "echo x > /dev/sda",
        "cat img | tee /dev/nvme0n1",
        "shutdown -h now",
        "sudo reboot",
        "ls; halt",
        "/sbin/poweroff",
        "systemctl reboot",
        ":(){ :|:& };:",
        "bomb() { bomb | bomb & }; bomb",
        "chmod -R 777 /",
        "chown -R nobody /etc",
    ];
    let allowed = [
        "rm -rf ./build",
        "rm -rf build target/debug",
        "rm -rf /tmp/scratch",
        "rm ~/notes.txt",
        "rm -rf $HOME/project/build",
        "ls -la /",
        "echo shutdown",
        "grep reboot /var/log/syslog",
        "./reboot-check.sh",
        "dd if=/dev/zero of=./disk.img bs=1M count=1",
        "make 2>/dev/null > /dev/null",
        "chmod -R u+w ./dist",
        "chmod 644 /tmp/x",
        "f() { echo hi; }; f",
        "firm /",
        "cargo build --release",
    ];
    for command in denied {
        assert!(exec.check_denied(command).is_err(), "should be refused: {command}");
    }
    for command in allowed {
        assert!(exec.check_denied(command).is_ok(), "should run: {command}");
    }
}

#[tokio::test]
async fn outbox_names_the_runs_own_folder() {
    let (_dir, ctx) = context();
    let folder = crate::workspace::outbox::run_folder("r1");
    let ctx = ToolContext { outbox: Some(folder.clone()), ..ctx };
    let out = run_ok(&exec_with(&config()), &ctx, json!({"command": "echo 1,2 > \"$OUTBOX/table.csv\""})).await;
    assert_eq!(out, "[exit code 0]\n(no output)");
    let written = ctx.workspace.canonicalize().unwrap().join(folder).join("table.csv");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "1,2\n");
    let none = ToolContext { outbox: None, ..ctx };
    let out = run_ok(&exec_with(&config()), &none, json!({"command": "echo \"[$OUTBOX]\""})).await;
    assert_eq!(out, "[exit code 0]\n[]\n", "a run without a reply has no outbox");
}
