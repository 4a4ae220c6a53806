//! `switchboard run` with the Discord channel pointed at the fake Discord: a DM in, the
//! agent's reply out, exactly once even when the gateway drops during the run.

use std::time::{Duration, Instant};

use crate::support::{Launch, run_to_exit};
use switchboard_testkit::fake_discord::{FakeDiscord, SentMessage, events};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

pub(crate) const ALICE: u64 = 111;
pub(crate) const DM: u64 = 300;

pub(crate) fn discord<'a>(launch: Launch<'a>, fake: &FakeDiscord) -> Launch<'a> {
    launch
        .env("DISCORD_BOT_TOKEN", FakeDiscord::TOKEN)
        .env("SWITCHBOARD_CHANNELS__DISCORD__PROXY_URL", &fake.url())
        .env("SWITCHBOARD_CHANNELS__DISCORD__ALLOW_FROM", &format!("[\"{ALICE}\"]"))
}

/// Waits until the fake has received `n` messages from the bot, then a little longer to see
/// that no more come.
pub(crate) async fn replies(fake: &FakeDiscord, n: usize) -> Vec<SentMessage> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while fake.sent_messages().len() < n {
        assert!(Instant::now() < deadline, "{} replies, expected {n}: {:#?}", fake.sent_messages().len(), fake.calls());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    fake.sent_messages()
}

#[tokio::test]
async fn a_discord_dm_gets_the_agents_reply() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    llm.push(Scripted::Text("**Hello** Alice".into()));
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = discord(Launch::new(dir.path(), "dc", &["run"]).llm(&llm.base_url()), &fake).spawn();
    daemon.wait_healthy().await;
    fake.wait_connected(1, Duration::from_secs(10)).await;
    fake.send_message_create(events::dm_message(DM, ALICE, "alice", 10, "hi"));
    let sent = replies(&fake, 1).await;
    assert_eq!(sent.len(), 1, "{sent:#?}\n{}", daemon.logs());
    assert_eq!(sent[0].channel_id, DM);
    assert_eq!(sent[0].content, "**Hello** Alice", "Discord renders the Markdown itself");
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["runs"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("discord:300"), "{stdout}");
}

#[tokio::test]
async fn a_gateway_drop_during_a_run_still_gives_exactly_one_reply() {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    llm.push(Scripted::Delay(Duration::from_secs(2), Box::new(Scripted::Text("after the drop".into()))));
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = discord(Launch::new(dir.path(), "dc", &["run"]).llm(&llm.base_url()), &fake).spawn();
    daemon.wait_healthy().await;
    fake.wait_connected(1, Duration::from_secs(10)).await;
    fake.send_message_create(events::dm_message(DM, ALICE, "alice", 11, "slow question"));
    llm.wait_for_requests(1, Duration::from_secs(10)).await;
    fake.drop_connection();
    fake.wait_connected(2, Duration::from_secs(10)).await;
    let sent = replies(&fake, 1).await;
    assert_eq!(sent.len(), 1, "{sent:#?}\n{}", daemon.logs());
    assert_eq!(sent[0].content, "after the drop");
    assert_eq!(llm.requests().len(), 1, "the message was run once");
}

#[test]
fn the_discord_channel_alone_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr, _) = run_to_exit(dir.path(), &["channel", "discord"], &[]);
    assert!(!status.success());
    let lines: Vec<&str> = stderr.lines().filter(|line| !line.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("needs a bot token: set channels.discord.token or DISCORD_BOT_TOKEN"), "{stderr}");
}
