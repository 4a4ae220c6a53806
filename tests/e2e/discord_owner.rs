//! The owner's buttons on Discord, through the real daemon and the fake Discord: a stranger's
//! pairing request reaches the owner in a DM the bot opens, with Approve and Deny components; a
//! press decides it, is answered through the interaction, edits the message with the outcome
//! and who decided, and tells the stranger. Presses by others, and on requests decided
//! elsewhere, are answered as such.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_testkit::fake_discord::{FakeDiscord, InteractionCallback, SentMessage, events};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

use crate::approvals::exec_result;

use crate::support::{Daemon, Launch, run_to_exit};

/// The owner, named in `users.owners`; they never wrote to the bot.
const OWNER: u64 = 999;
const EVE: u64 = 555;
const EVES_DM: u64 = 301;
const FRANK: u64 = 556;
const FRANKS_DM: u64 = 302;
const MALLORY: u64 = 777;
const NO_LONGER_OPEN: &str = "This request is no longer open.";

/// A daemon with the Discord channel on the fake and `discord:999` as its owner.
fn owner_bot<'a>(launch: Launch<'a>, llm: &FakeLlm, fake: &FakeDiscord) -> Launch<'a> {
    launch
        .llm(&llm.base_url())
        .env("DISCORD_BOT_TOKEN", FakeDiscord::TOKEN)
        .env("SWITCHBOARD_CHANNELS__DISCORD__PROXY_URL", &fake.url())
        .env("SWITCHBOARD_USERS__OWNERS", &format!(r#"["discord:{OWNER}"]"#))
        .env("SWITCHBOARD_WORKER__DEBOUNCE_MS", "0")
}

/// The fakes and a healthy daemon connected to the fake Discord.
async fn started(dir: &std::path::Path, name: &'static str) -> (FakeLlm, FakeDiscord, Daemon) {
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    let mut daemon = owner_bot(Launch::new(dir, name, &["run"]), &llm, &fake).spawn();
    daemon.wait_healthy().await;
    fake.wait_connected(1, Duration::from_secs(10)).await;
    (llm, fake, daemon)
}

/// The first message the bot sent to `channel` that satisfies `test`, once there is one.
async fn sent_to(fake: &FakeDiscord, channel: impl Fn() -> Option<u64>, test: impl Fn(&str) -> bool) -> SentMessage {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sent = fake.sent_messages();
        if let Some(found) = sent.iter().find(|sent| Some(sent.channel_id) == channel() && test(&sent.content)) {
            return found.clone();
        }
        assert!(Instant::now() < deadline, "nothing sent as expected: {sent:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A stranger writes in their DM; returns the owner's notice of their request and its code.
async fn stranger_asks(fake: &FakeDiscord, id: u64, dm: u64, name: &str, text: &str) -> (SentMessage, String) {
    fake.send_message_create(events::dm_message(dm, id, name, 1, text));
    let about_them = format!("id {id} on");
    let notice = sent_to(fake, || fake.direct_channel_of(OWNER), |content| content.contains(&about_them)).await;
    let buttons = fake.buttons(notice.channel_id, notice.message_id);
    let data = buttons[0][0].custom_id.clone().unwrap_or_default();
    let code = data.strip_prefix("pa:").expect("Approve comes first").to_owned();
    (notice, code)
}

/// Presses `data` under `notice` as `user`; returns the interaction's initial response.
async fn press(fake: &FakeDiscord, notice: &SentMessage, user: u64, data: &str) -> InteractionCallback {
    let pressed = fake.press_button(notice.channel_id, notice.message_id, user, data);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = fake.interaction_callbacks().into_iter().find(|found| found.interaction_id == pressed.id) {
            return found;
        }
        assert!(Instant::now() < deadline, "press {data} never answered: {:#?}", fake.calls());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ephemeral follow-ups sent so far (the toasts after a message's update).
fn toasts(fake: &FakeDiscord) -> Vec<Value> {
    let calls = fake.calls_to("POST /webhooks/{id}/{token}");
    calls.into_iter().filter(|call| call.body["flags"] == 64).map(|call| call.body["content"].clone()).collect()
}

/// Presses `data` as the owner; asserts the message then ends with `outcome`, its buttons
/// gone, and the owner alone is shown `toast`.
async fn decide(fake: &FakeDiscord, notice: &SentMessage, data: &str, toast: &str, outcome: &str) {
    let toasts_before = toasts(fake).len();
    let answer = press(fake, notice, OWNER, data).await;
    assert_eq!(answer.kind, 7, "the message is updated: {answer:?}");
    let settled = answer.data["content"].as_str().unwrap_or_default();
    assert!(settled.starts_with(&notice.content) && settled.ends_with(&format!("\n\n{outcome}")), "{settled}");
    assert!(fake.buttons(notice.channel_id, notice.message_id).is_empty(), "the buttons are gone");
    let deadline = Instant::now() + Duration::from_secs(10);
    while toasts(fake).len() == toasts_before {
        assert!(Instant::now() < deadline, "no toast: {:#?}", fake.calls());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(toasts(fake)[toasts_before], toast);
}

#[tokio::test]
async fn the_owner_approves_a_stranger_with_a_discord_button() {
    let dir = tempfile::tempdir().unwrap();
    let (_llm, fake, _daemon) = started(dir.path(), "dc-approve").await;

    let (notice, code) = stranger_asks(&fake, EVE, EVES_DM, "eve", "Hi! I'm Eve from next door.").await;
    assert_eq!(fake.calls_to("POST /users/@me/channels").len(), 1, "the owner's DM was opened");
    assert!(notice.content.starts_with("**Eve** (@eve, id 555 on Discord) asks to talk to me"), "{}", notice.content);
    assert!(notice.content.contains("Hi! I'm Eve from next door."), "{}", notice.content);
    let buttons = fake.buttons(notice.channel_id, notice.message_id);
    let shown: Vec<(u8, Option<String>)> = buttons[0].iter().map(|b| (b.style, b.label.clone())).collect();
    assert_eq!(shown, [(3, Some("Approve".to_owned())), (4, Some("Deny".to_owned()))]);
    let told = sent_to(&fake, || Some(EVES_DM), |_| true).await;
    assert!(told.content.contains(&code), "the code is still given: {told:?}");

    decide(&fake, &notice, &format!("pa:{code}"), "Approved.", "✅ Approved by User999 (discord:999).").await;
    sent_to(&fake, || Some(EVES_DM), |content| content.contains("approved you")).await;
    fake.send_message_create(events::dm_message(EVES_DM, EVE, "eve", 2, "thanks!"));
    sent_to(&fake, || Some(EVES_DM), |content| content == "echo: thanks!").await;
    assert!(run_to_exit(dir.path(), &["pairing", "list"], &[]).2.contains("approved"));
    fake.assert_interactions_acknowledged();
}

/// Someone else's press is refused (to them alone) and logged; the owner's Deny tells the
/// stranger, who stays out; a request decided from the shell first is no longer open to a button.
#[tokio::test]
async fn refusals_denials_and_requests_decided_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let (llm, fake, daemon) = started(dir.path(), "dc-refuse").await;

    let (notice, code) = stranger_asks(&fake, EVE, EVES_DM, "eve", "let me in").await;
    let refused = press(&fake, &notice, MALLORY, &format!("pa:{code}")).await;
    assert_eq!((refused.kind, refused.data["flags"].clone()), (4, Value::from(64)), "only Mallory sees it");
    assert_eq!(refused.data["content"], "Only the owner can decide this.");
    daemon.wait_for_log("button press refused").await;
    assert!(daemon.logs().contains("discord:777"), "the presser is named in the log");
    assert_eq!(fake.buttons(notice.channel_id, notice.message_id).len(), 1, "the buttons stay");

    decide(&fake, &notice, &format!("pd:{code}"), "Denied.", "❌ Denied by User999 (discord:999).").await;
    sent_to(&fake, || Some(EVES_DM), |content| content.contains("declined")).await;
    let before = fake.sent_messages().len();
    fake.send_message_create(events::dm_message(EVES_DM, EVE, "eve", 2, "please?"));
    // A denied stranger's message leaves nothing to wait for (no answer, no model call, no log
    // line), so a while passes instead.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(fake.sent_messages().len(), before, "no new code, no answer: {:#?}", fake.sent_messages());
    assert!(llm.requests().is_empty(), "nothing reached the model");

    // Approved from the shell while the notice still shows its buttons.
    let (notice, code) = stranger_asks(&fake, FRANK, FRANKS_DM, "frank", "hello").await;
    let (status, stderr, _) = run_to_exit(dir.path(), &["pairing", "approve", "discord", &code], &[]);
    assert!(status.success(), "{stderr}");
    decide(&fake, &notice, &format!("pa:{code}"), NO_LONGER_OPEN, "No longer open.").await;
    assert_eq!(fake.calls_to("POST /users/@me/channels").len(), 1, "the owner's DM is opened once");
    fake.assert_interactions_acknowledged();
}

/// After a restart the owner's DM is found again, and a button of a request that expired
/// meanwhile answers that it is no longer open.
#[tokio::test]
async fn a_request_that_expired_across_a_restart_is_no_longer_open() {
    let dir = tempfile::tempdir().unwrap();
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    let mut first = owner_bot(Launch::new(dir.path(), "dc-short-codes", &["run"]), &llm, &fake)
        .env("SWITCHBOARD_CHANNELS__DISCORD__PAIRING_CODE_TTL_SECS", "2")
        .spawn();
    first.wait_healthy().await;
    fake.wait_connected(1, Duration::from_secs(10)).await;
    let (notice, code) = stranger_asks(&fake, EVE, EVES_DM, "eve", "hello").await;
    let asked = Instant::now();
    first.kill_hard();

    let mut second = owner_bot(Launch::new(dir.path(), "dc-after", &["run"]), &llm, &fake).spawn();
    second.wait_healthy().await;
    fake.wait_connected(2, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(asked.elapsed())).await;
    decide(&fake, &notice, &format!("pa:{code}"), NO_LONGER_OPEN, "No longer open.").await;
    let (frank, code) = stranger_asks(&fake, FRANK, FRANKS_DM, "frank", "hi").await;
    assert_eq!(frank.channel_id, notice.channel_id, "the same DM with the owner");
    decide(&fake, &frank, &format!("pa:{code}"), "Approved.", "✅ Approved by User999 (discord:999).").await;
    fake.assert_interactions_acknowledged();
}

/// `user` asks the agent to run something (their message `n`); returns the approval request
/// the owner then gets and its code.
async fn someone_asks(fake: &FakeDiscord, user: u64, dm: u64, n: u64) -> (SentMessage, String) {
    let requests = || -> Vec<SentMessage> {
        fake.sent_messages().into_iter().filter(|sent| sent.content.starts_with("Approval ")).collect()
    };
    let asked = requests().len();
    fake.send_message_create(events::dm_message(dm, user, "bob", n, "please run it"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let request = loop {
        if let Some(request) = requests().into_iter().nth(asked) {
            break request;
        }
        assert!(Instant::now() < deadline, "no approval request: {:#?}", fake.sent_messages());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let buttons = fake.buttons(request.channel_id, request.message_id);
    let deny = buttons[0][2].custom_id.clone().unwrap_or_default();
    (request, deny.trim_start_matches("td:").to_owned())
}

const OWNERS_DM: u64 = 399;
const BOB: u64 = 222;
const BOBS_DM: u64 = 303;

/// A daemon where a guest's `exec` waits for the owner and Bob may talk to the bot; healthy,
/// and the fake's `connection`th gateway connection made.
async fn approvals_bot(dir: &Path, llm: &FakeLlm, fake: &FakeDiscord, name: &'static str, connection: usize) -> Daemon {
    let mut daemon = owner_bot(crate::approvals::launch(dir, llm, name), llm, fake)
        .env("SWITCHBOARD_CHANNELS__DISCORD__ALLOW_FROM", &format!(r#"["{BOB}"]"#))
        .spawn();
    daemon.wait_healthy().await;
    fake.wait_connected(connection, Duration::from_secs(10)).await;
    daemon
}

/// The owner writes once, so their DM is on record for approval requests.
async fn owner_says_hi(fake: &FakeDiscord) {
    fake.send_message_create(events::dm_message(OWNERS_DM, OWNER, "user999", 1, "hi"));
    sent_to(fake, || Some(OWNERS_DM), |content| content == "echo: hi").await;
}

/// Waits until Bob was sent `n` messages that start with `start`.
async fn bob_told(fake: &FakeDiscord, n: usize, start: &str) {
    let count =
        || fake.sent_messages().iter().filter(|s| s.channel_id == BOBS_DM && s.content.starts_with(start)).count();
    let deadline = Instant::now() + Duration::from_secs(20);
    while count() < n {
        assert!(Instant::now() < deadline, "Bob never told {start:?} {n} times: {:#?}", fake.sent_messages());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A guest's `exec` call waits for the owner, who decides it with a button in their DM (on
/// record since they wrote to the bot): allowed once it runs, denied the model is told,
/// unanswered it is declined at the timeout and a later press finds it closed.
#[tokio::test]
async fn the_owner_allows_denies_or_misses_a_tool_call_with_a_discord_button() {
    let dir = tempfile::tempdir().unwrap();
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    let _daemon = approvals_bot(dir.path(), &llm, &fake, "dc-tools", 1).await;
    owner_says_hi(&fake).await;

    crate::approvals::script_exec(&llm, "echo ran-by-button");
    let (request, code) = someone_asks(&fake, BOB, BOBS_DM, 1).await;
    assert_eq!(request.channel_id, OWNERS_DM, "the owner's direct chat on record");
    bob_told(&fake, 1, "This needs the owner's approval first (exec)").await;
    let buttons = fake.buttons(request.channel_id, request.message_id);
    let shown: Vec<(u8, &str)> = buttons[0].iter().map(|b| (b.style, b.label.as_deref().unwrap_or(""))).collect();
    assert_eq!(shown, [(3, "Allow once"), (3, "Allow for this chat"), (4, "Deny")]);
    decide(&fake, &request, &format!("ta:{code}"), "Allowed once.", "✅ Allowed once by User999 (discord:999).").await;
    bob_told(&fake, 1, "done").await;
    assert!(exec_result(&llm).contains("ran-by-button"));

    crate::approvals::script_exec(&llm, "echo must-not-run");
    let (request, code) = someone_asks(&fake, BOB, BOBS_DM, 2).await;
    decide(&fake, &request, &format!("td:{code}"), "Denied.", "❌ Denied by User999 (discord:999).").await;
    bob_told(&fake, 2, "done").await;
    assert!(exec_result(&llm).contains("the owner declined this call"), "{}", exec_result(&llm));

    // Unanswered: declined at the timeout (4 s), Bob still answered.
    crate::approvals::script_exec(&llm, "echo must-not-run");
    let (request, code) = someone_asks(&fake, BOB, BOBS_DM, 3).await;
    bob_told(&fake, 3, "done").await;
    assert!(exec_result(&llm).contains("did not answer in time"), "{}", exec_result(&llm));
    decide(&fake, &request, &format!("ta:{code}"), NO_LONGER_OPEN, "No longer open.").await;
    fake.assert_interactions_acknowledged();
}

/// `/stop` and a restart end the wait, Bob answered each time; the owner's buttons then answer
/// that the request is no longer open.
#[tokio::test]
async fn stop_and_restart_close_the_request_the_discord_buttons_show() {
    let dir = tempfile::tempdir().unwrap();
    let (llm, fake) = (FakeLlm::start().await, FakeDiscord::start().await);
    let mut first = approvals_bot(dir.path(), &llm, &fake, "dc-first", 1).await;
    owner_says_hi(&fake).await;

    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": "echo must-not-run"}))]));
    let (stopped, code) = someone_asks(&fake, BOB, BOBS_DM, 1).await;
    fake.send_message_create(events::dm_message(BOBS_DM, BOB, "bob", 2, "/stop"));
    bob_told(&fake, 1, "Stopped").await;
    let closed = || run_to_exit(dir.path(), &["approvals", "list", "--all"], &[]).2.contains(" cancelled ");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !closed() {
        assert!(Instant::now() < deadline, "the approval was never cancelled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    decide(&fake, &stopped, &format!("ta:{code}"), NO_LONGER_OPEN, "No longer open.").await;

    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": "echo must-not-run"}))]));
    let (waiting, code) = someone_asks(&fake, BOB, BOBS_DM, 3).await;
    first.kill_hard();
    let _second = approvals_bot(dir.path(), &llm, &fake, "dc-second", 2).await;
    bob_told(&fake, 1, "While this waited for the owner's approval (exec), switchboard restarted").await;
    decide(&fake, &waiting, &format!("ta:{code}"), NO_LONGER_OPEN, "No longer open.").await;
    // Neither call ran: the model was asked once for "hi" and once for each call, never again.
    assert_eq!(llm.requests().len(), 3);
    assert!(run_to_exit(dir.path(), &["approvals", "list", "--all"], &[]).2.contains(" expired "));
    fake.assert_interactions_acknowledged();
}
