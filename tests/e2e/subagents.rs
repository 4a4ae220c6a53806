//! Sub-agents through the real binary: a sub-agent whose worker is killed is reported to the
//! chat that started it after the restart, exactly once.

use std::time::{Duration, Instant};

use crate::support::Launch;
use serde_json::json;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::fake_telegram::{FakeTelegram, SentMessage, updates};

const ALICE: i64 = 111;

/// Telegram pointed at the fake, Alice an owner (so `spawn` is offered), short leases.
fn launch<'a>(dir: &'a std::path::Path, name: &'a str, llm: &FakeLlm, fake: &FakeTelegram) -> Launch<'a> {
    Launch::new(dir, name, &["run"])
        .llm(&llm.base_url())
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &fake.api_url())
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__ALLOW_FROM", &format!("[\"{ALICE}\"]"))
        .env("SWITCHBOARD_USERS__OWNERS", &format!("[\"telegram:{ALICE}\"]"))
        .env("SWITCHBOARD_SUBAGENTS__LEASE_SECS", "2")
}

async fn sent(fake: &FakeTelegram, n: usize, logs: &dyn Fn() -> String) -> Vec<SentMessage> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.sent_messages().len() < n {
        assert!(Instant::now() < deadline, "{} messages sent, expected {n}:\n{}", fake.sent_messages().len(), logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fake.sent_messages()
}

/// Waits until the embedded bus has nothing left to deliver (its journal is empty).
async fn settled(database: &std::path::Path) {
    use switchboard_channels::bus::journal::Journal;
    let store = switchboard::store::sqlite::SqliteStore::open(database).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !store.pending().await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the bus never settled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_subagent_lost_in_a_crash_is_reported_to_its_chat_once_after_restart() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    llm.push(Scripted::ToolCalls(vec![("spawn".into(), json!({"task": "Look up the tides.", "label": "tides"}))]));
    llm.push(Scripted::Text("A helper is looking it up.".into()));
    // The sub-agent's model call never answers; the daemon dies during it.
    llm.push_when("prompt mode minimal", Scripted::Hang);
    let dir = tempfile::tempdir().unwrap();
    let mut first = launch(dir.path(), "run-1", &llm, &fake).spawn();
    first.wait_healthy().await;
    fake.push_message(updates::private_text(ALICE, "alice", 1, "When is high tide? Ask a helper."));
    let before = sent(&fake, 1, &|| first.logs()).await;
    assert_eq!(before[0].text.as_deref(), Some("A helper is looking it up."));
    llm.wait_for_requests(3, Duration::from_secs(10)).await;
    // Killed while the sub-agent hangs, not between Telegram taking the reply and the channel
    // noting it delivered: no channel can undo a send whose answer it never recorded.
    settled(&dir.path().join("switchboard.db")).await;
    first.kill_hard();

    llm.push(Scripted::Text("Sorry, the helper for the tides stopped; shall I try again?".into()));
    let mut second = launch(dir.path(), "run-2", &llm, &fake).spawn();
    second.wait_healthy().await;
    let after = sent(&fake, 2, &|| second.logs()).await;
    assert_eq!(after[1].chat_id, ALICE);
    assert_eq!(after[1].text.as_deref(), Some("Sorry, the helper for the tides stopped; shall I try again?"));
    // The announcement the main agent answered said what was lost and why.
    let requests = llm.requests();
    let announcement = requests.last().unwrap()["messages"].to_string();
    assert!(announcement.contains("\\\"tides\\\" you started failed"), "{announcement}");
    assert!(announcement.contains("the worker running it stopped before it finished"), "{announcement}");
    // Exactly once: a few more reaper passes later, nothing else was sent.
    second.wait_for_log("sub-agent's end announced").await;
    // The reaper's passes leave no trace to count, so a few of its intervals pass instead.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(fake.sent_messages().len(), 2, "{:#?}\n{}", fake.sent_messages(), second.logs());
    assert_eq!(llm.requests().len(), 4, "one model call for the announcement");
}
