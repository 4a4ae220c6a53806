//! Decisions from the owner console through the real daemon: strangers who wrote to the bot on
//! the fake Telegram are approved (told so, and they can talk now) or denied (told so, and kept
//! out); a guest's `exec` call waits
//! until the console allows it, and a denied one never runs. Every decision is recorded as
//! taken by the admin token's identity.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::fake_telegram::{FakeTelegram, updates};

use crate::console::{Api, OPS, launch};
use crate::support::Daemon;

const EVE: i64 = 4242;
const MALLORY: i64 = 5353;

/// Waits until the pairing request of Telegram user `id` is listed; its code.
async fn pending_code(api: &Api<'_>, id: i64) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    let sender = id.to_string();
    loop {
        let people = api.admin(Method::GET, "/v1/admin/people", None).await;
        let found = people["pending"].as_array().unwrap().iter().find(|p| p["sender_id"] == sender.as_str()).cloned();
        if let Some(request) = found {
            assert_eq!(request["channel"], "telegram", "{request}");
            return request["code"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no pairing request of {id}: {people}\n{}", api.daemon.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the bot has sent `n` messages to chat `chat`; their texts.
async fn sent_to(fake: &FakeTelegram, chat: i64, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let texts: Vec<String> =
            fake.sent_messages().into_iter().filter(|m| m.chat_id == chat).filter_map(|m| m.text).collect();
        if texts.len() >= n {
            return texts;
        }
        assert!(Instant::now() < deadline, "{} messages to {chat}, expected {n}: {texts:?}", texts.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn strangers_are_approved_and_denied_from_the_console() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = launch(dir.path(), &llm, "")
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &fake.api_url())
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
        .spawn();
    daemon.wait_healthy().await;
    let api = Api::new(&daemon);

    fake.push_message(updates::private_text(EVE, "eve", 1, "hi, may I talk to you?"));
    fake.push_message(updates::private_text(MALLORY, "mallory", 1, "let me in"));
    let eve_code = pending_code(&api, EVE).await;
    let mallory_code = pending_code(&api, MALLORY).await;
    assert!(sent_to(&fake, EVE, 1).await[0].contains(&eve_code), "the stranger was given the code");

    let approved = api.admin(Method::POST, &format!("/v1/admin/pairings/telegram/{eve_code}/approve"), None).await;
    assert_eq!(approved["outcome"], "approved", "{approved}");
    let denied = api.admin(Method::POST, &format!("/v1/admin/pairings/telegram/{mallory_code}/deny"), None).await;
    assert_eq!(denied["outcome"], "denied", "{denied}");
    let (status, again) =
        api.call(Method::POST, &format!("/v1/admin/pairings/telegram/{eve_code}/deny"), OPS, None).await;
    assert_eq!(status, 409, "a decided request is no longer open: {again}");

    let people = api.admin(Method::GET, "/v1/admin/people", None).await;
    assert!(people["pending"].as_array().unwrap().is_empty(), "{people}");
    let eve = people["people"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["identities"][0]["identity"] == format!("telegram:{EVE}"));
    let eve = eve.unwrap_or_else(|| panic!("eve is a person now: {people}"));
    assert_eq!((eve["level"].as_str(), eve["identities"][0]["paired"].as_bool()), (Some("user"), Some(true)), "{eve}");
    // Both decisions are listed, newest first, with who decided and when.
    let decided: Vec<(String, &str, &str)> = people["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["sender_id"].as_str().unwrap().to_owned(),
                d["decision"].as_str().unwrap(),
                d["decided_by"].as_str().unwrap(),
            )
        })
        .collect();
    let expected = [(MALLORY.to_string(), "denied", "api:ops"), (EVE.to_string(), "approved", "api:ops")];
    assert_eq!(decided, expected, "{people}");
    assert!(people["decisions"][0]["decided_at"].is_string() && people["decisions"][0]["decided"].is_string());

    // Both are told; Eve may talk now, Mallory is still kept out.
    let told = sent_to(&fake, EVE, 2).await;
    assert!(told[1].contains("my owner approved you"), "{told:?}");
    let told = sent_to(&fake, MALLORY, 2).await;
    assert!(told[1].contains("my owner declined"), "{told:?}");
    let before = fake.sent_messages().iter().filter(|m| m.chat_id == EVE).count();
    llm.push(Scripted::Text("welcome, Eve".into()));
    fake.push_message(updates::private_text(EVE, "eve", 2, "thanks!"));
    let texts = sent_to(&fake, EVE, before + 1).await;
    assert!(texts.iter().any(|text| text.contains("welcome, Eve")), "{texts:?}");
    fake.push_message(updates::private_text(MALLORY, "mallory", 2, "please?"));
    // A denied stranger's message leaves nothing to wait for; a while passes instead.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(llm.requests().iter().all(|r| !r.to_string().contains("please?")), "a denied stranger reached the model");
}

fn script_exec(llm: &FakeLlm, command: &str) {
    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": command}))]));
    llm.push(Scripted::Text("done".into()));
}

/// The result the model got for its last exec call.
fn exec_result(llm: &FakeLlm) -> String {
    let requests = llm.requests();
    let messages = requests.last().unwrap()["messages"].as_array().unwrap().clone();
    let result = messages.iter().rev().find(|m| m["role"] == "tool").expect("no tool result");
    result["content"].as_str().unwrap().to_owned()
}

/// The code of the waiting approval, once the console lists one.
async fn waiting_code(api: &Api<'_>) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let listed = api.admin(Method::GET, "/v1/admin/approvals", None).await;
        if let Some(waiting) = listed["approvals"].as_array().unwrap().iter().find(|a| a["status"] == "pending") {
            assert_eq!((waiting["tool"].as_str(), waiting["requested_by"].as_str()), (Some("exec"), Some("api:bob")));
            return waiting["code"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "nothing waits: {listed}\n{}", api.daemon.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn ask(daemon: &Daemon, chat: &str) -> (u16, Value) {
    daemon.post_with(json!({"chat_id": chat, "sender": "bob", "content": "please run it"}), Some(OPS)).await
}

#[tokio::test]
async fn a_waiting_tool_call_is_allowed_or_denied_from_the_console() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = launch(dir.path(), &llm, "")
        .env("SWITCHBOARD_APPROVALS__TOOLS", r#"["exec"]"#)
        .env("SWITCHBOARD_PERMISSIONS__TOOLS__EXEC", "guest")
        .env("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "none")
        .spawn();
    daemon.wait_healthy().await;
    let api = Api::new(&daemon);

    script_exec(&llm, "echo ran-after-console-approval");
    let deciding = async {
        let code = waiting_code(&api).await;
        let decided = api.admin(Method::POST, &format!("/v1/admin/approvals/{code}/allow_once"), None).await;
        let (status, _) = api.call(Method::POST, &format!("/v1/admin/approvals/{code}/deny"), OPS, None).await;
        (decided, status)
    };
    let ((status, body), (decided, again)) = tokio::join!(ask(&daemon, "a"), deciding);
    assert_eq!((status, body["reply"].as_str()), (200, Some("done")), "{body}\n{}", daemon.logs());
    assert_eq!(decided["outcome"], "allowed", "{decided}");
    assert_eq!(again, 409, "a decided call cannot be decided again");
    assert!(exec_result(&llm).contains("ran-after-console-approval"), "{}", exec_result(&llm));

    script_exec(&llm, "echo must-not-run");
    let deciding = async {
        let code = waiting_code(&api).await;
        api.admin(Method::POST, &format!("/v1/admin/approvals/{code}/deny"), None).await
    };
    let ((status, _), denied) = tokio::join!(ask(&daemon, "b"), deciding);
    assert_eq!((status, denied["outcome"].as_str()), (200, Some("denied")));
    assert!(!exec_result(&llm).contains("must-not-run"), "{}", exec_result(&llm));

    let listed = api.admin(Method::GET, "/v1/admin/approvals", None).await;
    let decided: Vec<(&str, &str)> = listed["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["status"].as_str().unwrap(), a["decided_by"].as_str().unwrap()))
        .collect();
    assert_eq!(decided, [("denied", "api:ops"), ("allowed", "api:ops")], "newest decision first: {listed}");
}
