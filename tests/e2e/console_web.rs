//! The owner console in a real browser (Debian's headless Chromium, as the web chat's test
//! runs it): with an admin token the page offers the console; a stranger's pairing request is
//! approved, a waiting `exec` call allowed, a cron job created and paused, every session's runs
//! shown live (Telegram's too), and the usage chart drawn for today; at phone width the sections are a menu. Screenshots at 1280 and 360 px
//! are saved under `target/`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::fake_telegram::{FakeTelegram, updates};

use crate::console::{KID, OPS, launch};
use crate::support::Daemon;
use crate::web_chat::browser_installed;
use crate::web_chat::webdriver::Browser;

const EVE: i64 = 4242;

async fn start(dir: &Path, llm: &FakeLlm, fake: &FakeTelegram) -> Daemon {
    let mut daemon = launch(dir, llm, "[agent]\ntimezone = \"Europe/Berlin\"\n")
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &fake.api_url())
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
        .env("SWITCHBOARD_APPROVALS__TOOLS", r#"["exec"]"#)
        .env("SWITCHBOARD_PERMISSIONS__TOOLS__EXEC", "guest")
        .env("SWITCHBOARD_TOOLS__EXEC__SANDBOX", "none")
        .env("SWITCHBOARD_WORKER__DEBOUNCE_MS", "0")
        .spawn();
    daemon.wait_healthy().await;
    daemon
}

/// Opens the page and signs in with `token`.
async fn sign_in(browser: &Browser, daemon: &Daemon, token: &str) {
    browser.open(&daemon.url("/")).await;
    browser.wait_for("return document.getElementById('token-dialog').open", Duration::from_secs(10)).await;
    browser.type_into("#token", token).await;
    browser.click("#token-form button[type=submit]").await;
    browser.wait_for("return !document.getElementById('token-dialog').open", Duration::from_secs(10)).await;
}

/// Clicks the button labelled `label` in the card of the open section that mentions `text`.
async fn press(browser: &Browser, section: &str, text: &str, label: &str) {
    let script = format!(
        "const card = [...document.querySelectorAll('#tab-{section} .card')].find(c => c.textContent.includes({text:?})); \
         const button = card && [...card.querySelectorAll('button')].find(b => b.textContent === {label:?}); \
         if (button) button.click(); return Boolean(button);"
    );
    let Some(_) = browser.try_wait_for(&script, Duration::from_secs(15)).await else {
        let shown = browser.run(&format!("return document.getElementById('tab-{section}').textContent")).await;
        let status = browser.run("return document.getElementById('console-status').textContent").await;
        panic!("no {label:?} for {text:?} in {section}: {shown} (status: {status})");
    };
}

async fn tab(browser: &Browser, name: &str) {
    browser.run(&format!("document.querySelector('#console-tabs button[data-tab={name}]').click()")).await;
}

async fn status_says(browser: &Browser, text: &str) {
    let script = format!("return document.getElementById('console-status').textContent.includes({text:?})");
    let Some(_) = browser.try_wait_for(&script, Duration::from_secs(15)).await else {
        panic!(
            "the status never said {text:?}: {}",
            browser.run("return document.getElementById('console-status').textContent").await
        );
    };
}

fn save(browser_png: Vec<u8>, name: &str) {
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&shot, browser_png).unwrap();
    eprintln!("screenshot: {}", shot.display());
}

