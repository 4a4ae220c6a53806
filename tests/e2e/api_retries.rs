//! Client retries against the real daemon: with an `Idempotency-Key`, a retry never runs a
//! second turn and gets the first reply, through a NATS outage, while the first request is
//! still running, after the reply went out, and after a restart.

use std::time::{Duration, Instant};

use crate::support::{Daemon, Launch};
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::nats::NatsServer;

/// Turns the fake model ran for the message whose content ends with `marker`.
fn turns_for(llm: &FakeLlm, marker: &str) -> usize {
    llm.requests()
        .iter()
        .filter(|request| {
            let messages = request["messages"].as_array().cloned().unwrap_or_default();
            let last_user = messages.iter().rev().find(|m| m["role"] == "user");
            last_user.and_then(|m| m["content"].as_str()).is_some_and(|text| text.ends_with(marker))
        })
        .count()
}

async fn post_keyed(client: &reqwest::Client, daemon: &Daemon, key: &str, body: &Value) -> (u16, Value, bool) {
    let response = client
        .post(daemon.url("/v1/messages"))
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .unwrap_or_else(|err| panic!("request failed: {err}\n{}", daemon.logs()));
    let status = response.status().as_u16();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    (status, response.json().await.unwrap_or(Value::Null), replayed)
}

/// A client that retries on 5xx and on connection errors until it has a reply.
async fn retrying_client(url: String, key: String, body: Value) -> (Value, u32) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut failures = 0;
    loop {
        assert!(Instant::now() < deadline, "no reply for {key} within 120 s");
        let sent = client.post(&url).header("Idempotency-Key", &key).json(&body).send().await;
        match sent {
            Ok(response) if response.status() == 200 => return (response.json().await.unwrap(), failures),
            Ok(response) => {
                let status = response.status();
                assert!(status.is_server_error(), "{status}: {}", response.text().await.unwrap_or_default());
            }
            Err(_) => {}
        }
        failures += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A 5 s outage shorter than the reply timeout only delays the replies: no client sees a 5xx.
#[tokio::test]
async fn a_nats_outage_shorter_than_the_reply_timeout_only_delays_replies() {
    let retried = nats_outage_with_retrying_clients(20).await;
    assert_eq!(retried, 0, "clients saw a 5xx although the outage was shorter than the reply timeout");
}

/// A 5 s outage longer than the reply timeout: clients get 503 (or give up) and retry with
/// their key; still one turn per message and every client gets its reply.
#[tokio::test]
async fn a_nats_outage_with_clients_retrying_on_5xx_runs_one_turn_per_message() {
    let retried = nats_outage_with_retrying_clients(2).await;
    assert!(retried >= 10, "only {retried} clients retried: the outage did not reach them");
}

/// Sends 100 keyed messages over 4 s through a 5 s NATS outage, every client retrying on 5xx
/// until it has a reply; checks each reply and that each message ran exactly one turn.
/// Returns how many clients had to retry.
async fn nats_outage_with_retrying_clients(reply_timeout_secs: u64) -> u32 {
    let mut nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run", "--nats", &nats.url()])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_CHANNELS__API__REPLY_TIMEOUT_SECS", &reply_timeout_secs.to_string())
        .spawn();
    daemon.wait_healthy().await;
    const MESSAGES: usize = 100;
    let mut clients = Vec::new();
    let started = Instant::now();
    // Messages go out over 4 s; the outage starts after 1 s and lasts 5 s.
    let outage = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        nats.kill().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        nats.restart().await;
        nats
    });
    for n in 0..MESSAGES {
        let body = json!({"chat_id": format!("chat-{n}"), "content": format!("message <{n}>")});
        let key = format!("key-{n}-{}", uuid::Uuid::now_v7());
        clients.push(tokio::spawn(retrying_client(daemon.url("/v1/messages"), key, body)));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let _nats = outage.await.unwrap();
    let mut retried = 0;
    for (n, client) in clients.into_iter().enumerate() {
        let (body, failures) = client.await.unwrap();
        assert_eq!(body["reply"], format!("echo: message <{n}>"), "{body}");
        retried += u32::from(failures > 0);
    }
    let mut duplicated = Vec::new();
    for n in 0..MESSAGES {
        let turns = turns_for(&llm, &format!("<{n}>"));
        if turns != 1 {
            duplicated.push((n, turns));
        }
    }
    eprintln!(
        "{MESSAGES} messages answered in {:?}; {retried} clients retried after a 5xx; turns != 1: {duplicated:?}",
        started.elapsed()
    );
    assert!(duplicated.is_empty(), "messages whose turn count is not 1: {duplicated:?}\n{}", daemon.logs());
    retried
}

