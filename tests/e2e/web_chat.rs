//! The web chat in a real browser: Debian's headless Chromium at phone width loads the page
//! from the daemon, asks for the token, sends a message, shows the fake model's reply as it
//! streams in, renders Markdown without running what the model wrote, and shows a reminder
//! that arrives on its own; chats that only received messages are listed and show them. It
//! saves a screenshot under `target/`.

pub mod webdriver;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_channels::api::access::token_sha256_hex;
use switchboard_testkit::fake_llm::{FakeLlm, Quirks, Scripted};

use crate::support::{Daemon, Launch, run_to_exit};
use webdriver::Browser;

const TOKEN: &str = "sb_browser_0123456789";

/// Chromium and chromedriver where Debian puts them: `.ci/run` installs them. In CI their
/// absence fails the test; elsewhere it skips it.
pub fn browser_installed() -> bool {
    let present = Path::new(webdriver::CHROMIUM).exists() && Path::new(webdriver::CHROMEDRIVER).exists();
    if !present {
        assert!(std::env::var_os("CI").is_none(), "CI must have chromium and chromium-driver installed");
        eprintln!(
            "skipped: no {} and {} (apt-get install chromium chromium-driver)",
            webdriver::CHROMIUM,
            webdriver::CHROMEDRIVER
        );
    }
    present
}

