//! The API under overload, against the real daemon: more requests to one chat than its queue
//! keeps, bodies that never finish, and more connections than the limit. Each gets an answer
//! at once (429, 408, 503) instead of a hang or a reset.

use std::time::{Duration, Instant};

use crate::api_limits::{addr, raise_own_descriptor_limit, until_closed};
use crate::support::{Daemon, Launch};
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::FakeLlm;
use switchboard_testkit::fake_llm::load::LoadModel;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

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

fn daemon_env<'a>(dir: &'a std::path::Path, llm: &FakeLlm, env: &[(&str, &str)]) -> Launch<'a> {
    let mut launch = Launch::new(dir, "run", &["run"]).llm(&llm.base_url());
    for (key, value) in env {
        launch = launch.env(key, value);
    }
    launch
}

/// A head declaring `declared` body bytes, and the first 10 of them.
fn stalled_request(declared: usize) -> Vec<u8> {
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    );
    [head.as_bytes(), b"{\"chat_id\""].concat()
}

/// 520 sockets (past the default limit of 512, no token) send a head and part of a body: a
/// normal request still gets through at once, and every stalled one is answered 408 and
/// closed within the body timeout.
#[tokio::test]
async fn stalled_bodies_are_answered_408_and_do_not_lock_clients_out() {
    raise_own_descriptor_limit();
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env =
        [("SWITCHBOARD_CHANNELS__API__BODY_TIMEOUT_SECS", "4"), ("SWITCHBOARD_CHANNELS__API__IDLE_TIMEOUT_SECS", "60")];
    let mut daemon = daemon_env(dir.path(), &llm, &env).spawn();
    daemon.wait_healthy().await;
    let started = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..520 {
        let mut socket = TcpStream::connect(addr(&daemon)).await.unwrap();
        socket.write_all(&stalled_request(1000)).await.unwrap();
        stalled.push(socket);
    }
    let opened = started.elapsed();
    let asked = Instant::now();
    let (status, body) = daemon.post(json!({"chat_id": "after", "content": "still here"})).await;
    let took = asked.elapsed();
    assert_eq!((status, body["reply"].as_str()), (200, Some("echo: still here")), "{body}\n{}", daemon.logs());
    assert!(took < Duration::from_secs(2), "the request waited {took:?} for a stalled one to time out");
    let (mut answered_408, mut refused) = (0, 0);
    for socket in &mut stalled {
        let answer = until_closed(socket, Duration::from_secs(8)).await.expect("a stalled socket stayed open");
        if answer.starts_with("HTTP/1.1 408") {
            assert!(answer.contains("body_timeout"), "{answer}");
            answered_408 += 1;
        } else {
            // Made room for a later one before the daemon read its head: refused, not cut.
            assert!(answer.starts_with("HTTP/1.1 503"), "a stalled socket got no answer: {answer:?}");
            refused += 1;
        }
    }
    // The nine sockets past the limit (eight and the normal request) make room by closing
    // the oldest slow bodies, each with a 408; a 503 is only for a head still unread.
    assert!(refused <= 3, "{refused} stalled sockets were refused instead of answered 408");
    let all_closed = started.elapsed();
    eprintln!(
        "520 body-stalled sockets (opened in {opened:?}): a normal request answered in {took:?}; \
         {answered_408} answered 408, {refused} 503, the last closed {all_closed:?} after the first was opened"
    );
    assert!(all_closed <= opened + Duration::from_secs(4 + 2), "closed long after the body timeout: {all_closed:?}");
}

/// A declared 10 MB body of which 10 bytes come: 408 when the body timeout passes.
#[tokio::test]
async fn a_declared_body_over_the_limit_is_413_at_once_and_one_that_never_comes_408() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env =
        [("SWITCHBOARD_CHANNELS__API__BODY_TIMEOUT_SECS", "2"), ("SWITCHBOARD_CHANNELS__API__IDLE_TIMEOUT_SECS", "60")];
    let mut daemon = daemon_env(dir.path(), &llm, &env).spawn();
    daemon.wait_healthy().await;
    // Over the body limit (64 KiB): refused before any of it is read.
    let mut socket = TcpStream::connect(addr(&daemon)).await.unwrap();
    let started = Instant::now();
    socket.write_all(&stalled_request(10 * 1024 * 1024)).await.unwrap();
    let answer = until_closed(&mut socket, Duration::from_secs(10)).await.expect("the connection stayed open");
    let took = started.elapsed();
    eprintln!("a declared 10 MB body with 10 bytes sent: answered after {took:?}");
    assert!(answer.starts_with("HTTP/1.1 413") && answer.contains("body_too_large"), "{answer:?}");
    assert!(took < Duration::from_secs(1), "answered after {took:?}");
    // Within the limit, but never all sent: 408 at the body timeout.
    let mut socket = TcpStream::connect(addr(&daemon)).await.unwrap();
    let started = Instant::now();
    socket.write_all(&stalled_request(60_000)).await.unwrap();
    let answer = until_closed(&mut socket, Duration::from_secs(10)).await.expect("the connection stayed open");
    let took = started.elapsed();
    eprintln!("a declared 60 kB body with 10 bytes sent: answered after {took:?}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(took >= Duration::from_millis(1900) && took <= Duration::from_secs(4), "answered after {took:?}");
    assert_eq!(llm.requests().len(), 0);
}

