//! `switchboard doctor` through the real binary: every check passes against working peers
//! (the fakes, a SQLite file, the workspace `init` writes), and each broken part is named with
//! what to do, the command exiting 1.

use std::path::Path;
use std::time::Duration;

use switchboard_testkit::fake_anthropic::FakeAnthropic;
use switchboard_testkit::fake_discord::FakeDiscord;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_telegram::FakeTelegram;
use switchboard_testkit::postgres::TempDatabase;

use crate::support::{Launch, run_to_exit};

/// Runs `switchboard doctor` (off the runtime, which serves the fakes): status, stdout.
async fn doctor(dir: &Path, env: Vec<(String, String)>) -> (bool, String, String) {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (status, stderr, stdout) = run_to_exit(&dir, &["doctor"], &env);
        (status.success(), stdout, stderr)
    })
    .await
    .unwrap()
}

/// The line of `check`, which must be there.
fn line<'a>(report: &'a str, check: &str) -> &'a str {
    let found = report.lines().find(|line| line.get(6..).is_some_and(|rest| rest.starts_with(check)));
    found.unwrap_or_else(|| panic!("no {check} line:\n{report}"))
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_check_passes_against_working_peers() {
    let (llm, telegram, discord) =
        (FakeLlm::start_with_key("sk-test-secret").await, FakeTelegram::start().await, FakeDiscord::start().await);
    let dir = tempfile::tempdir().unwrap();
    assert!(run_to_exit(dir.path(), &["init"], &[]).0.success());
    let (ok, report, stderr) = doctor(
        dir.path(),
        env(&[
            ("OPENAI_BASE_URL", &llm.base_url()),
            ("OPENAI_API_KEY", "sk-test-secret"),
            ("SWITCHBOARD_MODEL", "fake-model"),
            ("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN),
            ("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &telegram.api_url()),
            ("DISCORD_BOT_TOKEN", FakeDiscord::TOKEN),
            ("SWITCHBOARD_CHANNELS__DISCORD__PROXY_URL", &discord.url()),
        ]),
    )
    .await;
    assert!(ok, "{report}\n{stderr}");
    assert!(line(&report, "store").starts_with("ok") && line(&report, "store").contains("writable"), "{report}");
    assert!(line(&report, "bus").contains("in-process"), "{report}");
    assert!(line(&report, "model openai/fake-model").contains("key accepted, 1 model listed"), "{report}");
    assert!(line(&report, "telegram").contains("@switchboard_test_bot"), "{report}");
    assert!(line(&report, "discord").starts_with("ok"), "{report}");
    assert!(line(&report, "api").contains("no tokens: this machine only"), "{report}");
    assert!(line(&report, "workspace").contains("every bootstrap file"), "{report}");
    assert!(!report.contains("FAIL") && !report.contains("sk-test-secret"), "{report}");
    assert!(!report.contains(FakeTelegram::TOKEN) && !report.contains(FakeDiscord::TOKEN), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_broken_part_is_named_with_what_to_do_and_fails_the_command() {
    let llm = FakeLlm::start_with_key("the-right-key").await;
    let telegram = FakeTelegram::start().await;
    let database = TempDatabase::create();
    // A port nothing listens on, for the bus and the database.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let (ok, report, stderr) = doctor(
        dir.path(),
        env(&[
            ("OPENAI_BASE_URL", &llm.base_url()),
            ("OPENAI_API_KEY", "a-wrong-key"),
            ("SWITCHBOARD_MODEL", "fake-model"),
            ("SWITCHBOARD_BUS", &format!("nats://127.0.0.1:{closed}")),
            ("SWITCHBOARD_STORE__DATABASE_URL", &format!("postgres://postgres@127.0.0.1:{closed}/x")),
            ("TELEGRAM_BOT_TOKEN", "123:not-the-token"),
            ("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &telegram.api_url()),
            ("SWITCHBOARD_CHANNELS__API__LISTEN", "0.0.0.0:8787"),
        ]),
    )
    .await;
    assert!(!ok, "{report}");
    let api = line(&report, "api");
    assert!(api.starts_with("FAIL") && api.contains("-> make a token with `switchboard api-token NAME`"), "{report}");
    assert!(stderr.contains("checks failed"), "{stderr}");
    let store = line(&report, "store");
    assert!(store.starts_with("FAIL") && store.contains("-> check store.database_url"), "{report}");
    let bus = line(&report, "bus");
    assert!(bus.starts_with("FAIL") && bus.contains("-> start nats-server"), "{report}");
    let model = line(&report, "model openai/fake-model");
    assert!(model.starts_with("FAIL") && model.contains("key was refused") && model.contains("api_key"), "{report}");
    let bot = line(&report, "telegram");
    assert!(bot.starts_with("FAIL") && bot.contains("@BotFather"), "{report}");
    // Enabled (the default) without a token: said, with what to set.
    let discord = line(&report, "discord");
    assert!(discord.starts_with("warn") && discord.contains("Discord is not running"), "{report}");
    assert!(discord.contains("DISCORD_BOT_TOKEN"), "{report}");
    // No `init`: the workspace is not there.
    assert!(line(&report, "workspace").starts_with("FAIL"), "{report}");
    assert!(!report.contains("a-wrong-key") && !report.contains("not-the-token"), "{report}");

    // The same database reachable: its line passes, the rest still fail.
    let (_, report, _) = doctor(
        dir.path(),
        env(&[
            ("SWITCHBOARD_MODEL", "fake-model"),
            ("OPENAI_BASE_URL", &llm.base_url()),
            ("OPENAI_API_KEY", "the-right-key"),
            ("SWITCHBOARD_STORE__DATABASE_URL", database.url()),
        ]),
    )
    .await;
    assert!(line(&report, "store").starts_with("ok") && line(&report, "store").contains("postgres://"), "{report}");
    assert!(line(&report, "model openai/fake-model").starts_with("ok"), "{report}");
}

/// An Anthropic model is checked with Anthropic's own list and headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_model_is_checked_with_its_key() {
    let anthropic = FakeAnthropic::start_with_key("sk-ant-right").await;
    let dir = tempfile::tempdir().unwrap();
    let with_key = |key: &str| {
        env(&[
            ("ANTHROPIC_API_KEY", key),
            ("ANTHROPIC_BASE_URL", &anthropic.base_url()),
            ("SWITCHBOARD_MODEL", "claude-e2e"),
        ])
    };
    let (_, report, _) = doctor(dir.path(), with_key("sk-ant-right")).await;
    assert!(line(&report, "model anthropic/claude-e2e").contains("key accepted, 1 model listed"), "{report}");
    let (ok, report, _) = doctor(dir.path(), with_key("sk-ant-wrong")).await;
    assert!(!ok && line(&report, "model anthropic/claude-e2e").contains("key was refused"), "{report}");
    assert!(!report.contains("sk-ant-"), "{report}");
}

/// The distributed shape: the bus line says what the streams hold, and on PostgreSQL the
/// workspace is compared with the one the other hosts use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_nats_and_postgresql_the_streams_and_the_shared_workspace_are_checked() {
    let nats = switchboard_testkit::nats::NatsServer::start().await;
    let llm = FakeLlm::start_with_key("sk-test-secret").await;
    let database = TempDatabase::create();
    let share = tempfile::tempdir().unwrap();
    let (host_a, host_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = |workspace: &Path| {
        env(&[
            ("OPENAI_BASE_URL", &llm.base_url()),
            ("OPENAI_API_KEY", "sk-test-secret"),
            ("SWITCHBOARD_MODEL", "fake-model"),
            ("SWITCHBOARD_BUS", &nats.url()),
            ("SWITCHBOARD_STORE__DATABASE_URL", database.url()),
            ("SWITCHBOARD_AGENT__WORKSPACE", &workspace.display().to_string()),
        ])
    };
    let (ok, report, stderr) = doctor(host_a.path(), host(share.path())).await;
    assert!(line(&report, "bus").contains("JetStream on, streams ready; 0 inbound and 0 outbound"), "{report}");
    assert!(line(&report, "shared dirs").starts_with("ok"), "{report}\n{stderr}");
    // No bootstrap files in the share: a warning, not a failure.
    assert!(ok, "{report}\n{stderr}");
    let (ok, report, _) = doctor(host_b.path(), host(&host_b.path().join("workspace"))).await;
    assert!(!ok, "{report}");
    let shared = line(&report, "shared dirs");
    assert!(shared.starts_with("FAIL") && shared.contains(&share.path().display().to_string()), "{report}");
}

/// Where `exec`'s commands run and what they reach: with `sandbox = "none"` the doctor says
/// they reach every chat's memory; as root (CI, and this machine's sessions) it says what root
/// changes for the sandbox's limits, and as an ordinary user it says nothing of root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exec_sandbox_lines_say_what_commands_reach_and_what_root_changes() {
    // No `init`: the other checks may fail, these lines are there all the same.
    let dir = tempfile::tempdir().unwrap();
    let unconfined = env(&[("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "none")]);
    let (_, report, stderr) = doctor(dir.path(), unconfined.clone()).await;
    let sandbox = line(&report, "exec sandbox");
    assert!(sandbox.starts_with("warn") && sandbox.contains("none (tools.exec.sandbox = \"none\")"), "{report}");
    assert!(sandbox.contains("every chat's memory") && sandbox.contains("-> see docs/security.md"), "{report}");
    let as_root = report.lines().find(|line| line.get(6..).is_some_and(|rest| rest.starts_with("exec as root")));
    if !running_as_root() {
        assert_eq!(as_root, None, "{report}");
        return;
    }
    let as_root = as_root.unwrap_or_else(|| panic!("no exec as root line:\n{report}\n{stderr}"));
    assert!(
        as_root.starts_with("warn") && as_root.contains("max_processes (RLIMIT_NPROC) does not bind root"),
        "{report}"
    );
    assert!(as_root.contains("-> run as an ordinary user"), "{report}");

    // The same data dir, `doctor` run as nobody: no word of root.
    std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let mut doctor = Launch::new(dir.path(), "doctor-as-nobody", &["doctor"])
        .env("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "none")
        .run_as(NOBODY, NOBODY)
        .spawn();
    doctor.wait_exit(Duration::from_secs(30)).await;
    let report = doctor.logs();
    assert!(line(&report, "exec sandbox").contains("every chat's memory"), "{report}");
    assert!(!report.contains("exec as root") && !report.contains("runs as root"), "{report}");
}

const NOBODY: u32 = 65534;

fn running_as_root() -> bool {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
