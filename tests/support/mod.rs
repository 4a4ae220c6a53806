//! Helpers for end-to-end tests: run the real `switchboard` binary as a child process.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A free TCP port on 127.0.0.1 (bound and released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `switchboard` process with its own data dir and log file.
pub struct Daemon {
    child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
}

/// How to start a daemon.
pub struct Launch<'a> {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Soft and hard `RLIMIT_NOFILE` of the daemon process, when set.
    pub nofile: Option<u64>,
    pub data_dir: &'a Path,
    pub name: &'a str,
    /// Run the daemon as this (uid, gid) instead of the test's own user (needs root).
    pub user: Option<(u32, u32)>,
    /// A command the daemon is started through (`ip netns exec <ns>`), which execs it.
    pub wrapper: Vec<String>,
    /// The API's port; a free one when not set.
    pub port: Option<u16>,
    /// The config file sets the API's listen address (on `port`), not the environment: a
    /// reload can then change it.
    pub listen_in_config: bool,
}

impl<'a> Launch<'a> {
    pub fn new(data_dir: &'a Path, name: &'a str, args: &[&str]) -> Self {
        Self {
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
            nofile: None,
            data_dir,
            name,
            user: None,
            wrapper: Vec::new(),
            port: None,
            listen_in_config: false,
        }
    }

    /// Serves the API on `port` (a restarted process on the port its clients know).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Leaves the API's listen address to the config file, which must set it on `port` (the
    /// environment would override the file, on every reload too).
    pub fn listen_in_config(mut self, port: u16) -> Self {
        self.listen_in_config = true;
        self.port(port)
    }

