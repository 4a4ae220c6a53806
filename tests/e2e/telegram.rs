//! `switchboard run` with the Telegram channel pointed at the fake Bot API: a message in, the
//! agent's reply out, exactly once even across a crash and duplicate updates.

use std::time::{Duration, Instant};

use crate::support::{Launch, run_to_exit};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::fake_telegram::{FakeTelegram, SentMessage, updates};

pub(crate) const ALICE: i64 = 111;

pub(crate) fn telegram<'a>(launch: Launch<'a>, fake: &FakeTelegram) -> Launch<'a> {
    launch
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &fake.api_url())
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__ALLOW_FROM", &format!("[\"{ALICE}\"]"))
}

/// Waits until the fake has received `n` messages from the bot, then a little longer to see
/// that no more come.
pub(crate) async fn replies(fake: &FakeTelegram, n: usize) -> Vec<SentMessage> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while fake.sent_messages().len() < n {
        assert!(Instant::now() < deadline, "{} replies, expected {n}: {:#?}", fake.sent_messages().len(), fake.calls());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    fake.sent_messages()
}

#[tokio::test]
async fn a_telegram_message_gets_the_agents_reply() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    llm.push(Scripted::Text("**Hello** Alice, here is `code`".into()));
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = telegram(Launch::new(dir.path(), "tg", &["run"]).llm(&llm.base_url()), &fake).spawn();
    daemon.wait_healthy().await;
    fake.push_message(updates::private_text(ALICE, "alice", 1, "hi"));
    let sent = replies(&fake, 1).await;
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0].chat_id, ALICE);
    assert_eq!(sent[0].text.as_deref(), Some("<b>Hello</b> Alice, here is <code>code</code>"));
    assert_eq!(sent[0].parse_mode.as_deref(), Some("HTML"));
    assert!(!fake.calls_to("sendchataction").is_empty(), "typing was shown");
    // The conversation is recorded under the Telegram session.
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["runs"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("telegram:111"), "{stdout}");
}

/// The default configuration holds no message back: a lone direct message with a model that
/// answers at once is answered within a few hundred milliseconds, every time.
#[tokio::test]
async fn a_lone_direct_message_is_answered_without_a_fixed_wait() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = telegram(Launch::new(dir.path(), "tg", &["run"]).llm(&llm.base_url()), &fake).spawn();
    daemon.wait_healthy().await;
    let mut took = Vec::new();
    for n in 1..=5 {
        let pushed = Instant::now();
        fake.push_message(updates::private_text(ALICE, "alice", n, &format!("question {n}")));
        while fake.sent_messages().len() < n as usize {
            assert!(pushed.elapsed() < Duration::from_secs(10), "no answer to message {n}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        took.push(pushed.elapsed());
        // A person's next message comes later than a burst's would.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    took.sort();
    assert!(took[2] < Duration::from_millis(300), "median time to the answer: {took:?}");
}

/// The daemon dies after taking the update and before replying; after the restart the user
/// gets exactly one reply.
#[tokio::test]
async fn a_crash_between_fetching_and_replying_still_gives_exactly_one_reply() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    llm.push(Scripted::Delay(Duration::from_secs(60), Box::new(Scripted::Text("never".into()))));
    llm.push(Scripted::Text("answer after restart".into()));
    let dir = tempfile::tempdir().unwrap();
    let mut first = telegram(Launch::new(dir.path(), "tg-1", &["run"]).llm(&llm.base_url()), &fake).spawn();
    first.wait_healthy().await;
    fake.push_message(updates::private_text(ALICE, "alice", 5, "question"));
    llm.wait_for_requests(1, Duration::from_secs(10)).await;
    first.kill_hard();

    let mut second = telegram(Launch::new(dir.path(), "tg-2", &["run"]).llm(&llm.base_url()), &fake).spawn();
    second.wait_healthy().await;
    let sent = replies(&fake, 1).await;
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0].text.as_deref(), Some("answer after restart"));
    assert_eq!(llm.requests().len(), 2, "the message was run once more, not twice more");
}

#[tokio::test]
async fn two_updates_for_one_message_get_one_reply() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = telegram(Launch::new(dir.path(), "tg", &["run"]).llm(&llm.base_url()), &fake).spawn();
    daemon.wait_healthy().await;
    fake.push_message(updates::private_text(ALICE, "alice", 8, "only once"));
    fake.push_message(updates::private_text(ALICE, "alice", 8, "only once"));
    let sent = replies(&fake, 1).await;
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0].text.as_deref(), Some("echo: only once"));
}

#[test]
fn the_telegram_channel_alone_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr, _) = run_to_exit(dir.path(), &["channel", "telegram"], &[]);
    assert!(!status.success());
    assert!(stderr.contains("TELEGRAM_BOT_TOKEN"), "{stderr}");
}

/// The distributed shape: `switchboard channel telegram` and `switchboard agent` as separate
/// processes on NATS JetStream.
#[tokio::test]
async fn telegram_channel_and_agent_processes_talk_over_nats() {
    let nats = switchboard_testkit::nats::NatsServer::start().await;
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let channel =
        telegram(Launch::new(dir.path(), "channel", &["channel", "telegram", "--nats", &nats.url()]), &fake).spawn();
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()]).llm(&llm.base_url()).spawn();
    channel.wait_for_log("Telegram bot identified").await;
    agent.wait_for_log("worker started").await;
    let group = -100_777;
    let mention = format!("@{} over nats", fake.bot().username);
    let message = updates::mention_of(updates::group_text(group, ALICE, "alice", 3, &mention), &fake.bot().username);
    fake.push_message(message);
    let sent = replies(&fake, 1).await;
    assert_eq!(sent.len(), 1, "{sent:#?}\n{}\n{}", channel.logs(), agent.logs());
    assert_eq!(sent[0].chat_id, group);
    assert_eq!(sent[0].text.as_deref(), Some(format!("echo: {mention}").as_str()));
    // The model sees who spoke in the group: the message's context line names them.
    let line = switchboard_testkit::fake_llm::context_lines(&llm.requests()[0]).pop().flatten().unwrap_or_default();
    assert!(line.contains(&format!("| from Alice (id {ALICE}), level guest | group chat on telegram")), "{line}");
    assert_eq!(sent[0].reply_to_message_id, Some(3), "the reply quotes the question in a group");
}

#[tokio::test]
async fn a_second_poller_on_the_token_is_reported_in_one_line() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = telegram(Launch::new(dir.path(), "tg", &["run"]).llm(&llm.base_url()), &fake).spawn();
    daemon.wait_healthy().await;
    fake.wait_for_calls("getupdates", 1, Duration::from_secs(10)).await;
    for _ in 0..3 {
        fake.fail_next("getupdates", switchboard_testkit::fake_telegram::Failure::Conflict);
    }
    daemon.wait_for_log("409 Conflict").await;
    // A second line would come with the next polls; nothing says they are over.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(daemon.logs().matches("409 Conflict").count(), 1, "{}", daemon.logs());
}
