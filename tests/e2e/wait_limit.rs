//! `worker.max_wait_secs` through the real daemon and the fake Telegram: a message that waited
//! behind a slow model's turn longer than the limit gets a short note (a reply to it) instead
//! of a model call; in `collect` mode it is folded into the turn a fresher message starts.

use std::time::{Duration, Instant};

use switchboard_testkit::fake_llm::{FakeLlm, Scripted, user_texts};
use switchboard_testkit::fake_telegram::{FakeTelegram, SentMessage, updates};

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
