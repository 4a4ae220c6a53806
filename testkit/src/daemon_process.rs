//! A release build of the daemon started the way a user starts it, for the benchmark and the
//! soak: its own data directory, the API channel on a free port, a model server of the
//! caller's choosing, and readings of what the process uses from `/proc`.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `switchboard run`; killed when dropped.
pub struct MeasuredDaemon {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for MeasuredDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `binary args` in data directory `dir` with the bench's defaults, then each of `envs`
/// in order (so they can override the defaults).
fn spawn(binary: &Path, args: &[&str], dir: &Path, llm_base_url: &str, envs: &[&[(&str, &str)]]) -> Child {
    let mut command = Command::new(binary);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    command
        .env("HOME", dir)
        .env("SWITCHBOARD_DATA_DIR", dir)
        .env("SWITCHBOARD_LOG", "warn")
        // Every request comes from one API sender, a guest: its monthly budget must not end the run.
        .env("SWITCHBOARD_BUDGETS__GUEST", "0")
        .env("OPENAI_BASE_URL", llm_base_url)
        .env("OPENAI_API_KEY", "bench")
        .env("SWITCHBOARD_MODEL", "bench-model");
    for (key, value) in envs.iter().flat_map(|env| env.iter()) {
        command.env(key, value);
    }
    command.spawn().expect("cannot start the switchboard binary (build it with --release first)")
}

impl MeasuredDaemon {
    /// Starts `binary run` (on NATS when `nats` is a URL) and returns it with the time until
    /// `/healthz` first answered. `env` is set after the defaults, so it can override them.
    pub async fn launch(
        binary: &Path,
        llm_base_url: &str,
        nats: Option<&str>,
        env: &[(&str, &str)],
    ) -> (MeasuredDaemon, Duration) {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let mut args = vec!["run"];
        args.extend(nats.map(|url| ["--nats", url]).into_iter().flatten());
        let listen = format!("127.0.0.1:{port}");
        let started = Instant::now();
        let child =
            spawn(binary, &args, dir.path(), llm_base_url, &[&[("SWITCHBOARD_CHANNELS__API__LISTEN", &listen)], env]);
        let client = reqwest::Client::new();
        let health = format!("http://127.0.0.1:{port}/healthz");
        loop {
            if client.get(&health).send().await.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            // Long enough for a daemon under valgrind.
            assert!(started.elapsed() < Duration::from_secs(300), "daemon did not become healthy");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (MeasuredDaemon { child, port, _dir: dir }, started.elapsed())
    }

    /// Starts `binary agent --nats <nats>` with `env`: a worker beside a measured `run`. It has
    /// no health endpoint; it is given a second to connect.
    pub async fn launch_agent(binary: &Path, llm_base_url: &str, nats: &str, env: &[(&str, &str)]) -> MeasuredDaemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let child = spawn(binary, &["agent", "--nats", nats], dir.path(), llm_base_url, &[env]);
        tokio::time::sleep(Duration::from_secs(1)).await;
        MeasuredDaemon { child, port: 0, _dir: dir }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory in KiB (`VmRSS`), 0 when the process is gone.
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// The most resident memory the process ever had, in KiB (`VmHWM`).
    pub fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    /// The anonymous part of resident memory in KiB (`RssAnon`: the heap and stacks, not the
    /// pages of the binary and libraries, which `VmRSS` also counts as they are touched).
    pub fn rss_anon_kib(&self) -> u64 {
        self.status_kib("RssAnon:")
    }

    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// CPU time (user + system) the process has used, in milliseconds. `/proc/<pid>/stat`
    /// counts in clock ticks of 1/100 s (USER_HZ is 100 on Linux), so the resolution is 10 ms.
    pub fn cpu_ms(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // Fields after the command name (which may hold spaces) start at field 3, `state`;
        // utime and stime are fields 14 and 15.
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        (ticks(14) + ticks(15)) * 10
    }

    /// Open file descriptors (sockets, files, pipes), 0 when they cannot be listed.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map_or(0, |dir| dir.count())
    }

    /// True while the process has not exited.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}