/// One raw request for chat `c{i}` on its own connection: what came back before the server
/// closed it (empty for a reset or a bare close), and when, from `started`.
async fn raw_request(address: String, i: usize, started: Instant) -> (String, Duration) {
    let body = json!({"chat_id": format!("c{i}"), "content": format!("q{i}")}).to_string();
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut socket = TcpStream::connect(&address).await.unwrap();
    socket.write_all(request.as_bytes()).await.ok();
    let answer = until_closed(&mut socket, Duration::from_secs(30)).await.unwrap_or_default();
    (answer, started.elapsed())
}

/// (200s, 503s, the last 503's time); panics on anything else, a reset above all.
fn tally(answers: &[(String, Duration)], daemon: &Daemon) -> (usize, usize, Duration) {
    let (mut ok, mut refused, mut slowest_refusal) = (0, 0, Duration::ZERO);
    for (answer, at) in answers {
        if answer.starts_with("HTTP/1.1 200") {
            ok += 1;
        } else if answer.starts_with("HTTP/1.1 503") {
            assert!(answer.to_ascii_lowercase().contains("retry-after: 1"), "{answer}");
            assert!(answer.contains("too_many_connections"), "{answer}");
            refused += 1;
            slowest_refusal = slowest_refusal.max(*at);
        } else {
            panic!("a request got no HTTP answer (a reset or a bare close): {answer:?}\n{}", daemon.logs());
        }
    }
    (ok, refused, slowest_refusal)
}

/// `max_connections = 50` and requests waiting for a slow model: 150 at once, then 100 more
/// while 50 are in progress. Every one gets an HTTP answer, those past the limit a 503 with
/// Retry-After at once, none a reset.
#[tokio::test]
async fn past_the_connection_limit_clients_get_503_with_retry_after() {
    let llm = FakeLlm::start_for_load(LoadModel::new(Duration::from_secs(2), None)).await;
    let dir = tempfile::tempdir().unwrap();
    let env = [("SWITCHBOARD_CHANNELS__API__MAX_CONNECTIONS", "50"), ("SWITCHBOARD_WORKER__MAX_CONCURRENT_RUNS", "64")];
    let mut daemon = daemon_env(dir.path(), &llm, &env).spawn();
    daemon.wait_healthy().await;
    let address = addr(&daemon);
    // All at once: the newest connections make room by closing idle ones, whose requests,
    // if already on their way, get the 503 too.
    let started = Instant::now();
    let answers = futures_util::future::join_all((0..150).map(|i| raw_request(address.clone(), i, started))).await;
    let (ok, refused, slowest) = tally(&answers, &daemon);
    eprintln!(
        "150 concurrent requests, max_connections 50: {ok} answered 200, {refused} got 503 (the last after {slowest:?})"
    );
    assert!(refused >= 100 && ok >= 1, "{ok} served, {refused} refused");
    assert!(slowest < Duration::from_secs(2), "a refusal took {slowest:?}");
    // Fifty requests in progress fill the limit; a hundred more are refused by the accept loop.
    let started = Instant::now();
    let busy: Vec<_> = (0..50).map(|i| tokio::spawn(raw_request(address.clone(), 1000 + i, started))).collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let more = Instant::now();
    let answers = futures_util::future::join_all((0..100).map(|i| raw_request(address.clone(), 2000 + i, more))).await;
    let (ok, refused, slowest) = tally(&answers, &daemon);
    eprintln!(
        "100 more while 50 requests are in progress: {ok} answered 200, {refused} got 503 (the last after {slowest:?})"
    );
    assert_eq!((ok, refused), (0, 100));
    assert!(slowest < Duration::from_secs(1), "a refusal took {slowest:?}");
    let mut busy_answers = Vec::new();
    for request in busy {
        busy_answers.push(request.await.unwrap());
    }
    assert_eq!(tally(&busy_answers, &daemon).0, 50, "a request in progress was cut");
}

