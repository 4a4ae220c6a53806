//! The shipped systemd units, read as systemd reads them: the mistakes that cost a deployment
//! (units fighting over one state directory, a unit given up after a few fast failures, a
//! command line the binary no longer takes) fail here instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One unit file: `section → key → values` (a key may repeat, as `Environment=` does).
struct Unit {
    name: String,
    sections: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

impl Unit {
    fn read(path: &Path) -> Unit {
        let text = std::fs::read_to_string(path).unwrap();
        let mut sections: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        let mut current = String::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                current = name.to_owned();
                continue;
            }
            let (key, value) =
                line.split_once('=').unwrap_or_else(|| panic!("{}: not key=value: {line}", path.display()));
            sections
                .entry(current.clone())
                .or_default()
                .entry(key.trim().to_owned())
                .or_default()
                .push(value.trim().to_owned());
        }
        Unit { name: path.file_name().unwrap().to_string_lossy().into_owned(), sections }
    }

    /// The last value of `key` in `section` (a later line overrides an earlier one).
    fn get(&self, section: &str, key: &str) -> Option<&str> {
        self.sections.get(section)?.get(key)?.last().map(String::as_str)
    }

    fn all(&self, section: &str, key: &str) -> Vec<&str> {
        self.sections.get(section).and_then(|keys| keys.get(key)).into_iter().flatten().map(String::as_str).collect()
    }
}

fn units() -> Vec<(PathBuf, Unit)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd");
    let mut units: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "service"))
        .map(|path| (path.clone(), Unit::read(&path)))
        .collect();
    units.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(units.len(), 3, "expected the run, agent and channel units");
    units
}

#[test]
fn every_unit_runs_as_one_user_on_one_state_directory() {
    let units = units();
    let (_, first) = &units[0];
    let user = first.get("Service", "User").expect("no User=");
    for (_, unit) in &units {
        let name = &unit.name;
        // Dynamic users are per unit unless named alike, and systemd re-chowns a state
        // directory whose owner differs at each start: one static user for all.
        assert_ne!(unit.get("Service", "DynamicUser"), Some("yes"), "{name}: DynamicUser=yes");
        assert_eq!(unit.get("Service", "User"), Some(user), "{name}: another user");
        assert_eq!(unit.get("Service", "Group"), Some(user), "{name}: another group");
        assert_eq!(unit.get("Service", "StateDirectory"), Some("switchboard"), "{name}");
        // The data dir the daemon uses is the directory systemd makes and hands to the user.
        let env = unit.all("Service", "Environment");
        assert!(env.contains(&"SWITCHBOARD_DATA_DIR=/var/lib/switchboard"), "{name}: {env:?}");
        assert!(env.contains(&"SWITCHBOARD_CONFIG=/etc/switchboard/config.toml"), "{name}: {env:?}");
    }
    // The command the operations guide gives creates that user.
    let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md")).unwrap();
    let useradd =
        format!("useradd --system --user-group --home-dir /var/lib/switchboard --shell /usr/sbin/nologin {user}");
    assert!(guide.contains(&useradd), "docs/operations.md lacks `{useradd}`");
}

#[test]
fn every_unit_keeps_restarting_without_a_start_limit() {
    for (_, unit) in units() {
        let name = &unit.name;
        // In [Unit]: systemd ignores it in [Service] (with a warning) and keeps its default
        // of 5 starts in 10 s, after which an agent started before NATS stays down.
        assert_eq!(unit.get("Unit", "StartLimitIntervalSec"), Some("0"), "{name}");
        assert_eq!(unit.get("Service", "Restart"), Some("on-failure"), "{name}");
        let delay: u32 = unit.get("Service", "RestartSec").and_then(|s| s.parse().ok()).unwrap_or(0);
        assert!(delay >= 1, "{name}: restarting in a tight loop");
    }
}

