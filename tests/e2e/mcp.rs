//! MCP tool servers end to end, against the real servers from npm that `.ci/run` installs
//! (`@modelcontextprotocol/server-everything` and `server-filesystem`, named by
//! `SWITCHBOARD_TEST_MCP_BIN`): their tools reach the model as `<server>__<tool>` by the
//! sender's level, calls go through, a server that dies is restarted, many tools go behind
//! `mcp_tool_search`/`mcp_call`, streamable HTTP works, and a server that hangs at start
//! does not hold the daemon up.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::{Launch, free_port, run_to_exit};
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

/// The npm servers' `node_modules/.bin`; `None` (the test skips) outside CI when missing.
fn mcp_bin() -> Option<PathBuf> {
    let bin = std::env::var_os("SWITCHBOARD_TEST_MCP_BIN").map(PathBuf::from);
    match bin.filter(|bin| bin.join("mcp-server-everything").is_file()) {
        Some(bin) => Some(bin),
        None if std::env::var_os("CI").is_some() => {
            panic!("SWITCHBOARD_TEST_MCP_BIN must name the npm MCP servers in CI")
        }
        None => {
            eprintln!(
                "skipped: set SWITCHBOARD_TEST_MCP_BIN to a node_modules/.bin with the MCP servers (.ci/run does)"
            );
            None
        }
    }
}

fn offered(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().map(Vec::as_slice).unwrap_or_default();
    tools.iter().filter_map(|tool| tool["function"]["name"].as_str()).map(str::to_owned).collect()
}

fn last_tool_result(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let result = messages.iter().rev().find(|m| m["role"] == "tool").expect("no tool result");
    result["content"].as_str().unwrap().to_owned()
}

/// Waits until `needle` is in the log `count` times.
async fn wait_for_logged(daemon: &crate::support::Daemon, needle: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.logs().matches(needle).count() < count {
        assert!(Instant::now() < deadline, "the log never showed {needle:?} {count} times:\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The process whose command line contains `needle` among the descendants of `root`.
fn descendant(root: u32, needle: &str) -> Option<u32> {
    let mut parents = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let after_name = stat.rsplit_once(") ").map(|(_, rest)| rest).unwrap_or_default();
        if let Some(parent) = after_name.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) {
            parents.insert(pid, parent);
        }
    }
    parents.keys().copied().find(|&pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let mut up = pid;
        let mut under_root = false;
        while let Some(&parent) = parents.get(&up) {
            if parent == root {
                under_root = true;
                break;
            }
            up = parent;
        }
        under_root && String::from_utf8_lossy(&cmdline).contains(needle)
    })
}

