//! An isolated `nats-server` per test: its own free port and its own JetStream directory.
//!
//! The server is started with `-p -1` so the kernel picks a free port, which the server writes
//! to a JSON ports file in a temporary directory. [`NatsServer::restart`] brings it back on the
//! same port with the same JetStream directory, so stored messages survive, which is what
//! crash tests need. The child is killed when the value is dropped.
//!
//! Test helper: failures to start panic with the reason, as a failed fixture should.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::process::{Child, Command};

/// How long a server may take to write its ports file and accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(15);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A login a server requires.
enum Auth {
    UserPassword(String, String),
    Token(String),
}

/// A running `nats-server` child process, killed on drop.
pub struct NatsServer {
    dir: TempDir,
    port: u16,
    jetstream: bool,
    /// The login the server requires, if any.
    auth: Option<Auth>,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts a server with JetStream on a free port.
    pub async fn start() -> NatsServer {
        Self::launch(true, None).await
    }

    /// Starts a server without JetStream, for tests of the "server lacks JetStream" error.
    pub async fn start_without_jetstream() -> NatsServer {
        Self::launch(false, None).await
    }

    /// Starts a server with JetStream that only lets in `user` with `password`.
    pub async fn start_with_auth(user: &str, password: &str) -> NatsServer {
        Self::launch(true, Some(Auth::UserPassword(user.to_owned(), password.to_owned()))).await
    }

    /// Starts a server with JetStream that only lets in clients sending `token`.
    pub async fn start_with_token(token: &str) -> NatsServer {
        Self::launch(true, Some(Auth::Token(token.to_owned()))).await
    }

    async fn launch(jetstream: bool, auth: Option<Auth>) -> NatsServer {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("cannot create a temp dir: {err}"));
        let mut server = NatsServer { dir, port: 0, jetstream, auth, child: None };
        let child = server.spawn(None);
        let pid = child.id().unwrap_or_else(|| panic!("nats-server exited at once"));
        server.child = Some(child);
        server.port = read_port(server.dir.path(), pid).await;
        wait_for_tcp(server.port).await;
        server
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server with SIGKILL (no clean shutdown) and waits until it is gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // An error here means the process already exited, which is what we want.
            let _ = child.kill().await;
        }
    }

    /// Kills the server if it runs, then starts it again on the same port with the same
    /// JetStream directory.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.child = Some(self.spawn(Some(self.port)));
        wait_for_tcp(self.port).await;
    }

    fn spawn(&self, port: Option<u16>) -> Child {
        let dir = self.dir.path();
        let port = port.map_or_else(|| "-1".to_owned(), |p| p.to_string());
        let mut cmd = Command::new(server_binary());
        cmd.args(["-a", "127.0.0.1", "-p", &port]);
        if self.jetstream {
            cmd.arg("-js").arg("-sd").arg(dir);
        }
        match &self.auth {
            Some(Auth::UserPassword(user, password)) => {
                cmd.args(["--user", user, "--pass", password]);
            }
            Some(Auth::Token(token)) => {
                cmd.args(["--auth", token]);
            }
            None => {}
        }
        cmd.arg("--ports_file_dir").arg(dir);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log_file(dir)).kill_on_drop(true);
        cmd.spawn().unwrap_or_else(|err| panic!("cannot start nats-server (is it installed?): {err}"))
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// `/usr/sbin` is not on every user's PATH, and Debian installs the server there.
fn server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("NATS_SERVER_BIN") {
        return PathBuf::from(path);
    }
    let debian = PathBuf::from("/usr/sbin/nats-server");
    if debian.exists() { debian } else { PathBuf::from("nats-server") }
}

/// The server's log goes to a file in its directory (appended across restarts), for debugging.
fn log_file(dir: &Path) -> Stdio {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("nats-server.log"));
    file.map_or_else(|_| Stdio::null(), Stdio::from)
}

/// Waits for `nats-server_<pid>.ports` and returns the client port written in it.
async fn read_port(dir: &Path, pid: u32) -> u16 {
    let path = dir.join(format!("nats-server_{pid}.ports"));
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        // The file may exist but be incomplete for an instant: parse errors mean "not yet".
        if let Ok(text) = tokio::fs::read_to_string(&path).await
            && let Some(port) = parse_ports_file(&text)
        {
            return port;
        }
        assert!(Instant::now() < deadline, "nats-server wrote no ports file in {}", dir.display());
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// `{"nats":["nats://127.0.0.1:4222"], …}` → 4222.
fn parse_ports_file(text: &str) -> Option<u16> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let url = value.get("nats")?.get(0)?.as_str()?;
    url.rsplit(':').next()?.parse().ok()
}

async fn wait_for_tcp(port: u16) {
    let deadline = Instant::now() + START_TIMEOUT;
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "nats-server does not accept connections on port {port}");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_file_is_parsed() {
        assert_eq!(parse_ports_file(r#"{"nats":["nats://127.0.0.1:45005"]}"#), Some(45005));
        assert_eq!(parse_ports_file(r#"{"nats":[]}"#), None);
        assert_eq!(parse_ports_file("{\"na"), None);
    }

    #[tokio::test]
    async fn starts_restarts_and_kills() {
        let mut server = NatsServer::start().await;
        let port = server.port();
        assert!(server.url().ends_with(&format!(":{port}")));
        server.restart().await;
        assert!(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok());
        server.kill().await;
        assert!(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err());
    }
}
