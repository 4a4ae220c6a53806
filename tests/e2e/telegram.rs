//! `switchboard run` with the Telegram channel pointed at the fake Bot API: a message in, the
//! agent's reply out, exactly once even across a crash and duplicate updates.

use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch, run_to_exit};
use switchboard_testkit::fake_llm::{FakeLlm, Quirks, Scripted};
use switchboard_testkit::fake_telegram::{Call, FakeTelegram, SentMessage, updates};

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
    replies_or_logs(fake, n, None).await
}

/// [`replies`], saying what the daemon logged too when the replies do not come.
pub(crate) async fn replies_or_logs(fake: &FakeTelegram, n: usize, daemon: Option<&Daemon>) -> Vec<SentMessage> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while fake.sent_messages().len() < n {
        if Instant::now() >= deadline {
            let logs = daemon.map(Daemon::logs).unwrap_or_default();
            panic!("{} replies, expected {n}: {:#?}\n{logs}", fake.sent_messages().len(), fake.calls());
        }
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

/// The Bot API a round trip away, so the typing call of each turn is still under way when the
/// reply is ready. The call is left to finish rather than abandoned (over HTTP/1.1, as to a
/// local Bot API server, hyper closes the connection of a request given up midway), so a
/// conversation goes on over the connections its first turn opened.
#[tokio::test]
async fn a_typing_call_under_way_when_the_reply_is_ready_keeps_its_connection() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    fake.set_latency("sendChatAction", Duration::from_millis(150));
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = telegram(Launch::new(dir.path(), "tg", &["run"]).llm(&llm.base_url()), &fake).spawn();
    daemon.wait_healthy().await;
    let mut opened = Vec::new();
    for n in 1..=8 {
        fake.push_message(updates::private_text(ALICE, "alice", n, &format!("question {n}")));
        replies(&fake, n as usize).await;
        // The typing call ends 150 ms after it started; the next message comes after it.
        tokio::time::sleep(Duration::from_millis(400)).await;
        opened.push(fake.connections_accepted());
    }
    assert_eq!(fake.count_calls("sendmessage"), 8);
    assert!(fake.count_calls("sendchataction") >= 8, "typing was shown for every turn");
    // A call given up opens a new connection every turn (7 here). Kept connections grow only
    // when more calls than ever before overlap (long poll, typing, reply): once or twice.
    let later = opened[7] - opened[0];
    assert!(later <= 2, "{later} connections opened over 7 turns (after each: {opened:?})");
}

/// A daemon with the default config whose model streams its answers a frame every `pace`.
async fn streaming_daemon(dir: &std::path::Path, pace: Duration) -> (FakeLlm, FakeTelegram, Daemon) {
    let quirks = Quirks { stream_pace: Some(pace), ..Quirks::default() };
    let (llm, fake) = (FakeLlm::start_with_quirks(quirks).await, FakeTelegram::start().await);
    let mut daemon = telegram(Launch::new(dir, "tg", &["run"]).llm(&llm.base_url()), &fake).spawn();
    daemon.wait_healthy().await;
    (llm, fake, daemon)
}

/// Waits until the chat shows `text` (HTML, as answers are sent), sent or edited in: the call
/// that put it there.
async fn shown(fake: &FakeTelegram, text: &str) -> Call {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let calls = fake.calls().into_iter().filter(|call| !call.failed);
        let mut showing = calls.filter(|call| call.method == "sendmessage" || call.method == "editmessagetext");
        if let Some(call) = showing.find(|call| call.params["text"] == text && call.params["parse_mode"] == "HTML") {
            return call;
        }
        assert!(Instant::now() < deadline, "{text:?} never shown: {:#?}", fake.calls());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Streaming is on by default in a private chat: an answer the model writes over seconds shows
/// its first words in a draft well before it is done, and the draft becomes the answer.
#[tokio::test]
async fn a_slow_answer_appears_as_a_draft_before_it_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let (llm, fake, _daemon) = streaming_daemon(dir.path(), Duration::from_millis(600)).await;
    let answer = "**Rice** with the peas tonight, and the last of the lemon cake after it.";
    llm.push(Scripted::Text(answer.into()));
    fake.push_message(updates::private_text(ALICE, "alice", 1, "what do we cook?"));
    let last = shown(&fake, "<b>Rice</b> with the peas tonight, and the last of the lemon cake after it.").await;
    let sent = fake.sent_messages();
    assert_eq!(sent.len(), 1, "the draft became the answer, no second message: {sent:#?}");
    // Drafts are plain text: the Markdown as the model wrote it so far.
    let draft = sent[0].text.clone().unwrap_or_default();
    assert!(!draft.is_empty() && draft.len() < answer.len() && answer.starts_with(&draft), "draft {draft:?}");
    assert_eq!(last.method, "editmessagetext", "the answer was not edited into the draft");
    assert_eq!(last.params["message_id"], serde_json::json!(sent[0].message_id));
    assert_eq!(last.params["parse_mode"], "HTML");
    let posted = fake.calls_to("sendmessage")[0].at;
    assert!(last.at - posted >= Duration::from_secs(1), "the draft came only {:?} before the answer", last.at - posted);
}

/// An answer done within half a second shows no draft: one message, the answer.
#[tokio::test]
async fn a_quick_answer_shows_no_draft() {
    let dir = tempfile::tempdir().unwrap();
    let (llm, fake, _daemon) = streaming_daemon(dir.path(), Duration::from_millis(20)).await;
    let answer = "Pasta, as always.";
    llm.push(Scripted::Text(answer.into()));
    fake.push_message(updates::private_text(ALICE, "alice", 1, "what do we cook?"));
    let last = shown(&fake, answer).await;
    assert_eq!(last.method, "sendmessage");
    // The run is over once its answer is sent: no draft can come after it.
    assert_eq!(fake.sent_messages().len(), 1, "{:#?}", fake.calls());
    assert!(fake.calls_to("editmessagetext").is_empty(), "{:#?}", fake.calls());
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