#[tokio::test]
async fn a_retry_while_the_first_runs_waits_for_the_same_reply_and_a_later_one_gets_it_again() {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Delay(Duration::from_secs(2), Box::new(Scripted::Text("the only answer".into()))));
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    let client = reqwest::Client::new();
    let body = json!({"chat_id": "c", "content": "once <1>"});
    let first = {
        let (client, url, body) = (client.clone(), daemon.url("/v1/messages"), body.clone());
        tokio::spawn(async move {
            let response = client.post(url).header("Idempotency-Key", "k-1").json(&body).send().await.unwrap();
            response.json::<Value>().await.unwrap()
        })
    };
    llm.wait_for_requests(1, Duration::from_secs(10)).await;
    // The first one is still running: the retry waits for it.
    let (status, retry, replayed) = post_keyed(&client, &daemon, "k-1", &body).await;
    assert_eq!((status, replayed), (200, false), "{retry}");
    let first = first.await.unwrap();
    assert_eq!(first["reply"], "the only answer");
    assert_eq!(retry["reply_id"], first["reply_id"]);
    assert_eq!(retry["message_id"], first["message_id"]);
    // After the reply went out, a retry gets it again, marked as a replay.
    let (status, again, replayed) = post_keyed(&client, &daemon, "k-1", &body).await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again["reply"], "the only answer");
    assert_eq!(turns_for(&llm, "<1>"), 1);
    // The same key with other content is a client error; another key is another message.
    let other = json!({"chat_id": "c", "content": "something else <2>"});
    let (status, error, _) = post_keyed(&client, &daemon, "k-1", &other).await;
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["error"]["code"], "idempotency_key_reused");
    let (status, fresh, _) = post_keyed(&client, &daemon, "k-2", &other).await;
    assert_eq!((status, fresh["reply"].as_str()), (200, Some("echo: something else <2>")), "{fresh}");
    // The key belongs to one sender: another sender's identical key is their own message.
    let theirs = json!({"chat_id": "c", "content": "once <1>", "sender": "someone-else"});
    let (status, theirs, replayed) = post_keyed(&client, &daemon, "k-1", &theirs).await;
    assert_eq!((status, replayed), (200, false), "{theirs}");
    assert_ne!(theirs["message_id"], first["message_id"]);
    assert_eq!(turns_for(&llm, "<1>"), 2);
    // A key that cannot be a header value of ours is refused before anything runs.
    let (status, error, _) = post_keyed(&client, &daemon, &"k".repeat(300), &body).await;
    assert_eq!(status, 400, "{error}");
    daemon.signal("TERM");
    daemon.wait_exit(Duration::from_secs(20)).await;
}

#[tokio::test]
async fn a_retry_after_a_restart_gets_the_stored_reply_without_a_second_turn() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let launch = || Launch::new(dir.path(), "run", &["run"]).llm(&llm.base_url());
    let mut daemon = launch().spawn();
    daemon.wait_healthy().await;
    let client = reqwest::Client::new();
    let body = json!({"chat_id": "c", "content": "remember me <7>"});
    let (status, first, _) = post_keyed(&client, &daemon, "restart-key", &body).await;
    assert_eq!(status, 200, "{first}");
    // A clean stop: every message is acked, so the reply is nowhere but in the store.
    daemon.signal("TERM");
    daemon.wait_exit(Duration::from_secs(20)).await;
    let mut daemon = launch().spawn();
    daemon.wait_healthy().await;
    let started = Instant::now();
    let (status, again, _) = post_keyed(&client, &daemon, "restart-key", &body).await;
    assert_eq!(status, 200, "{again}\n{}", daemon.logs());
    assert_eq!(again["reply"], first["reply"]);
    assert_eq!(again["message_id"], first["message_id"]);
    assert_eq!(again["run_id"], first["run_id"]);
    assert!(started.elapsed() < Duration::from_secs(5), "the replay took {:?}", started.elapsed());
    assert_eq!(turns_for(&llm, "<7>"), 1, "{}", daemon.logs());
    // The worker found the finished run and sent its stored reply again.
    assert!(daemon.logs().contains("message already answered"), "{}", daemon.logs());
}
