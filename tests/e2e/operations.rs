//! What an operator meets running the real binary: one daemon per data dir, a database it
//! cannot write, logs under systemd (not a terminal), admin commands' output, error messages.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

use crate::support::{Launch, run_to_exit, run_to_exit_via};

/// A model server nobody calls: these tests stop before or without a message.
const LLM: [(&str, &str); 3] =
    [("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"), ("OPENAI_API_KEY", "sk-test-secret"), ("SWITCHBOARD_MODEL", "m")];

#[tokio::test]
async fn a_second_daemon_on_one_database_is_refused_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Launch::new(dir.path(), "run-1", &["run"]).llm("http://127.0.0.1:9/v1").spawn();
    first.wait_healthy().await;
    let database = dir.path().join("switchboard.db").display().to_string();

    let (status, stderr, _) = run_to_exit(dir.path(), &["run"], &LLM);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&database) && stderr.contains("in use"), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", first.pid())), "{stderr}");
    // A NATS worker would take the same turns from the other side: refused too, before it
    // even connects (nothing listens on that port).
    let (status, stderr, _) = run_to_exit(dir.path(), &["agent", "--nats", "nats://127.0.0.1:9"], &LLM);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("in use") && stderr.contains(&format!("pid {}", first.pid())), "{stderr}");

    // The admin commands still work beside the daemon.
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["users", "set-level", "api:me", "owner"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(!stdout.is_empty());

    // However the holder ends, the lock ends with it.
    first.kill_hard();
    let mut second = Launch::new(dir.path(), "run-2", &["run"]).llm("http://127.0.0.1:9/v1").spawn();
    second.wait_healthy().await;
}

/// The database exists but belongs to another user (a unit that ran as someone else, or
/// `switchboard` run as root on the service's data dir): the daemon refuses to start, naming
/// the file, instead of answering every message with 503.
#[test]
fn a_database_the_daemon_cannot_write_stops_it_at_start() {
    let dir = tempfile::tempdir().unwrap();
    // Created (and migrated) by this user, as an admin command run by the wrong user would.
    let (status, stderr, _) = run_to_exit(dir.path(), &["runs"], &[]);
    assert!(status.success(), "{stderr}");
    let database = dir.path().join("switchboard.db");
    assert!(database.exists());

    let wrapper: Vec<&str> = if is_root() {
        // Root may write any file, so the daemon runs as `nobody`, in a data dir it may
        // enter and write in (for its lock), on a database that is root's.
        if !Path::new("/usr/bin/setpriv").exists() {
            eprintln!("skipped: running as root and setpriv(1) is not installed to run the daemon as another user");
            return;
        }
        set_mode(dir.path(), 0o777);
        vec!["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    } else {
        set_mode(&database, 0o444);
        Vec::new()
    };
    let (status, stderr, _) = run_to_exit_via(&wrapper, dir.path(), &["run"], &LLM);
    assert_eq!(status.code(), Some(1), "the daemon did not refuse: {stderr}");
    assert!(stderr.contains(&format!("the database at {} is not writable", database.display())), "{stderr}");
    assert!(stderr.contains("readonly"), "the reason is missing: {stderr}");
}

#[tokio::test]
async fn logs_carry_no_colour_codes_when_not_written_to_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    // The log goes to a file, as under systemd it goes to the journal.
    let daemon = Launch::new(dir.path(), "run", &["run"]).llm("http://127.0.0.1:9/v1").spawn();
    daemon.wait_for_log("switchboard started").await;
    let logs = daemon.logs();
    assert!(!logs.contains('\u{1b}'), "escape codes in the log: {logs:?}");
}

#[test]
fn admin_commands_print_their_answer_without_log_lines() {
    let dir = tempfile::tempdir().unwrap();
    // A fresh data dir: the database is created and migrated by this command.
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["users", "list"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stderr.is_empty(), "log lines beside the answer: {stderr}");
    assert!(!stdout.contains("migration") && !stdout.contains('\u{1b}'), "{stdout}");

    // They are still there for whoever asks.
    let other = tempfile::tempdir().unwrap();
    let (status, stderr, _) = run_to_exit(other.path(), &["users", "list"], &[("RUST_LOG", "info")]);
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("created the database schema"), "{stderr}");
    assert!(!stderr.contains("applied database migration"), "one line, not one a migration: {stderr}");
}

/// A second `run` on another data dir but the same API address: one clear line at once,
/// before a database is created there.
#[tokio::test]
async fn a_second_run_on_a_taken_address_says_so_before_creating_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Launch::new(dir.path(), "run-1", &["run"]).llm("http://127.0.0.1:9/v1").spawn();
    first.wait_healthy().await;
    let other = tempfile::tempdir().unwrap();
    let address = first.url("").trim_start_matches("http://").to_owned();
    let env =
        [LLM.as_slice(), &[("SWITCHBOARD_CHANNELS__API__LISTEN", address.as_str()), ("RUST_LOG", "info")]].concat();
    let (status, stderr, _) = run_to_exit(other.path(), &["run"], &env);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("cannot listen on {address}")), "{stderr}");
    assert!(stderr.contains("is another switchboard running?"), "{stderr}");
    assert!(!stderr.contains("migration") && !stderr.contains("database schema"), "{stderr}");
    assert!(!other.path().join("switchboard.db").exists(), "a database was created first");
}

