//! `worker.max_wait_secs` through the real daemon and the fake Telegram: a message that waited
//! behind a slow model's turn longer than the limit gets a short note (a reply to it) instead
//! of a model call; in `collect` mode it is folded into the turn a fresher message starts.
//! Through the NATS shape, messages that waited in the stream while no worker ran: a late
//! heartbeat is skipped, a late cron job still runs.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_channels::contract::{ChatAddress, InboundMessage, Origin, OutboundMessage, Sender};
use switchboard_channels::{Bus, BusExt};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted, user_texts};
use switchboard_testkit::fake_telegram::{FakeTelegram, SentMessage, updates};
use switchboard_testkit::nats::NatsServer;

use crate::metrics::{sample, scrape_until};
use crate::support::{Launch, free_port, run_to_exit};

const ALICE: i64 = 111;
const GROUP: i64 = -100_555;
/// The slow model's turn: well past the limit, so the message behind it expires.
const SLOW: Duration = Duration::from_secs(6);
const MAX_WAIT_SECS: &str = "3";

fn daemon<'a>(launch: Launch<'a>, llm: &FakeLlm, fake: &FakeTelegram) -> Launch<'a> {
    launch
        .llm(&llm.base_url())
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &fake.api_url())
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__ALLOW_FROM", &format!("[\"{ALICE}\"]"))
        .env("SWITCHBOARD_WORKER__MAX_WAIT_SECS", MAX_WAIT_SECS)
}

/// Alice's message `id` in the group, addressed to the bot.
fn to_bot(fake: &FakeTelegram, id: i64, text: &str) -> serde_json::Value {
    let bot = fake.bot().username;
    updates::mention_of(updates::group_text(GROUP, ALICE, "alice", id, &format!("@{bot} {text}")), &bot)
}

/// Waits until the bot sent `n` messages (drafts edited into the reply count once).
async fn sent(fake: &FakeTelegram, n: usize) -> Vec<SentMessage> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.sent_messages().len() < n {
        assert!(
            Instant::now() < deadline,
            "{} messages sent, expected {n}: {:#?}",
            fake.sent_messages().len(),
            fake.calls()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fake.sent_messages()
}

/// Starts the slow turn (message 1), then sends message 2, `stale`, at once (it will wait
/// past the limit), and message 3, `fresh`, a second before the slow turn ends (well within).
async fn behind_a_slow_turn(llm: &FakeLlm, fake: &FakeTelegram, stale: &str, fresh: &str) {
    fake.push_message(to_bot(fake, 1, "first question"));
    llm.wait_for_requests(1, Duration::from_secs(10)).await;
    fake.push_message(to_bot(fake, 2, stale));
    tokio::time::sleep(SLOW - Duration::from_secs(1)).await;
    fake.push_message(to_bot(fake, 3, fresh));
}

/// The second message waits behind a 6 s turn with a 3 s limit: it gets the note, quoting it,
/// as a reply to it, and never reaches the model; a third, sent late, is answered.
#[tokio::test]
async fn a_message_that_waited_too_long_gets_a_note_instead_of_a_model_call() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    llm.push(Scripted::Delay(SLOW, Box::new(Scripted::Text("the slow answer".into()))));
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let launch = daemon(Launch::new(dir.path(), "wait", &["run"]), &llm, &fake)
        .env("SWITCHBOARD_METRICS__LISTEN", &format!("127.0.0.1:{metrics}"));
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;

    behind_a_slow_turn(&llm, &fake, "second question", "third question").await;

    let messages = sent(&fake, 3).await;
    let note = messages
        .iter()
        .find(|m| m.text.as_deref().is_some_and(|t| t.contains("waited too long")))
        .unwrap_or_else(|| panic!("no note: {messages:#?}\n{}", daemon.logs()));
    let text = note.text.as_deref().unwrap_or_default();
    assert!(text.starts_with("I was busy for "), "{text}");
    assert!(text.contains("second question"), "the note quotes the message: {text}");
    assert!(text.ends_with("send it again if it still matters."), "{text}");
    assert_eq!(note.reply_to_message_id, Some(2), "the note replies to the message that waited");
    let answered: Vec<_> = messages.iter().filter_map(|m| m.text.as_deref()).collect();
    assert!(answered.iter().any(|t| t.contains("echo:") && t.contains("third question")), "{answered:#?}");

    // The model was called for the first and the third message only.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let asked: Vec<String> = requests.iter().filter_map(|r| user_texts(r).pop()).collect();
    assert!(asked.iter().all(|text| !text.contains("second question")), "{asked:#?}");

    let text = scrape_until(metrics, |text| sample(text, "switchboard_messages_expired_total", &[]).is_some()).await;
    assert_eq!(sample(&text, "switchboard_messages_expired_total", &[("channel", "telegram")]), Some(1.0), "{text}");
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["runs"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("expired") && stdout.contains("waited "), "the expired message is listed:\n{stdout}");
}

