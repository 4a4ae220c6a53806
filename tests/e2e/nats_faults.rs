//! Hostile input and faults on the distributed shape (issue 13), through the real binary on
//! an isolated nats-server: an id too long for a subject, a dead letter too large for the
//! server, and a worker killed while a chat's messages wait.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::{Launch, wait_streams_acked};
use futures_util::StreamExt;
use serde_json::json;
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
use switchboard_channels::subject::Flow;
use switchboard_channels::{Bus, BusExt};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::nats::NatsServer;

/// Lines that say the process lost its NATS connection.
fn disconnects(logs: &str) -> usize {
    logs.lines().filter(|line| line.contains("NATS connection lost")).count()
}

/// The attack as reported: valid JSON with a 4,016-character chat id, published by a raw NATS
/// client (its subject just fits the server's line; the reply's would not). It is dead-lettered
/// with the reason, the worker keeps its connection, and a normal message is answered at once.
#[tokio::test]
async fn an_over_long_chat_id_published_on_nats_is_dead_lettered_and_the_worker_stays_up() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run", "--nats", &nats.url()]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    let chat_id = "x".repeat(4016);
    let body = json!({"v": 1, "id": "hostile-1", "channel": "api", "chat_id": chat_id, "sender": {"id": "u"},
        "content": "hello"});
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let subject = format!("switchboard.in.api.{chat_id}");
    js.publish(subject.clone(), body.to_string().into()).await.unwrap().await.unwrap();

    let started = Instant::now();
    let (status, reply) = daemon.post(json!({"chat_id": "after", "content": "still there?"})).await;
    let answered_in = started.elapsed();
    assert_eq!((status, reply["reply"].as_str()), (200, Some("echo: still there?")), "{reply}\n{}", daemon.logs());
    assert!(answered_in < Duration::from_secs(5), "answered after {answered_in:?}");
    let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
    let dead = bus.dead_letters(Flow::In, 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].subject, subject);
    assert!(dead[0].reason.contains("chat_id") && dead[0].reason.contains("limit is 256 bytes"), "{}", dead[0].reason);
    // Not redelivered: acked (nothing stored), so still one dead letter.
    wait_streams_acked(&nats.url(), &["SWITCHBOARD_IN"]).await;
    assert_eq!(bus.dead_letters(Flow::In, 10).await.unwrap().len(), 1);
    assert_eq!(disconnects(&daemon.logs()), 0, "{}", daemon.logs());
    assert_eq!(llm.requests().len(), 1, "the hostile message reached the model");
}

/// The same id through the API is refused with 400 naming the limit (it used to be accepted and
/// take the worker's connection down, then 503); the API and worker go on answering.
#[tokio::test]
async fn an_over_long_chat_id_or_sender_through_the_api_is_a_400() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run", "--nats", &nats.url()]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    let long = "x".repeat(4016);
    for body in [json!({"chat_id": long, "content": "hi"}), json!({"chat_id": "c", "sender": long, "content": "hi"})] {
        let (status, reply) = daemon.post(body).await;
        assert_eq!(status, 400, "{reply}");
        assert_eq!(reply["error"]["code"], "invalid_body", "{reply}");
        assert!(reply["error"]["message"].as_str().unwrap().contains("the limit is 256 bytes"), "{reply}");
    }
    let at_limit = "y".repeat(256);
    let (status, reply) = daemon.post(json!({"chat_id": at_limit, "sender": at_limit, "content": "fits"})).await;
    assert_eq!((status, reply["reply"].as_str()), (200, Some("echo: fits")), "{reply}");
    assert_eq!(disconnects(&daemon.logs()), 0, "{}", daemon.logs());
}

/// A bad message of a million control characters: its dead letter, JSON-escaped, would be six
/// times the server's 1 MiB limit. It is dead-lettered cut to fit (saying so), acked, and not
/// seen again; the log says what happened.
#[tokio::test]
async fn a_bad_message_whose_dead_letter_exceeds_max_payload_is_dead_lettered_truncated() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()]).llm(&llm.base_url()).spawn();
    agent.wait_for_log("worker started").await;
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let payload = "\u{1}".repeat(1_000_000);
    js.publish("switchboard.in.api.big", payload.into()).await.unwrap().await.unwrap();

    agent.wait_for_log("message dead-lettered").await;
    // Acked (nothing stored), so it cannot come round again.
    wait_streams_acked(&nats.url(), &["SWITCHBOARD_IN"]).await;
    let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
    let dead = bus.dead_letters(Flow::In, 10).await.unwrap();
    assert_eq!(dead.len(), 1, "dead-lettered once, not redelivered");
    assert!(dead[0].truncated && dead[0].original_bytes == Some(1_000_000), "{:?}", dead[0].original_bytes);
    assert!(dead[0].reason.contains("not a valid InboundMessage"), "{}", dead[0].reason);
    let logs = agent.logs();
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains("dead-letter")).collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("truncated=true"), "{}", lines[0]);
}