#[test]
fn an_os_error_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file where the config's directory should be: the OS says "Not a directory".
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "").unwrap();
    let config = file.join("config.toml");
    let (status, stderr, _) = run_to_exit(dir.path(), &["--config", config.to_str().unwrap(), "init"], &[]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.matches("os error").count(), 1, "{stderr}");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
}

#[test]
fn only_the_commands_that_use_a_bus_offer_nats() {
    let dir = tempfile::tempdir().unwrap();
    for command in [&["run", "--help"][..], &["agent", "--help"], &["channel", "--help"]] {
        let (status, stderr, stdout) = run_to_exit(dir.path(), command, &[]);
        assert!(status.success(), "{stderr}");
        assert!(stdout.contains("--nats <URL>"), "{command:?}: {stdout}");
    }
    for command in [&["--help"][..], &["init", "--help"], &["runs", "--help"], &["users", "list", "--help"]] {
        let (status, stderr, stdout) = run_to_exit(dir.path(), command, &[]);
        assert!(status.success(), "{stderr}");
        assert!(!stdout.contains("--nats"), "{command:?} offers --nats: {stdout}");
    }
    let (status, stderr, _) = run_to_exit(dir.path(), &["cron", "list", "--nats", "nats://127.0.0.1:4222"], &[]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unexpected argument '--nats'"), "{stderr}");
}

/// `runs` lists what called the model: a chat command is answered (and recorded, so that a
/// redelivery is not run again) but is not a run with 0 tokens in the list.
#[tokio::test]
async fn runs_lists_model_runs_not_chat_commands() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Text("hello back".into()));
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    for content in ["/status", "hello", "/help"] {
        let (status, reply) = daemon.post(json!({"chat_id": "me", "content": content})).await;
        assert_eq!(status, 200, "{content}: {reply}\n{}", daemon.logs());
    }
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["runs"], &[]);
    assert!(status.success(), "{stderr}");
    let rows: Vec<&str> = stdout.lines().skip(1).filter(|line| !line.starts_with(' ')).collect();
    assert_eq!(rows.len(), 1, "{stdout}");
    assert!(rows[0].contains("turn") && rows[0].contains("completed") && rows[0].contains("api:me"), "{stdout}");
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Ctrl-C on an idle daemon: it stops at once, the Telegram long poll and the API's reply
/// router do not hold it up. (The API router used to wait a quarter of a second for replies
/// that cannot come once the worker has stopped. Discord has its own test below.)
#[tokio::test]
async fn an_idle_daemon_stops_at_once_on_ctrl_c() {
    use switchboard_testkit::fake_telegram::FakeTelegram;
    let (llm, telegram) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"])
        .llm(&llm.base_url())
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &telegram.api_url())
        .spawn();
    daemon.wait_healthy().await;
    telegram.wait_for_calls("getMe", 1, Duration::from_secs(10)).await;
    // Now in its first long poll.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let took = stop_with_ctrl_c(&mut daemon).await;
    assert!(took < Duration::from_millis(240), "an idle daemon took {took:?} to stop:\n{}", daemon.logs());
}

/// Sends SIGINT and waits for a clean exit; how long it took.
async fn stop_with_ctrl_c(daemon: &mut crate::support::Daemon) -> Duration {
    let asked = std::time::Instant::now();
    daemon.signal("INT");
    let status = daemon.wait_exit(Duration::from_secs(10)).await;
    let took = asked.elapsed();
    assert!(status.success(), "exit status {status}:\n{}", daemon.logs());
    took
}

/// Ctrl-C on an idle daemon with Discord on: it stops within the bound docs/operations.md
/// gives, the same budget as without Discord plus the half second serenity may take to see the
/// stop request between two gateway reads. Signalled just after the gateway session started,
/// when that wait is at its longest.
#[tokio::test]
async fn an_idle_daemon_with_discord_stops_within_the_documented_bound_on_ctrl_c() {
    use switchboard_testkit::fake_discord::FakeDiscord;
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    let dir = tempfile::tempdir().unwrap();
    let launch = Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url());
    let mut daemon = crate::discord::discord(launch, &fake).spawn();
    daemon.wait_healthy().await;
    fake.wait_connected(1, Duration::from_secs(10)).await;
    let took = stop_with_ctrl_c(&mut daemon).await;
    assert!(took < Duration::from_millis(750), "an idle daemon with Discord took {took:?} to stop:\n{}", daemon.logs());
    assert!(!daemon.logs().contains("did not stop in time"), "{}", daemon.logs());
}
