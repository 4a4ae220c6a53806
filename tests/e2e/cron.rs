//! `switchboard cron …` against the real binary: a reminder added from the command line and
//! run on request reaches the fake Telegram in its forum topic, in the embedded shape and in
//! the NATS shape (`switchboard agent` + `switchboard channel telegram`).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch, run_to_exit};
use serde_json::json;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::fake_telegram::{FakeTelegram, SentMessage};
use switchboard_testkit::nats::NatsServer;

const FAST_POLL: (&str, &str) = ("SWITCHBOARD_CRON__POLL_INTERVAL_MS", "200");

fn telegram<'a>(launch: Launch<'a>, fake: &FakeTelegram) -> Launch<'a> {
    launch
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &fake.api_url())
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
        .env(FAST_POLL.0, FAST_POLL.1)
}

/// Runs `switchboard cron <args>`; panics unless it succeeds, returning its output.
fn cron(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["cron"];
    all.extend_from_slice(args);
    let (status, stderr, stdout) = run_to_exit(dir, &all, &[FAST_POLL]);
    assert!(status.success(), "cron {args:?} failed: {stderr}");
    stdout
}

/// Adds the reminder and returns its id.
fn add_reminder(dir: &Path) -> String {
    let out = cron(
        dir,
        &[
            "add",
            "--to",
            "telegram:-100777:topic:5",
            "--at",
            "+1h",
            "--reminder",
            "--name",
            "plants",
            "--message",
            "Water the plants",
        ],
    );
    let id = out.lines().next().and_then(|l| l.strip_prefix("added ")).unwrap_or_else(|| panic!("{out}"));
    id.trim().to_owned()
}

async fn wait_for_sent(fake: &FakeTelegram, daemons: &[&Daemon]) -> Vec<SentMessage> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while fake.sent_messages().is_empty() {
        let logs: Vec<String> = daemons.iter().map(|d| d.logs()).collect();
        assert!(Instant::now() < deadline, "nothing sent: {:#?}\n{}", fake.calls(), logs.join("\n"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    fake.sent_messages()
}

fn assert_reminder_in_topic(sent: &[SentMessage]) {
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0].chat_id, -100777);
    assert_eq!(sent[0].message_thread_id, Some(5));
    assert_eq!(sent[0].text.as_deref(), Some("Water the plants"));
}

#[tokio::test]
async fn a_reminder_added_and_run_from_the_cli_reaches_the_telegram_topic() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let id = add_reminder(dir.path());
    assert!(cron(dir.path(), &["list"]).contains(&format!("{id} \"plants\" [reminder]")));

    let mut daemon = telegram(Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url()), &fake).spawn();
    daemon.wait_healthy().await;
    let requested = cron(dir.path(), &["run", &id]);
    assert!(requested.contains("within its poll interval"), "{requested}");
    assert_reminder_in_topic(&wait_for_sent(&fake, &[&daemon]).await);
    assert!(llm.requests().is_empty(), "a reminder needs no model");

    let list = cron(dir.path(), &["list"]);
    assert!(list.contains(&id) && list.contains("completed"), "{list}");
    assert!(list.contains("next "), "a manual run leaves the schedule alone: {list}");
    let history = cron(dir.path(), &["history", &id]);
    assert!(history.contains(&format!("cron:{id}:manual:")) && history.contains("completed"), "{history}");
}

#[tokio::test]
async fn unknown_job_ids_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    for action in ["remove", "pause", "resume", "run", "history"] {
        let (status, stderr, _) = run_to_exit(dir.path(), &["cron", action, "nope1234"], &[]);
        assert!(!status.success(), "{action}");
        assert!(stderr.contains("no cron job \"nope1234\""), "{action}: {stderr}");
    }
    let (status, stderr, _) =
        run_to_exit(dir.path(), &["cron", "add", "--to", "telegram", "--at", "+1h", "--message", "x"], &[]);
    assert!(!status.success());
    assert!(stderr.contains("not a chat address"), "{stderr}");
}

#[tokio::test]
async fn in_the_nats_shape_the_agent_fires_and_the_channel_delivers() {
    let (llm, fake, nats) = (FakeLlm::start().await, FakeTelegram::start().await, NatsServer::start().await);
    let dir = tempfile::tempdir().unwrap();
    let id = add_reminder(dir.path());
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()]).llm(&llm.base_url());
    let agent = agent.env(FAST_POLL.0, FAST_POLL.1).spawn();
    let channel = Launch::new(dir.path(), "tg", &["channel", "telegram"]).env("SWITCHBOARD_BUS", &nats.url());
    let channel = telegram(channel, &fake).spawn();
    agent.wait_for_log("worker started").await;
    channel.wait_for_log("switchboard started").await;
    cron(dir.path(), &["run", &id]);
    assert_reminder_in_topic(&wait_for_sent(&fake, &[&agent, &channel]).await);
    let list = cron(dir.path(), &["list"]);
    assert!(list.contains("completed"), "{list}");
}

/// The daemon offers the `cron` tool to its agent, and jobs the agent adds are the CLI's too.
#[tokio::test]
async fn the_agent_adds_a_job_that_the_cli_lists() {
    let llm = FakeLlm::start().await;
    let args = json!({"action": "add", "at": "+2h", "payload": "reminder", "message": "Stretch!", "name": "stretch"});
    llm.push(Scripted::ToolCalls(vec![("cron".into(), args)]));
    llm.push(Scripted::Text("Reminder set.".into()));
    let dir = tempfile::tempdir().unwrap();
    let launch = Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url());
    let mut daemon = launch.env("SWITCHBOARD_USERS__OWNERS", "[\"api:api\"]").spawn();
    daemon.wait_healthy().await;
    let (status, body) = daemon.post(json!({"chat_id": "me", "content": "remind me to stretch in 2 hours"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("Reminder set.")), "{body}");
    let offered: Vec<String> = llm.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(offered.iter().any(|name| name == "cron"), "{offered:?}");
    let list = cron(dir.path(), &["list"]);
    assert!(list.contains("\"stretch\" [reminder]") && list.contains("→ api:me"), "{list}");
}
