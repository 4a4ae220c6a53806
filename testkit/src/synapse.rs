//! A real Matrix homeserver per test: Synapse from PyPI, on a free loopback port, with SQLite in
//! a temporary directory, open registration and its rate limits raised, so a test registers its
//! bot and people over HTTP and drives them as fast as it likes.
//!
//! `.ci/run` installs Synapse into a virtualenv and names its Python in
//! `SWITCHBOARD_TEST_SYNAPSE`. [`Synapse::python`] says whether one is there: in CI its absence
//! fails the test, elsewhere the test is skipped with the reason.
//!
//! [`Synapse::restart`] brings the same server back on the same port with the same database (a
//! homeserver restarted mid-conversation). The child is killed when the value is dropped.
//!
//! Test helper: failures to start panic with the reason, as a failed fixture should.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::process::{Child, Command};

/// Synapse imports for about a second and sets up its database on the first start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A running Synapse child process, killed on drop.
pub struct Synapse {
    python: PathBuf,
    dir: TempDir,
    port: u16,
    child: Option<Child>,
    http: reqwest::Client,
}

/// A registered account: its user id and an access token.
#[derive(Debug, Clone)]
pub struct Account {
    pub user_id: String,
    pub password: String,
    pub access_token: String,
}

impl Account {
    /// The user id as the Matrix client takes it.
    pub fn id(&self) -> matrix_sdk::ruma::OwnedUserId {
        self.user_id.parse().unwrap_or_else(|err| panic!("{:?} is not a user id: {err}", self.user_id))
    }
}

impl Synapse {
    /// The Python with Synapse installed, or why there is none. In CI (`CI` set) a missing one
    /// panics: the Matrix tests are part of the README's test command there.
    pub fn python() -> Result<PathBuf, String> {
        let python = match std::env::var_os("SWITCHBOARD_TEST_SYNAPSE") {
            Some(path) => PathBuf::from(path),
            None => default_python(),
        };
        let found = std::process::Command::new(&python)
            .args(["-c", "import synapse"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        match found {
            true => Ok(python),
            false if std::env::var_os("CI").is_some() => {
                panic!("SWITCHBOARD_TEST_SYNAPSE must name a Python with matrix-synapse in CI ({python:?} has none)")
            }
            false => Err(format!(
                "{} cannot import synapse (set SWITCHBOARD_TEST_SYNAPSE to a Python with matrix-synapse; .ci/run makes one)",
                python.display()
            )),
        }
    }

    /// Starts a homeserver named `localhost` on a free loopback port.
    pub async fn start(python: &Path) -> Synapse {
        Self::start_with_message_limit(python, UNLIMITED).await
    }

    /// The same, with each user's messages limited as `rc_message` says
    /// (`{per_second: 0.2, burst_count: 10}` is Synapse's default): beyond it the homeserver
    /// answers 429 `M_LIMIT_EXCEEDED` with `retry_after_ms`.
    pub async fn start_with_message_limit(python: &Path, rc_message: &str) -> Synapse {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("cannot create a temp dir: {err}"));
        let port = free_port();
        write_config(dir.path(), port, rc_message);
        let http = reqwest::Client::new();
        let mut synapse = Synapse { python: python.to_owned(), dir, port, child: None, http };
        synapse.launch().await;
        synapse
    }

    /// The client API's base URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where the homeserver's log goes (for a test that wants to show it on failure).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("synapse.log")
    }

    /// Registers `name` with `password` (open registration) and logs in once.
    pub async fn register(&self, name: &str, password: &str) -> Account {
        let body = json!({"username": name, "password": password, "auth": {"type": "m.login.dummy"}});
        let answer = self.post("/_matrix/client/v3/register", &body).await;
        let user_id = answer["user_id"].as_str().unwrap_or_else(|| panic!("registering {name}: {answer}")).to_owned();
        let access_token = answer["access_token"].as_str().unwrap_or_default().to_owned();
        Account { user_id, password: password.to_owned(), access_token }
    }