/// In `collect` mode the message that waited too long joins the turn a fresher message starts
/// (no note); a batch of only stale messages gets the note.
#[tokio::test]
async fn in_collect_mode_a_stale_message_is_folded_into_a_fresher_turn() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    llm.push(Scripted::Delay(SLOW, Box::new(Scripted::Text("the slow answer".into()))));
    llm.push(Scripted::Delay(SLOW, Box::new(Scripted::Text("answer to both".into()))));
    let dir = tempfile::tempdir().unwrap();
    let launch = daemon(Launch::new(dir.path(), "collect", &["run"]), &llm, &fake)
        .env("SWITCHBOARD_WORKER__QUEUE_MODE", "collect")
        .env("SWITCHBOARD_WORKER__COLLECT_WINDOW_MS", "200");
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;

    behind_a_slow_turn(&llm, &fake, "stale question", "fresh question").await;

    // The stale and the fresh message make the second turn together.
    let requests = llm.wait_for_requests(2, Duration::from_secs(15)).await;
    let folded = user_texts(&requests[1]).pop().unwrap_or_default();
    assert!(folded.contains("stale question") && folded.contains("fresh question"), "{folded}");
    // Arrives during that (slow) turn and waits past the limit, with nothing fresher behind it.
    fake.push_message(to_bot(&fake, 4, "lonely question"));

    let messages = sent(&fake, 3).await;
    let texts: Vec<_> = messages.iter().filter_map(|m| m.text.as_deref()).collect();
    assert_eq!(texts.iter().filter(|t| t.contains("waited too long")).count(), 1, "{texts:#?}");
    assert!(texts.iter().any(|t| t.contains("waited too long") && t.contains("lonely question")), "{texts:#?}");
    assert!(texts.contains(&"answer to both"), "{texts:#?}\n{}", daemon.logs());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(llm.requests().len(), 2, "the lonely message never reached the model");
}

/// A system message as the schedulers publish it (`origin.kind` `heartbeat` or `cron`).
fn scheduled(id: &str, chat_id: &str, kind: &str, text: &str) -> InboundMessage {
    let chat = ChatAddress::parse(&format!("test:{chat_id}")).unwrap();
    let mut msg = InboundMessage::system(id.into(), chat, Origin { kind: kind.into(), id: "main".into() }, text);
    msg.set_system_agent("main");
    msg
}

/// A heartbeat and a cron job wait in the stream while no worker runs (a restart), past a
/// 1 s limit. The heartbeat is skipped: no model call, no message to its chat, an `expired`
/// run; the cron job still runs. A person's message after the heartbeat, in its chat, is
/// answered first there: nothing was sent for the heartbeat before it.
#[tokio::test]
async fn a_late_heartbeat_is_skipped_and_a_late_cron_job_still_runs() {
    let (nats, llm) = (NatsServer::start().await, FakeLlm::start().await);
    let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
    let mut replies = bus.outbound("test").await.unwrap();
    bus.publish_inbound(&scheduled("heartbeat:main:1", "ops", "heartbeat", "Work through HEARTBEAT.md")).await.unwrap();
    bus.publish_inbound(&scheduled("cron:job1:1", "reports", "cron", "Send the weekly report")).await.unwrap();
    // The wait: longer than the limit, spent in the stream with no worker to take it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_WORKER__MAX_WAIT_SECS", "1")
        .spawn();
    agent.wait_for_log("a message waited past worker.max_wait_secs; not running it").await;
    agent.wait_for_log("starting a system message that waited past worker.max_wait_secs").await;
    let sender = Sender { id: "u1".into(), name: "U".into(), is_bot: false };
    bus.publish_inbound(&InboundMessage::user("test", "ops", sender, "still there?")).await.unwrap();

    let mut answered = Vec::new();
    while answered.len() < 2 {
        let next = tokio::time::timeout(Duration::from_secs(15), replies.next()).await;
        let delivery = next.unwrap_or_else(|_| panic!("{answered:#?}\n{}", agent.logs())).unwrap().unwrap();
        let reply: OutboundMessage = delivery.decode().unwrap();
        delivery.ack().await.unwrap();
        answered.push((reply.chat_id, reply.content));
    }
    let ops: Vec<_> = answered.iter().filter(|(chat, _)| chat == "ops").collect();
    assert_eq!(ops.len(), 1, "{answered:#?}");
    assert_eq!(ops[0].1, "echo: still there?", "the heartbeat sent nothing: {answered:#?}");
    assert!(
        answered.iter().any(|(chat, text)| chat == "reports" && text.contains("Send the weekly report")),
        "{answered:#?}"
    );

    let asked: Vec<String> = llm.requests().iter().filter_map(|r| user_texts(r).pop()).collect();
    assert_eq!(asked.len(), 2, "{asked:#?}");
    assert!(asked.iter().all(|text| !text.contains("HEARTBEAT.md")), "the heartbeat reached the model: {asked:#?}");
    let (status, stderr, stdout) = run_to_exit(dir.path(), &["runs"], &[]);
    assert!(status.success(), "{stderr}");
    assert_eq!(stdout.matches("expired").count(), 1, "the heartbeat is listed as expired:\n{stdout}");
}