/// Each `ExecStart=` is a command line the binary takes (`%i` as each channel).
#[test]
fn every_unit_starts_a_command_the_binary_has() {
    for (_, unit) in units() {
        let exec = unit.get("Service", "ExecStart").unwrap();
        let mut words = exec.split_whitespace();
        assert_eq!(words.next(), Some("/usr/local/bin/switchboard"), "{}", unit.name);
        let args: Vec<&str> = words.collect();
        for instance in ["api", "telegram", "discord"] {
            let args: Vec<String> = args.iter().map(|a| a.replace("%i", instance)).collect();
            let out = Command::new(env!("CARGO_BIN_EXE_switchboard")).args(&args).arg("--help").output().unwrap();
            assert!(
                out.status.success(),
                "{}: `switchboard {}` is refused: {}",
                unit.name,
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// `systemd-analyze verify` on the units, with the binary path pointing at this build. It
/// reports unknown keys and bad values as warnings; any output fails the test.
#[test]
fn systemd_accepts_the_units() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    };
    assert!(version.status.success());
    let dir = tempfile::tempdir().unwrap();
    let mut names = Vec::new();
    for (path, unit) in units() {
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("/usr/local/bin/switchboard", env!("CARGO_BIN_EXE_switchboard"));
        std::fs::write(dir.path().join(&unit.name), text).unwrap();
        // A template is checked through an instance of it, found beside it.
        names.push(dir.path().join(unit.name.replace("@.", "@telegram.")));
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg("--man=no")
        .args(&names)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && report.trim().is_empty(), "systemd-analyze verify {names:?}:\n{report}");
}

/// The API's connection limit must fit under the descriptor limit with room to spare, or a
/// flood of idle connections starves the bus, the store and the model requests of descriptors.
#[test]
fn every_unit_has_descriptors_for_the_api_connection_limit() {
    let connections = switchboard::config::ApiChannelConfig::default().max_connections;
    for (path, unit) in units() {
        let limit: usize = unit
            .get("Service", "LimitNOFILE")
            .unwrap_or_else(|| panic!("{}: no LimitNOFILE", path.display()))
            .parse()
            .unwrap_or_else(|err| panic!("{}: LimitNOFILE is not a number: {err}", unit.name));
        assert!(
            limit >= 2 * connections + 1024,
            "{}: LimitNOFILE={limit} leaves too little beside {connections} connections",
            unit.name
        );
    }
}

/// `Type=notify` units get READY from the daemon and ping a watchdog; without them systemd
/// would count a unit started before it serves and never notice a hung one.
#[test]
fn every_unit_is_notify_with_a_watchdog() {
    for (_, unit) in units() {
        let name = &unit.name;
        assert_eq!(unit.get("Service", "Type"), Some("notify"), "{name}");
        assert_eq!(unit.get("Service", "NotifyAccess"), Some("main"), "{name}");
        let watchdog: u32 = unit.get("Service", "WatchdogSec").and_then(|s| s.parse().ok()).unwrap_or(0);
        assert!(watchdog >= 10, "{name}: WatchdogSec={watchdog}");
        let after = unit.get("Unit", "After").unwrap_or_default();
        assert!(after.contains("postgresql.service"), "{name}: not ordered after PostgreSQL: {after}");
    }
}

/// The daemon under a `NOTIFY_SOCKET`, as systemd starts a `Type=notify` unit: READY with a
/// status once it serves, a watchdog ping at half of `WATCHDOG_USEC`, STOPPING on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_says_ready_pings_the_watchdog_and_says_stopping() {
    use std::os::unix::net::UnixDatagram;
    use std::time::Duration;

    let llm = switchboard_testkit::fake_llm::FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut daemon = crate::support::Launch::new(dir.path(), "notify", &["run"])
        .llm(&llm.base_url())
        .env("NOTIFY_SOCKET", socket_path.to_str().unwrap())
        .env("WATCHDOG_USEC", "400000")
        .spawn();
    daemon.wait_healthy().await;
    let (socket, first) = tokio::task::spawn_blocking(move || {
        let messages = receive(&socket, Duration::from_millis(1500));
        (socket, messages)
    })
    .await
    .unwrap();
    assert!(first[0].contains("READY=1") && first[0].contains("STATUS=serving"), "{first:?}");
    let pings = first.iter().filter(|m| m.trim() == "WATCHDOG=1").count();
    assert!((4..=12).contains(&pings), "{pings} watchdog pings in 1.5 s at 200 ms: {first:?}");

    daemon.signal("TERM");
    let last = tokio::task::spawn_blocking(move || receive(&socket, Duration::from_millis(1500))).await.unwrap();
    assert!(last.iter().any(|m| m.trim() == "STOPPING=1"), "{last:?}");
    assert!(daemon.wait_exit(Duration::from_secs(10)).await.success());
}

/// The datagrams that arrive on `socket` within `span`.
fn receive(socket: &std::os::unix::net::UnixDatagram, span: std::time::Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + span;
    let mut messages = Vec::new();
    let mut buffer = [0u8; 1024];
    while std::time::Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buffer) {
            messages.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
        }
    }
    messages
}
