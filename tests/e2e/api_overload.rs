//! The API under overload, against the real daemon: more requests to one chat than its queue
//! keeps, bodies that never finish, and more connections than the limit. Each gets an answer
//! at once (429, 408, 503) instead of a hang or a reset.

use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch};
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_llm::load::LoadModel;

/// Long enough that a request left waiting for it is plainly not "answered at once".
const REPLY_TIMEOUT_SECS: &str = "30";

async fn slow_model_daemon(dir: &std::path::Path, llm: &FakeLlm) -> Daemon {
    let mut daemon = Launch::new(dir, "run", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_CHANNELS__API__REPLY_TIMEOUT_SECS", REPLY_TIMEOUT_SECS)
        .env("SWITCHBOARD_WORKER__DEBOUNCE_MS", "0")
        .spawn();
    daemon.wait_healthy().await;
    daemon
}

/// One request's outcome.
struct Outcome {
    status: u16,
    body: Value,
    retry_after: Option<String>,
    replayed: bool,
    took: Duration,
}

async fn post_keyed(client: &reqwest::Client, daemon: &Daemon, key: &str, body: &Value) -> Outcome {
    let started = Instant::now();
    let response = client
        .post(daemon.url("/v1/messages"))
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap_or_else(|err| panic!("request {key} failed: {err}"));
    let status = response.status().as_u16();
    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap_or_default().to_owned());
    let (retry_after, replayed) = (header("retry-after"), header("idempotent-replayed").is_some());
    let body = response.json().await.unwrap_or(Value::Null);
    Outcome { status, body, retry_after, replayed, took: started.elapsed() }
}

/// `n` requests at once to one chat, each from its own sender (so none merge into another's
/// turn), each with its own Idempotency-Key.
async fn flood_one_chat(daemon: &Daemon, n: usize) -> Vec<(String, Value, Outcome)> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let requests = (0..n).map(|i| {
        let (client, key) = (client.clone(), format!("flood-{n}-{i}"));
        let body = json!({"chat_id": format!("busy-{n}"), "sender": format!("s{i}"), "content": format!("q{i}")});
        async move {
            let outcome = post_keyed(&client, daemon, &key, &body).await;
            (key, body, outcome)
        }
    });
    futures_util::future::join_all(requests).await
}

/// Every request is answered (200) or refused at once (429 with Retry-After), never left
/// waiting for the reply timeout; a retry of a refused one with its key gets the same 429 at
/// once. Returns (answered, refused, slowest refusal).
async fn overflow_is_answered_at_once(n: usize) -> (usize, usize, Duration) {
    let llm = FakeLlm::start_for_load(LoadModel::new(Duration::from_millis(300), None)).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = slow_model_daemon(dir.path(), &llm).await;
    let started = Instant::now();
    let outcomes = flood_one_chat(&daemon, n).await;
    let all_in = started.elapsed();
    let mut refused = Vec::new();
    let mut answered = 0;
    for (key, body, outcome) in &outcomes {
        match outcome.status {
            200 => {
                assert_eq!(outcome.body["reply"], format!("echo: {}", body["content"].as_str().unwrap()));
                answered += 1;
            }
            429 => {
                assert_eq!(outcome.body["error"]["code"], "queue_full", "{}", outcome.body);
                assert_eq!(outcome.body["error"]["type"], "rate_limit_error");
                assert!(outcome.retry_after.as_deref().is_some_and(|s| s.parse::<u64>().is_ok()), "no Retry-After");
                refused.push((key, body, outcome));
            }
            other => panic!("request {key}: {other} after {:?}: {}\n{}", outcome.took, outcome.body, daemon.logs()),
        }
    }
    let slowest_refusal = refused.iter().map(|(_, _, outcome)| outcome.took).max().unwrap_or_default();
    eprintln!(
        "{n} concurrent requests to one chat: {answered} answered, {} got 429 (slowest 429 after {slowest_refusal:?}); all in after {all_in:?}",
        refused.len()
    );
    assert!(!refused.is_empty(), "the queue never overflowed; the test shows nothing");
    assert!(slowest_refusal < Duration::from_secs(3), "a refusal took {slowest_refusal:?}");
    assert!(all_in < Duration::from_secs(15), "requests waited {all_in:?} (reply timeout {REPLY_TIMEOUT_SECS} s)");
    // A retry of a refused request with its key: the same answer, at once.
    let (key, body, first) = refused[0];
    let client = reqwest::Client::new();
    let retry = post_keyed(&client, &daemon, key, body).await;
    assert_eq!((retry.status, &retry.body), (429, &first.body), "the retry got another outcome");
    assert!(retry.replayed, "the retry's answer was not marked as served again");
    assert!(retry.took < Duration::from_secs(1), "the retry took {:?}", retry.took);
    (answered, refused.len(), slowest_refusal)
}

#[tokio::test]
async fn thirty_requests_to_one_chat_are_all_answered_at_once() {
    overflow_is_answered_at_once(30).await;
}

#[tokio::test]
async fn two_hundred_requests_to_one_chat_are_all_answered_at_once() {
    overflow_is_answered_at_once(200).await;
}