    /// Starts the daemon through `wrapper`, a command that execs it (so the pid stays the
    /// daemon's): `["ip", "netns", "exec", "ns1"]` runs it in another network namespace.
    pub fn via(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Runs the daemon as `uid`/`gid` (the test must run as root to switch).
    pub fn run_as(mut self, uid: u32, gid: u32) -> Self {
        self.user = Some((uid, gid));
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Runs the daemon with at most `limit` open descriptors.
    pub fn nofile(mut self, limit: u64) -> Self {
        self.nofile = Some(limit);
        self
    }

    /// Points the daemon at a fake OpenAI-compatible server.
    pub fn llm(self, base_url: &str) -> Self {
        self.env("OPENAI_BASE_URL", base_url)
            .env("OPENAI_API_KEY", "sk-test-secret")
            .env("SWITCHBOARD_MODEL", "fake-model")
    }

    pub fn spawn(self) -> Daemon {
        let port = self.port.unwrap_or_else(free_port);
        let log = self.data_dir.join(format!("{}.log", self.name));
        let log_file = std::fs::File::create(&log).unwrap();
        let binary = env!("CARGO_BIN_EXE_switchboard");
        let mut command = match self.wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut command = Command::new(program);
                command.args(wrapper_args).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command.args(&self.args).stdin(Stdio::null()).stdout(log_file.try_clone().unwrap()).stderr(log_file);
        for (key, _) in std::env::vars() {
            if key.starts_with("SWITCHBOARD_")
                || key.starts_with("OPENAI_")
                || key.starts_with("ANTHROPIC_")
                || key.starts_with("TELEGRAM_")
                || key.starts_with("DISCORD_")
                || key.starts_with("MATRIX_")
                || key == "RUST_LOG"
            {
                command.env_remove(key);
            }
        }
        command
            .env("HOME", self.data_dir)
            .env("XDG_CONFIG_HOME", self.data_dir.join("config"))
            .env("SWITCHBOARD_DATA_DIR", self.data_dir)
            .env("SWITCHBOARD_LOG", "info,switchboard=debug");
        if !self.listen_in_config {
            command.env("SWITCHBOARD_CHANNELS__API__LISTEN", format!("127.0.0.1:{port}"));
        }
        for (key, value) in &self.env {
            command.env(key, value);
        }
        if let Some((uid, gid)) = self.user {
            use std::os::unix::process::CommandExt;
            // std clears the supplementary groups when root switches user.
            command.uid(uid).gid(gid);
        }
        if let Some(limit) = self.nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe and touches only the child's limits.
            unsafe {
                command.pre_exec(move || {
                    let rlimit = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        Daemon { child: Some(command.spawn().unwrap()), port, log }
    }
}

impl Daemon {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Whether the process is still running (not exited, not killed).
    pub fn is_alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|child| child.try_wait().unwrap().is_none())
    }

    /// The resident set size in KiB (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Waits until `GET /healthz` answers 200.
    pub async fn wait_healthy(&mut self) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited early with {status}:\n{}", self.logs());
            }
            if client.get(self.url("/healthz")).send().await.is_ok_and(|r| r.status() == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("daemon never became healthy:\n{}", self.logs());
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_for_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.logs().contains(needle) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("log never showed {needle:?}:\n{}", self.logs());
    }

    /// Sends a signal with the `kill` command.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.pid().to_string()).status().unwrap();
        assert!(status.success());
    }

    /// Kills the process hard (SIGKILL) and reaps it.
    pub fn kill_hard(&mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Waits for the process to exit by itself.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(Instant::now() < deadline, "daemon did not exit:\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Posts a message and returns (status, JSON body).
    /// GETs `path` (no token) and returns the status and JSON body.
    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let response = reqwest::Client::new().get(self.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn post(&self, body: Value) -> (u16, Value) {
        self.post_with(body, None).await
    }

    /// Posts `text` to the chat `me` and returns the answer's body, which must come with a 200.
    pub async fn say(&self, text: &str) -> Value {
        let (status, body) = self.post(serde_json::json!({"chat_id": "me", "content": text})).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    pub async fn post_with(&self, body: Value, token: Option<&str>) -> (u16, Value) {
        let mut request = reqwest::Client::new().post(self.url("/v1/messages")).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let resp = request.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the binary to completion and returns (exit status, stderr, stdout).
pub fn run_to_exit(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String, String) {
    run_to_exit_via(&[], data_dir, args, env)
}

/// [`run_to_exit`] started through `wrapper` (`["setpriv", "--reuid=65534", …]`), if any.
pub fn run_to_exit_via(
    wrapper: &[&str],
    data_dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (ExitStatus, String, String) {
    let binary = env!("CARGO_BIN_EXE_switchboard");
    let mut command = match wrapper.split_first() {
        Some((program, wrapper_args)) => {
            let mut command = Command::new(program);
            command.args(wrapper_args).arg(binary);
            command
        }
        None => Command::new(binary),
    };
    command.args(args).stdin(Stdio::null());
    for (key, _) in std::env::vars() {
        let ours = ["SWITCHBOARD_", "OPENAI_", "ANTHROPIC_", "TELEGRAM_", "DISCORD_"];
        if ours.iter().any(|prefix| key.starts_with(prefix)) {
            command.env_remove(key);
        }
    }
    command
        .env("HOME", data_dir)
        .env("XDG_CONFIG_HOME", data_dir.join("config"))
        .env("SWITCHBOARD_DATA_DIR", data_dir)
        .env("SWITCHBOARD_CHANNELS__API__LISTEN", format!("127.0.0.1:{}", free_port()));
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // A command that should have exited but keeps running (a daemon that started when it
    // should have refused) is killed, so the test fails instead of hanging.
    let pid = child.id().to_string();
    let (exited, exit_seen) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if exit_seen.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    });
    let output = child.wait_with_output().unwrap();
    let _ = exited.send(());
    watchdog.join().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status, text(&output.stderr), text(&output.stdout))
}

/// Waits until each of the JetStream `streams` (`SWITCHBOARD_IN`, `SWITCHBOARD_OUT`) holds no
/// message. They are work-queue streams, which drop a message when it is acked: so by then
/// every message published to them was settled for good, and none can be redelivered. The
/// signal a test waits for before it asserts that nothing came round again.
pub async fn wait_streams_acked(nats_url: &str, streams: &[&str]) {
    let js = async_nats::jetstream::new(async_nats::connect(nats_url).await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    for name in streams {
        loop {
            let held = js.get_stream(name).await.unwrap().info().await.unwrap().state.messages;
            if held == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "{held} messages in {name} were never acked");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Waits until the bus journal of the embedded daemon in `data_dir` holds no row: a row is
/// deleted when its message is acked, so by then every message the daemon took in or sends out
/// was settled for good. The embedded shape's counterpart of [`wait_streams_acked`].
pub async fn wait_journal_empty(data_dir: &Path) {
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(data_dir.join("switchboard.db"));
    let mut connection = sqlx::ConnectOptions::connect(&options).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (held,): (i64,) =
            sqlx::query_as("SELECT count(*) FROM bus_journal").fetch_one(&mut connection).await.unwrap();
        if held == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{held} journaled messages were never acked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
