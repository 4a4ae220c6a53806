//! The distributed shape as issue 19 measured it: three `switchboard agent` workers, each with
//! its own local directory, on one NATS and one PostgreSQL store, chats' messages published
//! back to back as the adapters do. Every chat is answered in order, one turn at a time, each
//! turn seeing the ones before it whichever worker ran them, and the chats spread over the
//! workers. And one agent on several hosts: what one worker's turn writes in the shared
//! workspace the next turn reads on another, and a worker whose workspace is not the shared one
//! refuses to start.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};
use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
use switchboard_channels::{Bus, BusExt};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::nats::NatsServer;
use switchboard_testkit::postgres::TempDatabase;

use crate::support::{Daemon, Launch};

const SESSIONS: usize = 20;
const PER_SESSION: usize = 5;
const WORKERS: usize = 3;

fn text(session: usize, message: usize) -> String {
    format!("s{session:02}-m{message}")
}

/// The texts of a model request's messages, oldest first.
fn contents(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

/// Each turn's request must carry every earlier turn of its chat, question and answer: the
/// previous turn was finished and stored before this one started, on whatever worker.
fn turns_missing_history(requests: &[Value]) -> Vec<String> {
    let mut missing = Vec::new();
    for request in requests {
        let seen = contents(request);
        let Some((session, message)) = seen.iter().rev().find_map(|c| parse(c)) else { continue };
        for earlier in 0..message {
            let (question, answer) = (text(session, earlier), format!("echo: {}", text(session, earlier)));
            if !seen.contains(&question) || !seen.contains(&answer) {
                missing.push(format!("{} lacks {question}", text(session, message)));
            }
        }
    }
    missing
}

/// `sNN-mK` → (NN, K).
fn parse(content: &str) -> Option<(usize, usize)> {
    let rest = content.strip_prefix('s')?;
    let (session, message) = rest.split_once("-m")?;
    Some((session.parse().ok()?, message.parse().ok()?))
}

/// How many distinct chats each worker ran a turn of, from its log.
fn sessions_per_worker(workers: &[Daemon]) -> Vec<usize> {
    workers
        .iter()
        .map(|worker| {
            let logs = worker.logs();
            (0..SESSIONS).filter(|s| logs.contains(&format!("session=test:chat-{s:02}"))).count()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_with_their_own_directories_keep_every_chat_in_order() {
    let nats = NatsServer::start().await;
    let database = TempDatabase::create();
    let llm = FakeLlm::start().await;
    for s in 0..SESSIONS {
        for m in 0..PER_SESSION {
            let reply = Scripted::Text(format!("echo: {}", text(s, m)));
            llm.push_when(&text(s, m), Scripted::Delay(Duration::from_millis(150), Box::new(reply)));
        }
    }
    let dirs: Vec<_> = (0..WORKERS).map(|_| tempfile::tempdir().unwrap()).collect();
    let shared = tempfile::tempdir().unwrap();
    let workspace = shared.path().display().to_string();
    let mut workers: Vec<Daemon> = dirs
        .iter()
        .enumerate()
        .map(|(n, dir)| {
            Launch::new(dir.path(), ["worker-a", "worker-b", "worker-c"][n], &["agent", "--nats", &nats.url()])
                .llm(&llm.base_url())
                .env("SWITCHBOARD_STORE__DATABASE_URL", database.url())
                .env("SWITCHBOARD_AGENT__WORKSPACE", &workspace)
                // Each message its own turn: no debounce, and each of a chat's messages from
                // another person (one person's messages at once would be one burst, one turn).
                .env("SWITCHBOARD_WORKER__DEBOUNCE_MS", "0")
                .env("SWITCHBOARD_RATE_LIMITS__GUEST", "0")
                .env("SWITCHBOARD_RATE_LIMITS__USER", "0")
                .env("SWITCHBOARD_BUDGETS__GUEST", "0")
                .spawn()
        })
        .collect();
    for worker in &mut workers {
        worker.wait_for_log("worker started").await;
    }
    let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
    let mut replies = bus.outbound("test").await.unwrap();
    let started = Instant::now();
    // A chat's messages one after the other, so its next message is free for another worker
    // while the first still runs.
    for s in 0..SESSIONS {
        for m in 0..PER_SESSION {
            let sender = Sender { id: format!("u{m}"), name: format!("U{m}"), is_bot: false };
            let msg = InboundMessage::user("test", &format!("chat-{s:02}"), sender, &text(s, m));
            bus.publish_inbound(&msg).await.unwrap();
        }
    }

    let mut answered: HashMap<String, Vec<usize>> = HashMap::new();
    for total in 0..SESSIONS * PER_SESSION {
        let delivery = tokio::time::timeout(Duration::from_secs(60), replies.next())
            .await
            .unwrap_or_else(|_| panic!("{total} replies, then none: {answered:?}"))
            .unwrap()
            .unwrap();
        let reply: OutboundMessage = delivery.decode().unwrap();
        delivery.ack().await.unwrap();
        let (_, m) = parse(reply.content.trim_start_matches("echo: ")).expect("an echo");
        answered.entry(reply.chat_id).or_default().push(m);
    }
    let took = started.elapsed();
    if let Ok(Some(Ok(extra))) = tokio::time::timeout(Duration::from_secs(3), replies.next()).await {
        panic!("a message was answered twice: {:?}", extra.decode::<OutboundMessage>());
    }
    let expected: Vec<usize> = (0..PER_SESSION).collect();
    let out_of_order: Vec<_> = answered.iter().filter(|(_, got)| **got != expected).collect();
    assert!(out_of_order.is_empty(), "out of order: {out_of_order:?}");
    assert_eq!(answered.len(), SESSIONS);
    let missing = turns_missing_history(&llm.requests());
    assert!(missing.is_empty(), "turns that ran before the one before them was stored: {missing:?}");
    assert_eq!(database.sql("SELECT count(*) FROM runs WHERE status = 'completed'"), "100");
    let spread = sessions_per_worker(&workers);
    assert!(spread.iter().all(|&n| n > 0), "a worker ran nothing: {spread:?}");
    eprintln!(
        "{WORKERS} workers: {SESSIONS}×{PER_SESSION} messages answered in order in {took:?}; chats touched per worker {spread:?}"
    );
}

/// Starts a worker with its own data directory and `workspace`; the owner is `test:u1`.
fn worker(
    home: &Path,
    name: &str,
    nats: &NatsServer,
    database: &TempDatabase,
    llm: &FakeLlm,
    workspace: &Path,
) -> Daemon {
    Launch::new(home, name, &["agent", "--nats", &nats.url()])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_STORE__DATABASE_URL", database.url())
        .env("SWITCHBOARD_AGENT__WORKSPACE", &workspace.display().to_string())
        .env("SWITCHBOARD_USERS__OWNERS", r#"["test:u1"]"#)
        .spawn()
}

/// Sends `text` in the owner's chat and waits for its reply.
async fn turn(bus: &NatsBus, replies: &mut switchboard_channels::bus::Deliveries, text: &str) -> String {
    let sender = Sender { id: "u1".into(), name: "Owner".into(), is_bot: false };
    bus.publish_inbound(&InboundMessage::user("test", "owner", sender, text)).await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(30), replies.next()).await.unwrap().unwrap().unwrap();
    let reply: OutboundMessage = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    reply.content
}

/// Waits for a process that should refuse to start, and returns its log.
async fn refused(mut daemon: Daemon) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while daemon.is_alive() {
        assert!(Instant::now() < deadline, "it started:\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.logs()
}

#[tokio::test]
async fn one_agent_on_two_hosts_shares_its_workspace_and_a_local_one_is_refused() {
    let nats = NatsServer::start().await;
    let database = TempDatabase::create();
    let llm = FakeLlm::start().await;
    let (host_a, host_b, host_c) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let share = tempfile::tempdir().unwrap();
    let workspace = share.path().join("workspace");
    let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
    let mut replies = bus.outbound("test").await.unwrap();

    let first = worker(host_a.path(), "host-a", &nats, &database, &llm, &workspace);
    first.wait_for_log("worker started").await;
    let memory = json!({"path": "MEMORY.md", "content": "The owner's cat is called Miso.\n"});
    let note = json!({"path": "notes/todo.txt", "content": "buy cat food\n"});
    llm.push(Scripted::ToolCalls(vec![("write_file".into(), memory), ("write_file".into(), note)]));
    llm.push(Scripted::Text("Noted.".into()));
    assert_eq!(turn(&bus, &mut replies, "remember my cat Miso").await, "Noted.");
    drop(first);

    // Another host, another data directory, the same shared workspace.
    let second = worker(host_b.path(), "host-b", &nats, &database, &llm, &workspace);
    second.wait_for_log("worker started").await;
    llm.push(Scripted::ToolCalls(vec![("read_file".into(), json!({"path": "notes/todo.txt"}))]));
    llm.push(Scripted::Text("Cat food.".into()));
    assert_eq!(turn(&bus, &mut replies, "what was on my list?").await, "Cat food.");
    let requests = llm.requests();
    let system = requests[requests.len() - 2]["messages"][0]["content"].as_str().unwrap_or_default().to_owned();
    assert!(system.contains("Miso"), "the memory written on host A is not in host B's prompt:\n{system}");
    let tool_result = contents(&requests[requests.len() - 1]).join("\n");
    assert!(tool_result.contains("buy cat food"), "{tool_result}");
    drop(second);

    // A host with a workspace of its own would split the agent's memory: it refuses to start.
    let local = host_c.path().join("workspace");
    let logs = refused(worker(host_c.path(), "host-c", &nats, &database, &llm, &local)).await;
    let shared_path = workspace.display().to_string();
    assert!(logs.contains(&format!("Mount the shared directory at {shared_path}")), "{logs}");
    // The share mounted at another path would break the media paths messages carry.
    let elsewhere = host_c.path().join("mnt");
    std::os::unix::fs::symlink(&workspace, &elsewhere).unwrap();
    let logs = refused(worker(host_c.path(), "host-c2", &nats, &database, &llm, &elsewhere)).await;
    assert!(logs.contains(&format!("but at {shared_path} on")), "{logs}");
}

/// Two `channel api` processes on one bus, a load balancer's worth of requests on each: every
/// request gets its own reply, from the process it was sent to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_api_processes_each_get_the_replies_to_their_own_requests() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_RATE_LIMITS__GUEST", "0")
        .env("SWITCHBOARD_BUDGETS__GUEST", "0")
        .spawn();
    agent.wait_for_log("worker started").await;
    let api = |name| {
        Launch::new(dir.path(), name, &["channel", "api", "--nats", &nats.url()])
            // A reply that went to the other process would show as a 504, soon.
            .env("SWITCHBOARD_CHANNELS__API__REPLY_TIMEOUT_SECS", "10")
            .spawn()
    };
    let (mut first, mut second) = (api("api-1"), api("api-2"));
    first.wait_healthy().await;
    second.wait_healthy().await;

    let mut requests = tokio::task::JoinSet::new();
    for n in 0..40 {
        let url = if n % 2 == 0 { first.url("/v1/messages") } else { second.url("/v1/messages") };
        requests.spawn(async move {
            let body = json!({"chat_id": format!("lb-{}", n % 8), "content": format!("request {n}")});
            let response = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
            let status = response.status().as_u16();
            (n, status, response.json::<Value>().await.unwrap_or(Value::Null))
        });
    }
    let mut wrong = Vec::new();
    while let Some(done) = requests.join_next().await {
        let (n, status, body) = done.unwrap();
        if status != 200 || body["reply"] != format!("echo: request {n}") {
            wrong.push((n, status, body));
        }
    }
    assert!(wrong.is_empty(), "requests without their reply: {wrong:?}");
    for process in [&first, &second] {
        assert!(!process.logs().contains("nobody waiting"), "{}", process.logs());
    }
}

/// Two `channel api` processes on one bus: a message for an API chat that no request waits for
/// is kept by whichever process takes it, and a WebSocket on either process shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_message_reaches_a_websocket_on_either_api_process() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;

    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()])
        .llm(&llm.base_url())
        // The API's caller (`api`, no tokens) may use the `message` tool.
        .env("SWITCHBOARD_USERS__OWNERS", "[\"api:api\"]")
        .spawn();
    agent.wait_for_log("worker started").await;
    let api = |name| Launch::new(dir.path(), name, &["channel", "api", "--nats", &nats.url()]).spawn();
    let (mut first, mut second) = (api("api-1"), api("api-2"));
    first.wait_healthy().await;
    second.wait_healthy().await;
    let mut socket = crate::api_sessions::socket(&second, "none").await;
    socket.send(Message::Text(json!({"type": "subscribe", "chat_id": "family"}).to_string().into())).await.unwrap();
    crate::api_sessions::frames_until(&mut socket, "subscribed").await;

    const NOTES: usize = 6;
    for n in 0..NOTES {
        let note = json!({"content": format!("note {n}"), "target": "api:family"});
        llm.push_when(&format!("send note {n}"), Scripted::ToolCalls(vec![("message".into(), note)]));
        let body = json!({"chat_id": "ops", "content": format!("send note {n}")});
        let response = reqwest::Client::new().post(first.url("/v1/messages")).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let mut notes = Vec::new();
    while notes.len() < NOTES {
        let frame = crate::api_sessions::next_frame(&mut socket, Duration::from_secs(20)).await;
        if frame["type"] == "message" {
            notes.push(frame["content"].as_str().unwrap().to_owned());
        }
    }
    notes.sort();
    assert_eq!(notes, (0..NOTES).map(|n| format!("note {n}")).collect::<Vec<_>>());
    let kept = [&first, &second].iter().map(|p| p.logs().matches("kept in the outbox").count()).sum::<usize>();
    assert_eq!(kept, NOTES, "each note kept once, by one of the processes");
}
