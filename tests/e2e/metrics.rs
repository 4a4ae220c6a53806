//! The Prometheus endpoint as an operator scrapes it: runs by agent and channel, latencies,
//! tokens, what a chat platform refused or rate-limited, dead letters and queue depths.

use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::fake_telegram::{Failure, FakeTelegram, updates};
use switchboard_testkit::nats::NatsServer;

use crate::support::{Launch, free_port};

const ALICE: i64 = 111;

/// The value of the sample `name` whose labels include all of `labels`.
pub(crate) fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
        let matches = metric == name && labels.iter().all(|(key, value)| rest.contains(&format!("{key}=\"{value}\"")));
        matches.then(|| value.parse().ok()).flatten()
    })
}

/// The endpoint's text; waits for it to listen (it starts a moment after the API's health).
async fn scrape(port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let response = loop {
        match reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await {
            Ok(response) => break response,
            Err(err) if err.is_connect() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("scraping :{port}: {err}"),
        }
    };
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// Scrapes until `ready` holds for the text (counters move a moment after the chat sees the
/// reply), or fails with the last text.
pub(crate) async fn scrape_until(port: u16, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = scrape(port).await;
        if ready(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "the metrics never got there:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One turn answered, one that fails at the model; Telegram says "slow down" once and then
/// refuses the failure notice: each shows in its counter.
#[tokio::test]
async fn runs_latency_tokens_send_errors_and_429s_are_counted() {
    let (llm, fake) = (FakeLlm::start().await, FakeTelegram::start().await);
    llm.push(Scripted::Text("first answer".into()));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut daemon = Launch::new(dir.path(), "metrics", &["run"])
        .llm(&llm.base_url())
        .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__API_URL", &fake.api_url())
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__POLL_TIMEOUT_SECS", "1")
        .env("SWITCHBOARD_CHANNELS__TELEGRAM__ALLOW_FROM", &format!("[\"{ALICE}\"]"))
        .env("SWITCHBOARD_METRICS__LISTEN", &format!("127.0.0.1:{port}"))
        .spawn();
    daemon.wait_healthy().await;
    let before = scrape(port).await;
    assert_eq!(sample(&before, "switchboard_runs_total", &[]), None, "nothing ran yet:\n{before}");

    fake.fail_next("sendMessage", Failure::TooManyRequests { retry_after: 1 });
    fake.push_message(updates::private_text(ALICE, "alice", 1, "hi"));
    let sent = fake.wait_for_calls("sendMessage", 2, Duration::from_secs(20)).await;
    assert_eq!(sent.len(), 2, "the 429, then the reply");

    llm.push(Scripted::Status {
        code: 400,
        retry_after: None,
        body: json!({"error": {"message": "Invalid value for temperature", "type": "invalid_request_error"}}),
    });
    fake.fail_next("sendMessage", Failure::Status { code: 400, description: "Bad Request: chat not found".into() });
    fake.push_message(updates::private_text(ALICE, "alice", 2, "again"));

    let telegram = [("channel", "telegram")];
    let text = scrape_until(port, |text| sample(text, "switchboard_send_errors_total", &telegram) == Some(1.0)).await;
    let runs = |stage| sample(&text, "switchboard_runs_total", &[("channel", "telegram"), ("stage", stage)]);
    assert_eq!((runs("started"), runs("completed"), runs("failed")), (Some(2.0), Some(1.0), Some(1.0)), "{text}");
    assert_eq!(sample(&text, "switchboard_run_duration_seconds_count", &telegram), Some(2.0), "{text}");
    assert_eq!(sample(&text, "switchboard_rate_limited_total", &telegram), Some(1.0), "{text}");
    let calls = |result| sample(&text, "switchboard_model_call_duration_seconds_count", &[("result", result)]);
    assert_eq!((calls("ok"), calls("error")), (Some(1.0), Some(1.0)), "{text}");
    let input = sample(&text, "switchboard_tokens_total", &[("kind", "input")]).unwrap_or_default();
    assert!(input > 0.0, "{text}");
    assert!(sample(&text, "switchboard_worker_sessions", &[]).is_some(), "active sessions:\n{text}");
    assert!(text.trim_end().ends_with("# EOF"), "OpenMetrics ends with # EOF");
}

/// On NATS the endpoint reads the queue depths from the server, and a dead letter is counted.
#[tokio::test]
async fn on_nats_queue_depths_and_dead_letters_are_reported() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut daemon = Launch::new(dir.path(), "metrics-nats", &["run", "--nats", &nats.url()])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_METRICS__LISTEN", &format!("127.0.0.1:{port}"))
        .spawn();
    daemon.wait_healthy().await;
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    js.publish("switchboard.in.api.junk", "{not json".into()).await.unwrap().await.unwrap();
    let (status, _) = daemon.post(json!({"chat_id": "after", "content": "still here?"})).await;
    assert_eq!(status, 200);

    let inbound = [("flow", "inbound")];
    // The bad message is acked just after its dead letter is stored.
    let text = scrape_until(port, |text| {
        sample(text, "switchboard_dead_letters_total", &inbound) == Some(1.0)
            && sample(text, "switchboard_bus_inbound_stored", &[]) == Some(0.0)
    })
    .await;
    assert_eq!(sample(&text, "switchboard_bus_outbound_stored", &[]), Some(0.0), "{text}");
    let api = [("channel", "api"), ("stage", "completed")];
    assert_eq!(sample(&text, "switchboard_runs_total", &api), Some(1.0), "{text}");

    // With the server gone the endpoint still answers, without the server's figures.
    drop(nats);
    let text = scrape(port).await;
    assert_eq!(sample(&text, "switchboard_bus_inbound_stored", &[]), None, "{text}");
    assert!(sample(&text, "switchboard_runs_total", &api).is_some(), "{text}");
}
