//! What an operator meets running the real binary: one daemon per data dir, a database it
//! cannot write.

mod support;

use std::path::Path;

use support::{Launch, run_to_exit, run_to_exit_via};

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