#[tokio::test]
async fn stdio_servers_tools_reach_the_model_by_level_and_a_dead_server_comes_back() {
    let Some(bin) = mcp_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let servers = format!(
        r#"{{everything = {{command = "{everything}", args = ["stdio"], level = "user", env = {{GREETING = "hello from the config"}}}}, files = {{command = "{files}", args = ["{workspace}"]}}}}"#,
        everything = bin.join("mcp-server-everything").display(),
        files = bin.join("mcp-server-filesystem").display(),
        workspace = workspace.display(),
    );
    let llm = FakeLlm::start().await;
    let mut daemon = Launch::new(dir.path(), "mcp", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_USERS__OWNERS", r#"["api:owner"]"#)
        .env("SWITCHBOARD_USERS__DEFAULT_LEVEL", "user")
        .env("SWITCHBOARD_MCP__SERVERS", &servers)
        .spawn();
    daemon.wait_healthy().await;
    wait_for_logged(&daemon, "MCP server ready mcp=everything", 1).await;
    wait_for_logged(&daemon, "MCP server ready mcp=files", 1).await;
    // rmcp's own `info` lines (each server's whole InitializeResult) stay out of an `info` log.
    assert!(!daemon.logs().contains("Service initialized"), "{}", daemon.logs());

    llm.push(Scripted::ToolCalls(vec![("everything__echo".into(), json!({"message": "hello mcp"}))]));
    llm.push(Scripted::Text("Echoed.".into()));
    let (status, body) = daemon.post(json!({"chat_id": "me", "sender": "owner", "content": "echo it"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Echoed.")), "{body}");
    let requests = llm.requests();
    let tools = offered(&requests[0]);
    for name in ["everything__echo", "everything__get-sum", "files__read_text_file", "files__write_file"] {
        assert!(tools.contains(&name.to_owned()), "{name} not offered: {tools:?}");
    }
    let echo =
        requests[0]["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "everything__echo").unwrap();
    assert!(echo["function"]["parameters"]["properties"]["message"].is_object(), "the server's own schema: {echo}");
    assert_eq!(last_tool_result(&requests[1]), "Echo: hello mcp");

    // The filesystem server writes where the owner pointed it.
    llm.forget_requests();
    let note = workspace.join("note.txt");
    let write = json!({"path": note.to_str().unwrap(), "content": "written over MCP"});
    llm.push(Scripted::ToolCalls(vec![("files__write_file".into(), write)]));
    llm.push(Scripted::Text("Saved.".into()));
    let (status, body) = daemon.post(json!({"chat_id": "me", "sender": "owner", "content": "save it"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Saved.")), "{body}");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "written over MCP");

    // A server gets its own env and a few basics, not the daemon's secrets.
    llm.forget_requests();
    llm.push(Scripted::ToolCalls(vec![("everything__get-env".into(), json!({}))]));
    llm.push(Scripted::Text("Env.".into()));
    daemon.post(json!({"chat_id": "me", "sender": "owner", "content": "env"})).await;
    let env = last_tool_result(&llm.requests()[1]);
    assert!(env.contains("hello from the config") && env.contains("PATH"), "{env}");
    assert!(
        !env.contains("sk-test-secret") && !env.contains("OPENAI"),
        "the daemon's secrets reached a server:\n{env}"
    );

    // A `user` gets the server at level user, not the one left at the default (owner).
    llm.forget_requests();
    let (status, body) = daemon.post(json!({"chat_id": "bob", "sender": "bob", "content": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    let tools = offered(&llm.requests()[0]);
    assert!(tools.contains(&"everything__echo".to_owned()), "{tools:?}");
    assert!(!tools.iter().any(|tool| tool.starts_with("files__")), "{tools:?}");

    // The server dies: its tools leave the offer, and it is started again.
    let pid = descendant(daemon.pid(), "server-everything").expect("the everything server runs under the daemon");
    // SAFETY: kill(2) of a process this test found under its own daemon.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    wait_for_logged(&daemon, "MCP server down", 1).await;
    wait_for_logged(&daemon, "MCP server ready mcp=everything", 2).await;
    llm.forget_requests();
    llm.push(Scripted::ToolCalls(vec![("everything__echo".into(), json!({"message": "again"}))]));
    llm.push(Scripted::Text("Back.".into()));
    let (status, body) = daemon.post(json!({"chat_id": "me", "sender": "owner", "content": "echo again"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Back.")), "{body}");
    assert_eq!(last_tool_result(&llm.requests()[1]), "Echo: again");
}

#[tokio::test]
async fn many_tools_go_behind_search_over_streamable_http_and_a_hung_server_holds_nothing_up() {
    let Some(bin) = mcp_bin() else { return };
    let port = free_port();
    let _http_server = Killed(
        std::process::Command::new(bin.join("mcp-server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the streamable-HTTP server never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let servers = format!(
        r#"{{remote = {{url = "http://127.0.0.1:{port}/mcp", headers = {{Authorization = "Bearer not-checked"}}}}, stuck = {{command = "sleep", args = ["600"]}}}}"#
    );
    let dir = tempfile::tempdir().unwrap();
    let llm = FakeLlm::start().await;
    let started = Instant::now();
    let mut daemon = Launch::new(dir.path(), "mcp-http", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_USERS__OWNERS", r#"["api:owner"]"#)
        .env("SWITCHBOARD_MCP__SERVERS", &servers)
        .env("SWITCHBOARD_MCP__INLINE_MAX", "5")
        .env("SWITCHBOARD_MCP__STARTUP_TIMEOUT_SECS", "3")
        .spawn();
    daemon.wait_healthy().await;
    assert!(started.elapsed() < Duration::from_secs(3), "start-up waited for the hung server");
    wait_for_logged(&daemon, "MCP server ready mcp=remote", 1).await;

    llm.push(Scripted::ToolCalls(vec![("mcp_tool_search".into(), json!({"query": "echo a message back"}))]));
    llm.push(Scripted::ToolCalls(vec![(
        "mcp_call".into(),
        json!({"tool": "remote__echo", "arguments": {"message": "over http"}}),
    )]));
    llm.push(Scripted::Text("Done.".into()));
    let (status, body) = daemon.post(json!({"chat_id": "me", "sender": "owner", "content": "echo"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Done.")), "{body}");
    let requests = llm.requests();
    let tools = offered(&requests[0]);
    assert!(tools.contains(&"mcp_tool_search".to_owned()) && tools.contains(&"mcp_call".to_owned()), "{tools:?}");
    assert!(!tools.iter().any(|tool| tool.starts_with("remote__")), "13 tools are past inline_max 5: {tools:?}");
    let found = last_tool_result(&requests[1]);
    assert!(found.contains("- remote__echo: ") && found.contains("\"message\""), "{found}");
    assert_eq!(last_tool_result(&requests[2]), "Echo: over http");

    // The hung server is reported and retried, without holding anything up.
    wait_for_logged(&daemon, "it did not start and list its tools within 3s", 1).await;
}

/// A child process killed when the test ends, passed or not.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn mcp_list_shows_each_servers_tools_and_fails_on_one_that_does_not_start() {
    let Some(bin) = mcp_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let servers = format!(
        r#"{{files = {{command = "{}", args = ["{}"]}}, broken = {{command = "/nonexistent/mcp-server"}}}}"#,
        bin.join("mcp-server-filesystem").display(),
        dir.path().display()
    );
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["mcp", "list"], &[("SWITCHBOARD_MCP__SERVERS", &servers)]);
    assert_eq!(status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("files: stdio `"), "{stdout}");
    assert!(stdout.contains("ready, 14 tools for level owner and above:\n    files__read_file"), "{stdout}");
    assert!(stdout.contains("broken: stdio `/nonexistent/mcp-server`\n  DOWN: cannot start"), "{stdout}");
    assert!(stderr.contains("1 MCP server(s) did not start"), "{stderr}");

    // `doctor` checks them the same way, one line a server.
    let (_, _, stdout) = run_to_exit(dir.path(), &["doctor"], &[("SWITCHBOARD_MCP__SERVERS", &servers)]);
    assert!(stdout.contains("ok    mcp files"), "{stdout}");
    assert!(stdout.contains("ok    exec sandbox            bubblewrap: system read-only"), "{stdout}");
    assert!(
        stdout.contains("FAIL  mcp broken") && stdout.contains("cannot start `/nonexistent/mcp-server`"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_server_added_to_the_config_starts_on_sighup() {
    let Some(bin) = mcp_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.toml");
    std::fs::write(&path, "[users]\nowners = [\"api:owner\"]\n").unwrap();
    let llm = FakeLlm::start().await;
    let mut daemon = Launch::new(dir.path(), "mcp-reload", &["run", "--config", path.to_str().unwrap()])
        .llm(&llm.base_url())
        .spawn();
    daemon.wait_healthy().await;
    let added = format!(
        "[users]\nowners = [\"api:owner\"]\n\n[mcp.servers.files]\ncommand = \"{}\"\nargs = [\"{}\"]\n",
        bin.join("mcp-server-filesystem").display(),
        dir.path().display()
    );
    std::fs::write(&path, added).unwrap();
    daemon.signal("HUP");
    wait_for_logged(&daemon, "MCP server ready mcp=files", 1).await;
    let (status, body) = daemon.post(json!({"chat_id": "me", "sender": "owner", "content": "hi"})).await;
    assert_eq!(status, 200, "{body}");
    let tools = offered(&llm.requests()[0]);
    assert!(tools.contains(&"files__read_text_file".to_owned()), "{tools:?}");
}
