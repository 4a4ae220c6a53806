//! `[approvals]` through the real daemon: a guest's `exec` call waits for an approver, who
//! decides from the shell (`switchboard approvals`); allowed, it runs; denied or unanswered,
//! the model is told; `/stop` cancels the wait; a restart while waiting ends it as expired with
//! the person answered. The run's own time limit stands still while it waits.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch, run_to_exit};
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

pub fn launch<'a>(dir: &'a Path, llm: &FakeLlm, name: &'a str) -> Launch<'a> {
    Launch::new(dir, name, &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_APPROVALS__TOOLS", r#"["exec"]"#)
        .env("SWITCHBOARD_APPROVALS__TIMEOUT_SECS", "4")
        // Shorter than the approval's wait: the wait must not count against it.
        .env("SWITCHBOARD_AGENT__RUN_TIMEOUT_SECS", "3")
        .env("SWITCHBOARD_PERMISSIONS__TOOLS__EXEC", "guest")
        .env("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "none")
}

/// The code of the newest pending approval, once there is one.
async fn pending_code(dir: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, stderr, stdout) = run_to_exit(dir, &["approvals", "list"], &[]);
        assert!(status.success(), "{stderr}");
        if let Some(line) = stdout.lines().find(|line| line.contains(" pending ")) {
            return line.split_whitespace().next().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no pending approval:\n{stdout}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cli(dir: &Path, args: &[&str]) -> String {
    let (status, stderr, stdout) = run_to_exit(dir, args, &[]);
    assert!(status.success(), "{args:?}: {stderr}");
    stdout
}

/// The result the model got for its exec call in its last request.
pub fn exec_result(llm: &FakeLlm) -> String {
    let requests = llm.requests();
    let messages = requests.last().unwrap()["messages"].as_array().unwrap().clone();
    let result = messages.iter().rev().find(|m| m["role"] == "tool").expect("no tool result");
    result["content"].as_str().unwrap().to_owned()
}

pub fn script_exec(llm: &FakeLlm, command: &str) {
    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": command}))]));
    llm.push(Scripted::Text("done".into()));
}

async fn ask(daemon: &Daemon, chat: &str) -> (u16, Value) {
    daemon.post(json!({"chat_id": chat, "sender": "bob", "content": "please run it"})).await
}

#[tokio::test]
async fn an_exec_call_waits_for_the_owner_and_runs_only_when_allowed() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = launch(dir.path(), &llm, "approvals").spawn();
    daemon.wait_healthy().await;

    // Allowed: it runs, though the wait outlasts the run's own 3 s limit.
    script_exec(&llm, "echo ran-after-approval");
    let asking = ask(&daemon, "a");
    let deciding = async {
        let code = pending_code(dir.path()).await;
        tokio::time::sleep(Duration::from_millis(3500)).await;
        cli(dir.path(), &["approvals", "allow", &code])
    };
    let ((status, body), decided) = tokio::join!(asking, deciding);
    assert_eq!((status, body["reply"].as_str()), (200, Some("done")), "{body}\n{}", daemon.logs());
    assert!(decided.contains("allowed exec in api:a"), "{decided}");
    assert!(exec_result(&llm).contains("ran-after-approval"), "{}", exec_result(&llm));

    // Denied: it does not run, and the model is told.
    script_exec(&llm, "echo must-not-run");
    let deciding = async {
        let code = pending_code(dir.path()).await;
        cli(dir.path(), &["approvals", "deny", &code])
    };
    let ((status, body), _) = tokio::join!(ask(&daemon, "b"), deciding);
    assert_eq!(status, 200, "{body}");
    let result = exec_result(&llm);
    assert!(result.contains("the owner declined this call") && !result.contains("must-not-run"), "{result}");

    // Unanswered: declined at the approval's timeout (4 s).
    script_exec(&llm, "echo must-not-run");
    let started = Instant::now();
    let (status, body) = ask(&daemon, "c").await;
    assert_eq!(status, 200, "{body}");
    assert!(exec_result(&llm).contains("did not answer in time"), "{}", exec_result(&llm));
    assert!(started.elapsed() >= Duration::from_secs(4), "declined after {:?}", started.elapsed());

    // Every decision is on record.
    let all = cli(dir.path(), &["approvals", "list", "--all"]);
    for status in ["allowed", "denied", "expired"] {
        assert!(all.contains(&format!(" {status} ")), "{status}:\n{all}");
    }
    assert!(all.contains("by cli"), "{all}");
    // The chat was told the answer waits for the owner.
    let (_, messages) = daemon.get_json("/v1/sessions/api%3Aa/messages").await;
    assert!(messages.to_string().contains("needs the owner's approval first (exec)"), "{messages}");
}

#[tokio::test]
async fn stop_cancels_the_wait_and_a_restart_ends_it_as_expired() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = launch(dir.path(), &llm, "first").spawn();
    daemon.wait_healthy().await;

    // Only the call: the stopped run never asks the model again.
    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": "echo must-not-run"}))]));
    let asking = ask(&daemon, "s");
    let stopping = async {
        pending_code(dir.path()).await;
        daemon.post(json!({"chat_id": "s", "sender": "bob", "content": "/stop"})).await
    };
    let ((status, body), _) = tokio::join!(asking, stopping);
    assert_eq!(status, 200, "{body}");
    assert!(body["reply"].as_str().unwrap_or_default().starts_with("Stopped before answering"), "{body}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let all = cli(dir.path(), &["approvals", "list", "--all"]);
    assert!(all.contains(" cancelled "), "{all}");

    // A restart while waiting: the person is answered, the model not asked again.
    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": "echo must-not-run"}))]));
    let asking = tokio::spawn({
        let url = daemon.url("/v1/messages");
        async move {
            let body = json!({"chat_id": "r", "sender": "bob", "content": "please run it"});
            let _ = reqwest::Client::new().post(url).json(&body).send().await;
        }
    });
    pending_code(dir.path()).await;
    let calls_before = llm.requests().len();
    daemon.kill_hard();
    asking.abort();
    let mut second = launch(dir.path(), &llm, "second").spawn();
    second.wait_healthy().await;
    // The run ends with its notice to the person (kept for the API chat, whose client is gone).
    second.wait_for_log("a run that waited for an approver ended with a restart").await;
    second.wait_for_log("kept in the outbox").await;
    assert!(second.logs().contains(":reply session_key=api:r"), "{}", second.logs());
    assert_eq!(llm.requests().len(), calls_before, "the model was asked again");
    assert!(cli(dir.path(), &["approvals", "list", "--all"]).contains(" expired "));
}

/// The owner decides from their own chat: the request reaches it, `/pending` lists it,
/// `/approve` lets it run. Anyone else is told the owner's commands are unknown.
#[tokio::test]
async fn the_owner_approves_from_their_direct_chat() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = launch(dir.path(), &llm, "owner").env("SWITCHBOARD_USERS__OWNERS", r#"["api:owner"]"#).spawn();
    daemon.wait_healthy().await;
    let owner = |content: &str| json!({"chat_id": "owner-dm", "sender": "owner", "content": content});
    llm.push(Scripted::Text("hello".into()));
    assert_eq!(daemon.post(owner("hi")).await.0, 200, "the owner's direct chat is on record");
    let (_, help) = daemon.post(owner("/help")).await;
    assert!(help["reply"].as_str().unwrap_or_default().contains("Yours (here only):\n/pending"), "{help}");

    script_exec(&llm, "echo ran-after-chat-approval");
    let asking = ask(&daemon, "x");
    let deciding = async {
        let code = pending_code(dir.path()).await;
        let (_, told) = daemon.get_json("/v1/sessions/api%3Aowner-dm/messages").await;
        assert!(told.to_string().contains(&format!("Approval {code}: bob")), "{told}");
        let (_, listed) = daemon.post(owner("/pending")).await;
        assert!(
            listed["reply"].as_str().unwrap_or_default().contains(&format!("{code} exec asked by api:bob")),
            "{listed}"
        );
        let (_, refused) = daemon.post(json!({"chat_id": "x2", "sender": "bob", "content": "/pending"})).await;
        assert_eq!(refused["reply"], "Unknown command /pending. /help lists the commands.");
        let (_, typo) = daemon.post(owner("/approve nope")).await;
        assert_eq!(typo["reply"], "Nothing waits under NOPE; /pending lists what does.");
        daemon.post(owner(&format!("/approve {}", code.to_lowercase()))).await
    };
    let ((status, body), (_, approved)) = tokio::join!(asking, deciding);
    assert!(approved["reply"].as_str().unwrap_or_default().contains("allowed exec in api:x"), "{approved}");
    assert_eq!((status, body["reply"].as_str()), (200, Some("done")), "{body}");
    assert!(exec_result(&llm).contains("ran-after-chat-approval"));
    assert!(cli(dir.path(), &["approvals", "list", "--all"]).contains("by api:owner"));
}

/// The same decisions by button on Telegram: a guest in a direct chat causes the call, the
/// owner's direct chat gets the request with Allow once, Allow for this chat and Deny.
mod by_button {
    use std::path::Path;
    use std::time::Duration;

    use serde_json::json;
    use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
    use switchboard_testkit::fake_telegram::{FakeTelegram, SentMessage, updates};

    use super::{exec_result, launch, script_exec};
    use crate::owner_buttons::{NO_LONGER_OPEN, OWNER, button_data, decide, owner, owner_bot, press, sent_to, started};
    use crate::support::{Daemon, run_to_exit};

    const BOB: i64 = 222;

    fn spawn(dir: &Path, llm: &FakeLlm, fake: &FakeTelegram, name: &'static str) -> Daemon {
        owner_bot(launch(dir, llm, name), fake, llm)
            .env("SWITCHBOARD_CHANNELS__TELEGRAM__ALLOW_FROM", &format!(r#"["{BOB}"]"#))
            .spawn()
    }

    /// The owner writes once, so their direct chat is on record for approval requests.
    async fn owner_says_hi(fake: &FakeTelegram) {
        fake.push_message(updates::private_text(OWNER, "owner", 1, "hi"));
        sent_to(fake, OWNER, |sent| sent.text.as_deref() == Some("echo: hi")).await;
    }

    /// Bob asks (message `n` of his chat); returns the owner's request and its code.
    async fn bob_asks(fake: &FakeTelegram, n: i64) -> (SentMessage, String) {
        bob_asks_of(fake, OWNER, n).await
    }

    /// Bob asks (message `n` of his chat); returns the request the approver with the direct
    /// chat `approver` got, and its code.
    async fn bob_asks_of(fake: &FakeTelegram, approver: i64, n: i64) -> (SentMessage, String) {
        let requests = || -> Vec<SentMessage> {
            let sent = fake.sent_messages().into_iter();
            sent.filter(|sent| sent.chat_id == approver && sent.shown().starts_with("Approval ")).collect()
        };
        let asked = requests().len();
        fake.push_message(updates::private_text(BOB, "bob", n, "please run it"));
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let request = loop {
            if let Some(request) = requests().into_iter().nth(asked) {
                break request;
            }
            assert!(std::time::Instant::now() < deadline, "no approval request: {:#?}", fake.sent_messages());
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let code = button_data(fake, &request)[0][2].rsplit(':').next().unwrap().to_owned();
        (request, code)
    }

    /// Waits for Bob's `n`th message that starts with `start`.
    async fn bob_told(fake: &FakeTelegram, n: usize, start: &str) {
        let count = || fake.sent_messages().iter().filter(|s| s.chat_id == BOB && s.shown().starts_with(start)).count();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while count() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "Bob never told {start:?} {n} times: {:#?}",
                fake.sent_messages()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn the_owner_allows_denies_or_misses_a_call_by_button() {
        let (llm, fake, dir, _daemon) = started(|dir, llm, fake| spawn(dir, llm, fake, "buttons")).await;
        owner_says_hi(&fake).await;

        // Allowed once: it runs.
        script_exec(&llm, "echo ran-by-button");
        let (request, code) = bob_asks(&fake, 1).await;
        bob_told(&fake, 1, "This needs the owner's approval first (exec)").await;
        assert!(
            request.shown().contains("Bob (telegram:222) in a direct chat (telegram:222) wants the agent to run exec")
        );
        let labels: Vec<String> =
            button_data(&fake, &request)[0].iter().map(|b| b.split('=').next().unwrap().into()).collect();
        assert_eq!(labels, ["Allow once", "Allow for this chat", "Deny"]);
        decide(
            &fake,
            &request,
            owner(),
            &format!("ta:{code}"),
            "Allowed once.",
            "✅ Allowed once by Owner (telegram:1).",
        )
        .await;
        bob_told(&fake, 1, "done").await;
        assert!(exec_result(&llm).contains("ran-by-button"), "{}", exec_result(&llm));

        // Denied: it does not run, and the model is told.
        script_exec(&llm, "echo must-not-run");
        let (request, code) = bob_asks(&fake, 2).await;
        decide(&fake, &request, owner(), &format!("td:{code}"), "Denied.", "❌ Denied by Owner (telegram:1).").await;
        bob_told(&fake, 2, "done").await;
        assert!(exec_result(&llm).contains("the owner declined this call"), "{}", exec_result(&llm));

        // Unanswered: declined at the timeout; a press after it finds the request closed.
        script_exec(&llm, "echo must-not-run");
        let (request, code) = bob_asks(&fake, 3).await;
        bob_told(&fake, 3, "done").await;
        assert!(exec_result(&llm).contains("did not answer in time"), "{}", exec_result(&llm));
        decide(&fake, &request, owner(), &format!("ta:{code}"), NO_LONGER_OPEN, "No longer open.").await;

        // Allowed for this chat: this call and the next one there run without asking.
        script_exec(&llm, "echo first-of-the-chat");
        let (request, code) = bob_asks(&fake, 4).await;
        let outcome = "✅ Allowed for this chat by Owner (telegram:1).";
        decide(&fake, &request, owner(), &format!("tc:{code}"), "Allowed for this chat.", outcome).await;
        bob_told(&fake, 4, "done").await;
        script_exec(&llm, "echo no-need-to-ask");
        fake.push_message(updates::private_text(BOB, "bob", 5, "and again"));
        bob_told(&fake, 5, "done").await;
        assert!(exec_result(&llm).contains("no-need-to-ask"), "{}", exec_result(&llm));
        let all = run_to_exit(dir.path(), &["approvals", "list", "--all"], &[]).2;
        assert_eq!(all.matches("by telegram:1").count(), 3, "{all}");
        fake.assert_callback_queries_answered();
    }

    /// `/stop` and a restart end the wait; the owner's buttons then answer that the request is
    /// no longer open.
    #[tokio::test]
    async fn stop_and_restart_close_the_request_the_buttons_show() {
        let (llm, fake, dir, mut first) = started(|dir, llm, fake| spawn(dir, llm, fake, "first")).await;
        owner_says_hi(&fake).await;

        llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": "echo must-not-run"}))]));
        let (stopped, stopped_code) = bob_asks(&fake, 1).await;
        fake.push_message(updates::bot_command(updates::private_text(BOB, "bob", 2, "/stop")));
        bob_told(&fake, 1, "Stopped").await;
        let closed = || run_to_exit(dir.path(), &["approvals", "list", "--all"], &[]).2.contains(" cancelled ");
        while !closed() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let answer = press(&fake, &stopped, owner(), &format!("ta:{stopped_code}")).await;
        assert_eq!(answer.text.as_deref(), Some(NO_LONGER_OPEN));

        llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": "echo must-not-run"}))]));
        let (waiting, code) = bob_asks(&fake, 3).await;
        first.kill_hard();
        let mut second = spawn(dir.path(), &llm, &fake, "second");
        second.wait_healthy().await;
        bob_told(&fake, 1, "While this waited for the owner's approval (exec), switchboard restarted").await;
        decide(&fake, &waiting, owner(), &format!("ta:{code}"), NO_LONGER_OPEN, "No longer open.").await;
        // Neither call ran: the model was asked once for "hi" and once for each call, never again.
        assert_eq!(llm.requests().len(), 3);
        fake.assert_callback_queries_answered();
    }

    /// A named approver who is not an owner (and has never been asked anything before) gets
    /// the request in their direct chat and decides it; the owner, not among the approvers, is
    /// not asked and is refused like anyone else.
    #[tokio::test]
    async fn a_named_approver_who_is_not_an_owner_decides_by_button() {
        const APPROVER: i64 = 9;
        let spawn = |dir: &Path, llm: &FakeLlm, fake: &FakeTelegram| {
            owner_bot(launch(dir, llm, "approver"), fake, llm)
                .env("SWITCHBOARD_CHANNELS__TELEGRAM__ALLOW_FROM", &format!(r#"["{BOB}", "{APPROVER}"]"#))
                .env("SWITCHBOARD_APPROVALS__APPROVERS", &format!(r#"["telegram:{APPROVER}"]"#))
                .spawn()
        };
        let (llm, fake, dir, _daemon) = started(spawn).await;
        // Both have started the bot, as Telegram needs before a bot may write to someone.
        owner_says_hi(&fake).await;
        fake.push_message(updates::private_text(APPROVER, "val", 1, "hi"));
        sent_to(&fake, APPROVER, |sent| sent.text.as_deref() == Some("echo: hi")).await;

        script_exec(&llm, "echo ran-for-the-approver");
        let (request, code) = bob_asks_of(&fake, APPROVER, 1).await;
        assert!(request.shown().contains("Bob (telegram:222) in a direct chat"), "{}", request.shown());
        for someone_else in [owner(), updates::user(777, "mallory")] {
            let refused = press(&fake, &request, someone_else, &format!("ta:{code}")).await;
            assert_eq!(refused.text.as_deref(), Some("Only an approver can decide this."));
        }
        let approver = updates::user(APPROVER, "val");
        let outcome = "✅ Allowed once by Val (telegram:9).";
        decide(&fake, &request, approver, &format!("ta:{code}"), "Allowed once.", outcome).await;
        bob_told(&fake, 1, "done").await;
        assert!(exec_result(&llm).contains("ran-for-the-approver"), "{}", exec_result(&llm));

        let asked_owner =
            fake.sent_messages().into_iter().any(|s| s.chat_id == OWNER && s.shown().starts_with("Approval "));
        assert!(!asked_owner, "the owner is not an approver: {:#?}", fake.sent_messages());
        let all = run_to_exit(dir.path(), &["approvals", "list", "--all"], &[]).2;
        assert!(all.contains("by telegram:9"), "{all}");
        fake.assert_callback_queries_answered();
    }
}