#[tokio::test]
async fn the_owner_console_decides_schedules_and_charts_in_the_browser() {
    if !browser_installed() {
        return;
    }
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), &llm, &fake).await;
    // Something to chart: a turn of ann's today.
    let (status, _) = daemon.post_with(json!({"chat_id": "ann", "sender": "ann", "content": "hello"}), Some(OPS)).await;
    assert_eq!(status, 200);
    fake.push_message(updates::private_text(EVE, "eve", 1, "hi, may I talk to you?"));

    // A chat token sees the chat only.
    let browser = Browser::start(1280, 900).await;
    sign_in(&browser, &daemon, KID).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(browser.run("return document.getElementById('open-console').hidden").await, json!(true));

    sign_in_again_as_owner(&browser, &daemon).await;

    // People: the stranger's request, approved.
    press(&browser, "people", "id 4242", "Approve").await;
    status_says(&browser, "may now write to the bot").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !fake
        .sent_messages()
        .iter()
        .any(|m| m.chat_id == EVE && m.text.as_deref().is_some_and(|t| t.contains("approved you")))
    {
        assert!(tokio::time::Instant::now() < deadline, "eve was not told");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Approvals: a guest's exec call waits; allowed once, it runs.
    llm.push(Scripted::ToolCalls(vec![("exec".into(), json!({"command": "echo ran-from-the-browser"}))]));
    llm.push(Scripted::Text("done".into()));
    let asking = tokio::spawn({
        let url = daemon.url("/v1/messages");
        async move {
            let body = json!({"chat_id": "bob", "sender": "bob", "content": "please run it"});
            let response = reqwest::Client::new().post(url).bearer_auth(OPS).json(&body).send().await.unwrap();
            response.json::<Value>().await.unwrap()
        }
    });
    tab(&browser, "approvals").await;
    press(&browser, "approvals", "exec", "Allow once").await;
    let answer =
        tokio::time::timeout(Duration::from_secs(20), asking).await.expect("the call was never allowed").unwrap();
    assert_eq!(answer["reply"], "done", "{answer}");
    status_says(&browser, "Allowed exec once").await;

    // Cron: a job created from the form, then paused.
    tab(&browser, "cron").await;
    browser.wait_for("return document.querySelector('#tab-cron form') !== null", Duration::from_secs(10)).await;
    browser.type_into("#tab-cron textarea[name=message]", "Water the plants").await;
    browser.type_into("#tab-cron input[name=to]", "api:garden").await;
    browser.type_into("#tab-cron input[name=value]", "1d").await;
    browser.type_into("#tab-cron input[name=name]", "plants").await;
    browser.run("document.querySelector('#tab-cron form').requestSubmit()").await;
    status_says(&browser, "Job added.").await;
    press(&browser, "cron", "plants", "Pause").await;
    let paused = "return [...document.querySelectorAll('#tab-cron .card.job.paused')].some(c => c.textContent.includes('plants'))";
    browser.wait_for(paused, Duration::from_secs(10)).await;

    // Live: the runs of every session, Eve's on Telegram too.
    fake.push_message(updates::private_text(EVE, "eve", 2, "thank you"));
    tab(&browser, "live").await;
    for session in [format!("telegram:{EVE}"), "api:bob".to_owned()] {
        let script = format!("return document.getElementById('tab-live').textContent.includes({session:?})");
        let Some(_) = browser.try_wait_for(&script, Duration::from_secs(15)).await else {
            panic!(
                "{session} is not live: {}",
                browser.run("return document.getElementById('tab-live').textContent").await
            );
        };
    }

    // Usage: today's bar is drawn.
    tab(&browser, "usage").await;
    let bars = "const bars = [...document.querySelectorAll('#usage-days rect.bar')]; \
                return bars.length > 0 && bars.every(b => Number(b.getAttribute('height')) > 0) ? bars.map(b => b.dataset.day) : null";
    let days = browser.wait_for(bars, Duration::from_secs(10)).await;
    let today = chrono::Utc::now()
        .with_timezone(&"Europe/Berlin".parse::<switchboard::zone::Tz>().unwrap())
        .date_naive()
        .to_string();
    assert!(days.as_array().unwrap().iter().all(|day| day == &json!(today)), "{days}");
    assert!(browser.run("return document.querySelectorAll('#usage-people rect.bar').length").await.as_u64() >= Some(1));
    save(browser.screenshot().await, "console-desktop.png");
    drop(browser);

    // A phone: the console's sections are a menu.
    let phone = Browser::start(360, 780).await;
    sign_in(&phone, &daemon, OPS).await;
    phone.wait_for("return !document.getElementById('open-console').hidden", Duration::from_secs(10)).await;
    phone.run("document.getElementById('open-console').click()").await;
    phone.run("const menu = document.getElementById('console-menu'); menu.value = 'usage'; menu.dispatchEvent(new Event('change'))").await;
    phone.wait_for("return document.querySelector('#usage-days') !== null", Duration::from_secs(10)).await;
    let layout = phone
        .run(
            "const r = (id) => document.getElementById(id).getBoundingClientRect(); \
             return [r('console').width, r('console-menu').width > 0, r('console-tabs').width, document.documentElement.scrollWidth];",
        )
        .await;
    assert!(layout[0].as_f64().unwrap() <= 360.0 && layout[1] == json!(true) && layout[2] == json!(0), "{layout}");
    assert!(layout[3].as_f64().unwrap() <= 360.0, "the page scrolls sideways: {layout}");
    save(phone.screenshot().await, "console-phone.png");
}

/// Signs out the chat token and in with the admin token; the console opens.
async fn sign_in_again_as_owner(browser: &Browser, daemon: &Daemon) {
    browser.run("localStorage.clear(); sessionStorage.clear();").await;
    sign_in(browser, daemon, OPS).await;
    browser.wait_for("return !document.getElementById('open-console').hidden", Duration::from_secs(10)).await;
    browser.click("#open-console").await;
    browser.wait_for("return !document.getElementById('console').hidden", Duration::from_secs(5)).await;
}
