//! The owner's buttons on Telegram, through the real daemon and the fake Bot API: a stranger's
//! pairing request reaches the owner's direct chat with Approve and Deny; a press decides it,
//! is answered, edits the message with the outcome and tells the stranger. Presses by others,
//! on requests decided elsewhere, expired, or from before a restart, are answered as such.
//! (The helpers here serve the approval buttons in `approvals.rs` too.)

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch, run_to_exit};
use serde_json::Value;
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_telegram::{CallbackAnswer, FakeTelegram, InlineButton, SentMessage, updates};
use tempfile::TempDir;

/// The owner, named in `users.owners`.
pub const OWNER: i64 = 1;
const EVE: i64 = 555;
const MALLORY: i64 = 777;
/// What a press of a closed request's button answers.
pub const NO_LONGER_OPEN: &str = "This request is no longer open.";

/// A daemon with the Telegram channel on the fake, `telegram:1` as its owner, strangers asked
/// to pair, and no debounce.
pub fn owner_bot<'a>(launch: Launch<'a>, fake: &FakeTelegram, llm: &FakeLlm) -> Launch<'a> {
    launch
        .llm(&llm.base_url())
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &fake.api_url())
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
        .env("SWITCHBOARD_USERS__OWNERS", &format!(r#"["telegram:{OWNER}"]"#))
        .env("SWITCHBOARD_WORKER__DEBOUNCE_MS", "0")
}

pub fn owner() -> Value {
    updates::user(OWNER, "owner")
}

/// The first message the bot sent to `chat` that satisfies `test`, once there is one.
pub async fn sent_to(fake: &FakeTelegram, chat: i64, test: impl Fn(&SentMessage) -> bool) -> SentMessage {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sent = fake.sent_messages();
        if let Some(found) = sent.iter().find(|sent| sent.chat_id == chat && test(sent)) {
            return found.clone();
        }
        assert!(Instant::now() < deadline, "nothing sent to {chat} as expected: {sent:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The callback data of a message's buttons, row by row.
pub fn button_data(fake: &FakeTelegram, sent: &SentMessage) -> Vec<Vec<String>> {
    let data = |button: &InlineButton| format!("{}={}", button.text, button.callback_data.clone().unwrap_or_default());
    fake.buttons(sent.chat_id, sent.message_id).iter().map(|row| row.iter().map(data).collect()).collect()
}

/// Presses the button with `data` under `sent` as `from` and returns the answer it got.
pub async fn press(fake: &FakeTelegram, sent: &SentMessage, from: Value, data: &str) -> CallbackAnswer {
    let query = fake.press_button(sent.chat_id, sent.message_id, from, data);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(answer) = fake.callback_answers().into_iter().find(|answer| answer.query_id == query) {
            return answer;
        }
        assert!(Instant::now() < deadline, "press {data} never answered: {:#?}", fake.calls());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Presses `data` under `sent` as `from`; asserts the presser is shown `toast` and the message
/// then ends with `outcome`, its buttons gone.
pub async fn decide(fake: &FakeTelegram, sent: &SentMessage, from: Value, data: &str, toast: &str, outcome: &str) {
    assert_eq!(press(fake, sent, from, data).await.text.as_deref(), Some(toast));
    let settled = settled_text(fake, sent).await;
    assert!(settled.ends_with(&format!("\n\n{outcome}")), "{settled}");
}

/// The fakes, a data dir, and the healthy daemon `spawn` starts there.
pub async fn started(
    spawn: impl FnOnce(&Path, &FakeLlm, &FakeTelegram) -> Daemon,
) -> (FakeLlm, FakeTelegram, TempDir, Daemon) {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = spawn(dir.path(), &llm, &fake);
    daemon.wait_healthy().await;
    (llm, fake, dir, daemon)
}

/// The text `sent` was edited to once its buttons are gone.
pub async fn settled_text(fake: &FakeTelegram, sent: &SentMessage) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let edit = fake.edits().into_iter().rev().find(|edit| edit.params["message_id"] == sent.message_id);
        if let Some(edit) = edit.filter(|_| fake.buttons(sent.chat_id, sent.message_id).is_empty()) {
            return edit.params["text"].as_str().unwrap_or_default().to_owned();
        }
        assert!(Instant::now() < deadline, "message {} never settled: {:#?}", sent.message_id, fake.calls());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A stranger writes; returns the owner's notice of their request and its code.
async fn stranger_asks(fake: &FakeTelegram, id: i64, name: &str, message_id: i64, text: &str) -> (SentMessage, String) {
    fake.push_message(updates::private_text(id, name, message_id, text));
    let notice =
        sent_to(fake, OWNER, |sent| sent.text.as_deref().is_some_and(|text| text.contains(&format!("id {id} on"))))
            .await;
    let data = button_data(fake, &notice);
    let code = data[0][0].rsplit(':').next().unwrap().to_owned();
    (notice, code)
}

fn daemon(dir: &Path, llm: &FakeLlm, fake: &FakeTelegram, name: &'static str) -> Daemon {
    owner_bot(Launch::new(dir, name, &["run"]), fake, llm).spawn()
}

#[tokio::test]
async fn the_owner_approves_a_stranger_with_a_button() {
    let (_llm, fake, dir, _daemon) = started(|dir, llm, fake| daemon(dir, llm, fake, "approve")).await;

    let (notice, code) = stranger_asks(&fake, EVE, "eve", 1, "Hi! I'm Eve from next door.\n\nCan we talk?").await;
    let told = sent_to(&fake, EVE, |_| true).await;
    assert!(told.text.as_deref().unwrap().contains("I've asked them about you"), "{told:?}");
    assert!(told.text.as_deref().unwrap().contains(&code), "the code is still given: {told:?}");
    let text = notice.shown();
    assert!(text.starts_with("Eve (@eve, id 555 on Telegram) asks to talk to me. They wrote:"), "{text}");
    assert!(text.contains("Hi! I'm Eve from next door. Can we talk?"), "{text}");
    assert!(text.contains(&format!("Code {code}, valid until ")) && text.contains(" UTC."), "{text}");
    assert_eq!(button_data(&fake, &notice), [[format!("Approve=pa:{code}"), format!("Deny=pd:{code}")]]);

    decide(&fake, &notice, owner(), &format!("pa:{code}"), "Approved.", "✅ Approved by Owner (telegram:1).").await;
    let settled = settled_text(&fake, &notice).await;
    assert!(settled.contains("asks to talk to me"), "the request stays readable: {settled}");
    let welcome =
        sent_to(&fake, EVE, |sent| sent.text.as_deref().is_some_and(|text| text.contains("approved you"))).await;
    assert!(welcome.message_id > told.message_id);

    // Eve is let in: her next message reaches the agent.
    fake.push_message(updates::private_text(EVE, "eve", 2, "thanks!"));
    sent_to(&fake, EVE, |sent| sent.text.as_deref() == Some("echo: thanks!")).await;
    assert!(run_to_exit(dir.path(), &["pairing", "list"], &[]).2.contains("approved"));
    fake.assert_callback_queries_answered();
}

/// Someone else's press is refused and logged; the owner's Deny tells the stranger, who stays
/// out; a request decided from the shell first is no longer open to a button.
#[tokio::test]
async fn denials_refusals_and_requests_decided_elsewhere() {
    let (llm, fake, dir, daemon) = started(|dir, llm, fake| daemon(dir, llm, fake, "deny")).await;

    let (notice, code) = stranger_asks(&fake, EVE, "eve", 1, "let me in").await;
    let refused = press(&fake, &notice, updates::user(MALLORY, "mallory"), &format!("pa:{code}")).await;
    assert_eq!(refused.text.as_deref(), Some("Only the owner can decide this."));
    daemon.wait_for_log("button press refused").await;
    assert!(daemon.logs().contains("telegram:777"), "the presser is named in the log");
    assert_eq!(button_data(&fake, &notice).len(), 1, "the buttons stay");
    assert!(fake.edits().is_empty());

    decide(&fake, &notice, owner(), &format!("pd:{code}"), "Denied.", "❌ Denied by Owner (telegram:1).").await;
    sent_to(&fake, EVE, |sent| sent.text.as_deref().is_some_and(|text| text.contains("declined"))).await;
    let before = fake.sent_messages().len();
    fake.push_message(updates::private_text(EVE, "eve", 2, "please?"));
    // A denied stranger's message leaves nothing to wait for (no answer, no model call, no log
    // line), so a while passes instead.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(fake.sent_messages().len(), before, "a denied stranger gets no answer: {:#?}", fake.sent_messages());
    assert!(llm.requests().is_empty(), "nothing reached the model");

    // Approved from the shell while the notice still shows its buttons.
    let (notice, code) = stranger_asks(&fake, 556, "frank", 1, "hello").await;
    let (status, stderr, _) = run_to_exit(dir.path(), &["pairing", "approve", "telegram", &code], &[]);
    assert!(status.success(), "{stderr}");
    decide(&fake, &notice, owner(), &format!("pa:{code}"), NO_LONGER_OPEN, "No longer open.").await;
    fake.assert_callback_queries_answered();
}

/// Codes are stored: a request made before a restart can be approved after it while valid,
/// and an expired one answers that it is no longer open.
#[tokio::test]
async fn a_restart_between_request_and_press() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut first = owner_bot(Launch::new(dir.path(), "short-codes", &["run"]), &fake, &llm)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__PAIRING_CODE_TTL_SECS", "2")
        .spawn();
    first.wait_healthy().await;
    let (expired, expired_code) = stranger_asks(&fake, 556, "frank", 1, "hello").await;
    let asked = Instant::now();
    first.kill_hard();

    let mut second = daemon(dir.path(), &llm, &fake, "second");
    second.wait_healthy().await;
    let (valid, code) = stranger_asks(&fake, EVE, "eve", 1, "hi").await;
    second.kill_hard();

    let mut third = daemon(dir.path(), &llm, &fake, "third");
    third.wait_healthy().await;
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(asked.elapsed())).await;
    decide(&fake, &expired, owner(), &format!("pa:{expired_code}"), NO_LONGER_OPEN, "No longer open.").await;
    assert_eq!(press(&fake, &valid, owner(), &format!("pa:{code}")).await.text.as_deref(), Some("Approved."));
    sent_to(&fake, EVE, |sent| sent.text.as_deref().is_some_and(|text| text.contains("approved you"))).await;
    fake.push_message(updates::private_text(EVE, "eve", 2, "in at last"));
    sent_to(&fake, EVE, |sent| sent.text.as_deref() == Some("echo: in at last")).await;
    fake.assert_callback_queries_answered();
}