/// A reply the bus can never take (over the server's max payload) is a permanent failure: the
/// message is dead-lettered with the reason and acked, not run again every few seconds.
#[tokio::test]
async fn a_message_whose_reply_can_never_be_published_is_dead_lettered() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Text("y".repeat(1_200_000)));
    let dir = tempfile::tempdir().unwrap();
    // An answer limit that lets the model write more than NATS carries in one message.
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_AGENT__CONTEXT_WINDOW", "2000000")
        .env("SWITCHBOARD_AGENT__MAX_TOKENS", "400000")
        .spawn();
    agent.wait_for_log("worker started").await;
    let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
    let sender = Sender { id: "u1".into(), name: "U".into(), is_bot: false };
    bus.publish_inbound(&InboundMessage::user("test", "big", sender.clone(), "say a lot")).await.unwrap();
    agent.wait_for_log("message dead-lettered").await;
    // Acked (nothing stored), so it cannot run again.
    wait_streams_acked(&nats.url(), &["SWITCHBOARD_IN"]).await;
    let dead = bus.dead_letters(Flow::In, 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].reason.contains("reply cannot be published"), "{}", dead[0].reason);
    assert!(dead[0].payload.contains("say a lot"), "{}", dead[0].payload);
    assert_eq!(llm.requests().len(), 1, "the turn ran again");
    // The worker goes on: the next message of the chat is answered (from another sender: the
    // long reply used up the first one's monthly token allowance).
    let mut replies = bus.outbound("test").await.unwrap();
    let other = Sender { id: "u2".into(), ..sender };
    bus.publish_inbound(&InboundMessage::user("test", "big", other, "short now")).await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(10), replies.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(delivery.decode::<OutboundMessage>().unwrap().content, "echo: short now");
    assert_eq!(disconnects(&agent.logs()), 0, "{}", agent.logs());
}

/// The timestamp that starts a log line.
fn log_time(line: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    line.split_whitespace().next()?.parse().ok()
}

fn started_line(logs: &str) -> String {
    logs.lines().find(|line| line.contains("worker started")).unwrap_or_default().to_owned()
}

const SESSIONS: usize = 20;
const PER_SESSION: usize = 5;

/// The fault as reported: every chat's messages published back to back, one worker, killed
/// with SIGKILL while turns run, started again. Every chat is answered in order and each
/// message exactly once; the messages the dead worker held come back within a few seconds.
#[tokio::test]
async fn a_chat_keeps_its_order_across_a_worker_crash() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    for s in 0..SESSIONS {
        for m in 0..PER_SESSION {
            let text = format!("s{s:02}-m{m}");
            llm.push_when(
                &text,
                Scripted::Delay(Duration::from_millis(400), Box::new(Scripted::Text(format!("echo: {text}")))),
            );
        }
    }
    let dir = tempfile::tempdir().unwrap();
    // Each message its own turn, as in the report: five people write in each chat (one
    // person's messages back to back would be one burst, answered together).
    let launch = |name| {
        Launch::new(dir.path(), name, &["agent", "--nats", &nats.url()])
            .llm(&llm.base_url())
            // One sender writes 100 messages at once: the per-sender rate limit is not under test.
            .env("SWITCHBOARD_RATE_LIMITS__GUEST", "0")
            .env("SWITCHBOARD_RATE_LIMITS__USER", "0")
    };
    let mut first = launch("agent-1").spawn();
    first.wait_for_log("worker started").await;
    let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
    let mut replies = bus.outbound("test").await.unwrap();
    for s in 0..SESSIONS {
        for m in 0..PER_SESSION {
            let sender = Sender { id: format!("u{m}"), name: format!("U{m}"), is_bot: false };
            let msg = InboundMessage::user("test", &format!("chat-{s:02}"), sender, &format!("s{s:02}-m{m}"));
            bus.publish_inbound(&msg).await.unwrap();
        }
    }
    llm.wait_for_requests(30, Duration::from_secs(30)).await;
    first.kill_hard();
    let killed_at = Instant::now();
    let second = launch("agent-2").spawn();

    let mut answered: HashMap<String, Vec<usize>> = HashMap::new();
    let mut total = 0;
    while total < SESSIONS * PER_SESSION {
        let delivery = tokio::time::timeout(Duration::from_secs(60), replies.next())
            .await
            .unwrap_or_else(|_| panic!("{total} replies, then none: {answered:?}\n{}", second.logs()))
            .unwrap()
            .unwrap();
        let reply: OutboundMessage = delivery.decode().unwrap();
        delivery.ack().await.unwrap();
        let text = reply.content.strip_prefix("echo: ").unwrap_or(&reply.content).to_owned();
        let m: usize = text.rsplit_once("-m").map(|(_, m)| m.parse().unwrap()).unwrap();
        answered.entry(reply.chat_id).or_default().push(m);
        total += 1;
    }
    let all_done = killed_at.elapsed();
    // Nothing more comes: no message was answered twice.
    if let Ok(Some(Ok(extra))) = tokio::time::timeout(Duration::from_secs(8), replies.next()).await {
        panic!("extra reply {:?}", extra.decode::<OutboundMessage>());
    }
    let expected: Vec<usize> = (0..PER_SESSION).collect();
    let out_of_order: Vec<_> = answered.iter().filter(|(_, got)| **got != expected).collect();
    assert!(out_of_order.is_empty(), "out of order or duplicated: {out_of_order:?}");
    assert_eq!(answered.len(), SESSIONS);
    let logs = second.logs();
    let resumed = logs.lines().filter(|line| line.contains("resuming a run")).count();
    assert!(resumed > 0, "no run was in flight at the crash:\n{logs}");
    let first_resumed = logs.lines().find(|line| line.contains("resuming a run")).and_then(log_time);
    let back_after = first_resumed.zip(log_time(&started_line(&logs))).map(|(r, s)| r - s);
    eprintln!(
        "crash order: {resumed} runs resumed, the first {back_after:?} after the new worker started; all {total} \
         answered {all_done:?} after the kill"
    );
}