async fn start(dir: &Path, llm: &FakeLlm) -> Daemon {
    let config = dir.join("config.toml");
    // The owner's own web chat: `me` may use every tool, the cron tool included.
    let text = format!(
        "[users]\nowners = [\"api:me\"]\n[channels.api.tokens.me]\nsha256 = \"{}\"\n[cron]\npoll_interval_ms = 200\n",
        token_sha256_hex(TOKEN)
    );
    std::fs::write(&config, text).unwrap();
    let mut daemon =
        Launch::new(dir, "run", &["run", "--config", config.to_str().unwrap()]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    daemon
}

/// The texts of the assistant's bubbles, and whether the last one is still streaming.
const ANSWERS: &str = "const all = [...document.querySelectorAll('#messages .msg.assistant')]; \
     return all.length ? [all.map(e => e.textContent), all[all.length - 1].classList.contains('streaming')] : null;";

async fn send(browser: &Browser, text: &str) {
    browser.type_into("#input", text).await;
    browser.click("#send").await;
}

/// Waits for an answer ending in `last`, returning every text the newest bubble showed on the
/// way (polled every 50 ms).
async fn watch_answer(browser: &Browser, before: usize, last: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answers = browser.run(ANSWERS).await;
        if let Some(texts) = answers[0].as_array().filter(|texts| texts.len() > before) {
            let newest = texts.last().and_then(Value::as_str).unwrap_or_default().to_owned();
            if seen.last() != Some(&newest) {
                seen.push(newest.clone());
            }
            if newest == last && answers[1] == json!(false) {
                return seen;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no answer {last:?}; saw {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_web_chat_streams_a_reply_renders_it_safely_and_shows_a_reminder() {
    if !browser_installed() {
        return;
    }
    // A model that writes for a couple of seconds, as real ones do.
    let quirks = Quirks { stream_pace: Some(Duration::from_millis(400)), ..Quirks::default() };
    let llm = FakeLlm::start_with_quirks(quirks).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), &llm).await;
    // A phone's window.
    let browser = Browser::start(412, 915).await;
    browser.open(&daemon.url("/")).await;

    // It asks for the token, and takes it.
    browser.wait_for("return document.getElementById('token-dialog').open", Duration::from_secs(10)).await;
    browser.type_into("#token", TOKEN).await;
    browser.click("#token-form button[type=submit]").await;
    browser.wait_for("return !document.getElementById('token-dialog').open && document.getElementById('chat-title').textContent === 'web'", Duration::from_secs(10)).await;

    send(&browser, "hello browser").await;
    let seen = watch_answer(&browser, 0, "echo: hello browser").await;
    let partial = seen.iter().filter(|text| !text.is_empty() && text.as_str() != "echo: hello browser").count();
    assert!(partial >= 1, "the reply did not stream in: the page showed {seen:?}");
    assert!(seen.iter().all(|text| "echo: hello browser".starts_with(text.as_str())), "{seen:?}");

    // Markdown is rendered; what would run as HTML is shown as text.
    let hostile = "**bold** and `code` <img src=x onerror=\"window.pwned=1\"> [click](javascript:window.pwned=2) [docs](https://example.org/)";
    llm.push_when("format this", Scripted::Text(hostile.into()));
    send(&browser, "format this").await;
    browser
        .wait_for("return document.querySelector('#messages strong')?.textContent === 'bold'", Duration::from_secs(20))
        .await;
    let checks = browser
        .run(
            "const m = document.getElementById('messages'); return [window.pwned === undefined, \
         m.querySelectorAll('img').length, m.querySelectorAll('a[href^=\"javascript\"]').length, \
         m.querySelector('a[href=\"https://example.org/\"]') !== null, m.textContent.includes('<img src=x')];",
        )
        .await;
    assert_eq!(checks, json!([true, 0, 0, true, true]), "model output was not rendered safely");

    // A reminder the agent sets arrives on its own, with nobody waiting.
    let reminder = json!({"action": "add", "message": "stretch your legs", "at": "+2s", "payload": "reminder"});
    llm.push_when("remind me", Scripted::ToolCalls(vec![("cron".into(), reminder)]));
    send(&browser, "remind me in 2 seconds to stretch").await;
    let outbox = "return document.querySelector('#messages .msg.outbox')?.textContent ?? ''";
    let page = "return document.getElementById('messages').textContent";
    let Some(shown) = browser.try_wait_for(outbox, Duration::from_secs(30)).await else {
        panic!("no reminder; the page shows {}\n{}", browser.run(page).await, daemon.logs());
    };
    assert!(shown.as_str().unwrap().contains("stretch your legs"), "{shown}");

    // Phone width: the chat fills the window, the list of chats waits off-screen.
    let layout = browser
        .run(
            "return [document.getElementById('composer').getBoundingClientRect().width, \
         document.getElementById('sidebar').getBoundingClientRect().right];",
        )
        .await;
    assert!(layout[0].as_f64().unwrap() <= 412.0 && layout[1].as_f64().unwrap() <= 1.0, "{layout}");

    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("web-chat.png");
    std::fs::write(&shot, browser.screenshot().await).unwrap();
    eprintln!("screenshot: {}", shot.display());
}

/// The texts of the page's message bubbles.
const SHOWN: &str = "return [...document.querySelectorAll('#messages .msg')].map(e => e.textContent).join(' | ')";

/// Chats that only ever received messages are in the list and show them: one that got another
/// chat's `message` before the page loaded, and one whose first message (a reminder) came after
/// it loaded, opened by name.
#[tokio::test]
async fn chats_that_only_received_messages_are_listed_and_show_them() {
    if !browser_installed() {
        return;
    }
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), &llm).await;
    let send = json!({"content": "dinner is ready", "target": "api:me/kitchen"});
    llm.push_when("tell the kitchen", Scripted::ToolCalls(vec![("message".into(), send)]));
    let (status, reply) = daemon.post_with(json!({"chat_id": "web", "content": "tell the kitchen"}), Some(TOKEN)).await;
    assert_eq!(status, 200, "{reply}");

    let browser = Browser::start(1200, 900).await;
    browser.open(&daemon.url("/")).await;
    browser.wait_for("return document.getElementById('token-dialog').open", Duration::from_secs(10)).await;
    browser.type_into("#token", TOKEN).await;
    browser.click("#token-form button[type=submit]").await;
    let chats = "return [...document.querySelectorAll('#chats button')].map(b => b.textContent)";
    let listed = "return [...document.querySelectorAll('#chats button')].some(b => b.textContent === 'kitchen')";
    let Some(_) = browser.try_wait_for(listed, Duration::from_secs(10)).await else {
        panic!("kitchen is not listed: {}", browser.run(chats).await);
    };
    browser.run("[...document.querySelectorAll('#chats button')].find(b => b.textContent === 'kitchen').click()").await;
    let Some(_) = browser.try_wait_for(&format!("{SHOWN}.includes('dinner is ready')"), Duration::from_secs(10)).await
    else {
        panic!("kitchen shows {}", browser.run(SHOWN).await);
    };

    // A reminder to a chat the page has not heard of, then that chat opened by its name.
    let cron = |args: &[&str]| {
        let (status, stderr, stdout) = run_to_exit(dir.path(), &[&["cron"], args].concat(), &[]);
        assert!(status.success(), "cron {args:?}: {stderr}");
        stdout
    };
    let added = cron(&["add", "--to", "api:me/garden", "--at", "+1h", "--reminder", "--message", "Water the plants"]);
    let id = added.lines().next().and_then(|line| line.strip_prefix("added ")).unwrap_or_else(|| panic!("{added}"));
    cron(&["run", id.trim()]);
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let page: Value = client
            .get(daemon.url("/v1/sessions/api%3Ame%2Fgarden/messages"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if page["messages"].as_array().is_some_and(|lines| !lines.is_empty()) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the reminder never came\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser.type_into("#new-chat-name", "garden").await;
    browser.run("document.getElementById('new-chat').requestSubmit()").await;
    let Some(_) = browser.try_wait_for(&format!("{SHOWN}.includes('Water the plants')"), Duration::from_secs(10)).await
    else {
        panic!("garden shows {:?}; the chats are {}", browser.run(SHOWN).await, browser.run(chats).await);
    };
}