    /// Stops the server (SIGKILL: it keeps nothing in memory that SQLite has not written).
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
            let _ = child.wait().await;
        }
    }

    /// Stops the server and starts it again on the same port with the same database.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.launch().await;
    }

    async fn launch(&mut self) {
        let log = std::fs::File::create(self.log_path()).unwrap_or_else(|err| panic!("synapse log: {err}"));
        let child = Command::new(&self.python)
            .args(["-m", "synapse.app.homeserver", "-c"])
            .arg(self.dir.path().join("homeserver.yaml"))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", self.python.display()));
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        let versions = format!("{}/_matrix/client/versions", self.url());
        loop {
            if self.http.get(&versions).send().await.is_ok_and(|answer| answer.status().is_success()) {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
                panic!("synapse exited with {status} before it served: {log}");
            }
            assert!(Instant::now() < deadline, "synapse did not serve within {START_TIMEOUT:?}");
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    async fn post(&self, path: &str, body: &Value) -> Value {
        let answer = self.http.post(format!("{}{path}", self.url())).json(body).send().await;
        let answer = answer.unwrap_or_else(|err| panic!("POST {path}: {err}"));
        answer.json().await.unwrap_or_else(|err| panic!("POST {path}: {err}"))
    }
}

/// A rate limit no test reaches.
const UNLIMITED: &str = "{per_second: 10000, burst_count: 10000}";

/// `target/ci-synapse/bin/python` of the workspace, where `.ci/run` installs Synapse.
fn default_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/ci-synapse/bin/python")
}

/// A port nothing listens on now (Synapse binds it itself a moment later).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|err| panic!("no free port: {err}"));
    listener.local_addr().unwrap_or_else(|err| panic!("no local address: {err}")).port()
}

/// The homeserver's config: loopback only, SQLite, open registration, limits raised, no
/// federation or key servers (there is no internet here), a signing key of its own.
fn write_config(dir: &Path, port: u16, rc_message: &str) {
    let seed: Vec<u8> = (0..32).map(|_| rand_byte()).collect();
    let key = format!("ed25519 a_test {}\n", base64_unpadded(&seed));
    std::fs::write(dir.join("signing.key"), key).unwrap_or_else(|err| panic!("signing key: {err}"));
    let path = |name: &str| dir.join(name).display().to_string();
    let unlimited = UNLIMITED;
    let mut config = String::new();
    let _ = write!(
        config,
        "server_name: localhost\n\
         pid_file: {pid}\n\
         listeners:\n  - port: {port}\n    bind_addresses: ['127.0.0.1']\n    type: http\n    tls: false\n    \
         x_forwarded: false\n    resources:\n      - names: [client]\n        compress: false\n\
         database:\n  name: sqlite3\n  args:\n    database: {db}\n\
         media_store_path: {media}\n\
         signing_key_path: {key}\n\
         registration_shared_secret: test-secret\n\
         enable_registration: true\n\
         enable_registration_without_verification: true\n\
         bcrypt_rounds: 4\n\
         report_stats: false\n\
         macaroon_secret_key: test-macaroon\n\
         form_secret: test-form\n\
         trusted_key_servers: []\n\
         suppress_key_server_warning: true\n\
         federation_domain_whitelist: []\n\
         rc_message: {rc_message}\n\
         rc_registration: {unlimited}\n\
         rc_login:\n  address: {unlimited}\n  account: {unlimited}\n  failed_attempts: {unlimited}\n\
         rc_joins:\n  local: {unlimited}\n  remote: {unlimited}\n\
         rc_invites:\n  per_room: {unlimited}\n  per_user: {unlimited}\n  per_issuer: {unlimited}\n\
         rc_key_requests: {unlimited}\n",
        pid = path("homeserver.pid"),
        db = path("homeserver.db"),
        media = path("media"),
        key = path("signing.key"),
    );
    std::fs::write(dir.join("homeserver.yaml"), config).unwrap_or_else(|err| panic!("homeserver.yaml: {err}"));
}

/// Randomness enough for a test server's key: std seeds each `RandomState` at random.
fn rand_byte() -> u8 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now()) as u8
}

fn base64_unpadded(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes)
}