/// The OpenAI-compatible endpoint says the same: a plain completion whose message the chat's
/// queue cannot keep is a 429 at once, a streamed one ends with a `queue_full` error event.
#[tokio::test]
async fn completions_past_a_full_queue_are_refused_at_once() {
    let llm = FakeLlm::start_for_load(LoadModel::new(Duration::from_secs(2), None)).await;
    let dir = tempfile::tempdir().unwrap();
    let env = [("SWITCHBOARD_WORKER__MAX_QUEUE_DEPTH", "1"), ("SWITCHBOARD_CHANNELS__API__REPLY_TIMEOUT_SECS", "30")];
    let mut daemon = daemon_env(dir.path(), &llm, &env).spawn();
    daemon.wait_healthy().await;
    // Warm: the first turn of a new daemon takes a while to start.
    assert_eq!(daemon.post(json!({"chat_id": "warm-up", "content": "hi"})).await.0, 200);
    let message = |sender: &str| {
        let url = daemon.url("/v1/messages");
        let body = json!({"chat_id": "c", "sender": sender, "content": format!("from {sender}")});
        tokio::spawn(
            async move { reqwest::Client::new().post(url).json(&body).send().await.unwrap().status().as_u16() },
        )
    };
    // One turn runs, one waits: the queue is full.
    let running = message("a");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = message("b");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = reqwest::Client::new();
    let completion = |stream: bool| {
        let body =
            json!({"model": "", "user": "c", "stream": stream, "messages": [{"role": "user", "content": "and me?"}]});
        client.post(daemon.url("/v1/chat/completions")).json(&body).send()
    };
    let started = Instant::now();
    let plain = completion(false).await.unwrap();
    let (status, retry_after) = (plain.status().as_u16(), plain.headers().contains_key("retry-after"));
    let plain: Value = plain.json().await.unwrap();
    let streamed = completion(true).await.unwrap().text().await.unwrap();
    let took = started.elapsed();
    assert_eq!((status, retry_after), (429, true), "{plain}");
    assert_eq!(plain["error"]["code"], "queue_full", "{plain}");
    assert!(streamed.contains("\"code\":\"queue_full\"") && streamed.contains("[DONE]"), "{streamed}");
    assert!(took < Duration::from_secs(1), "the refusals took {took:?}");
    assert_eq!((running.await.unwrap(), waiting.await.unwrap()), (200, 200));
}

/// In `interrupt` mode a newer message stops the running turn and drops the waiting ones: each
/// of their clients is told at once, none waits for the reply timeout.
#[tokio::test]
async fn in_interrupt_mode_replaced_requests_are_answered_at_once() {
    let llm = FakeLlm::start_for_load(LoadModel::new(Duration::from_secs(2), None)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_CHANNELS__API__REPLY_TIMEOUT_SECS", REPLY_TIMEOUT_SECS)
        .env("SWITCHBOARD_WORKER__DEBOUNCE_MS", "0")
        .env("SWITCHBOARD_WORKER__QUEUE_MODE", "interrupt")
        .spawn();
    daemon.wait_healthy().await;
    let client = reqwest::Client::new();
    let send = |sender: &str| {
        let body = json!({"chat_id": "hasty", "sender": sender, "content": format!("from {sender}")});
        let (client, daemon, key) = (client.clone(), &daemon, format!("interrupt-{sender}"));
        async move { post_keyed(&client, daemon, &key, &body).await }
    };
    let first = send("a");
    let second = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        send("b").await
    };
    let third = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        send("c").await
    };
    let (first, second, third) = tokio::join!(first, second, third);
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(first.body["reply"].as_str().unwrap_or_default().starts_with("Stopped before answering"), "{}", first.body);
    assert!(first.took < Duration::from_secs(2), "the stopped request waited {:?}", first.took);
    let second_told = match second.status {
        429 => second.body["error"]["code"] == "queue_full",
        200 => second.body["reply"].as_str().unwrap_or_default().starts_with("Stopped before answering"),
        _ => false,
    };
    assert!(second_told, "{}: {}", second.status, second.body);
    assert!(second.took < Duration::from_secs(2), "the replaced request waited {:?}", second.took);
    assert_eq!((third.status, third.body["reply"].as_str()), (200, Some("echo: from c")), "{}", third.body);
}
