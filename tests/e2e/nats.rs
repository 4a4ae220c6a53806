//! End to end through the real binary in the distributed shape: `switchboard channel api` and
//! `switchboard agent` as separate processes on an isolated NATS JetStream server.

use std::time::Duration;

use crate::support::Launch;
use futures_util::StreamExt;
use serde_json::{Value, json};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use switchboard_testkit::nats::NatsServer;

#[tokio::test]
async fn run_with_nats_bus_answers() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run", "--nats", &nats.url()]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    let (status, body) = daemon.post(json!({"chat_id": "room.with dots", "content": "over nats"})).await;
    assert_eq!(status, 200, "{body}\n{}", daemon.logs());
    assert_eq!(body["reply"], "echo: over nats");
    assert_eq!(body["session_key"], "api:room.with dots");
}

#[tokio::test]
async fn agent_and_channel_processes_talk_over_nats() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut api = Launch::new(dir.path(), "api", &["channel", "api"]).env("SWITCHBOARD_BUS", &nats.url()).spawn();
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()]).llm(&llm.base_url()).spawn();
    api.wait_healthy().await;
    agent.wait_for_log("worker started").await;
    let (status, body) = api.post(json!({"chat_id": "split", "content": "hello"})).await;
    assert_eq!(status, 200, "{body}\n{}\n{}", api.logs(), agent.logs());
    assert_eq!(body["reply"], "echo: hello");
}

#[tokio::test]
async fn agent_without_nats_says_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let (status, stderr, _) =
        crate::support::run_to_exit(dir.path(), &["agent"], &[("OPENAI_API_KEY", "k"), ("SWITCHBOARD_MODEL", "m")]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("needs a NATS bus"), "{stderr}");
}

#[tokio::test]
async fn nats_without_jetstream_is_a_clear_error() {
    let nats = NatsServer::start_without_jetstream().await;
    let dir = tempfile::tempdir().unwrap();
    let url = nats.url();
    let (status, stderr, _) = crate::support::run_to_exit(
        dir.path(),
        &["run", "--nats", &url],
        &[("OPENAI_API_KEY", "k"), ("SWITCHBOARD_MODEL", "m")],
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("JetStream"), "{stderr}");
}

/// A worker killed hard in the middle of a slow run: another worker picks the message up
/// after the ack wait and exactly one reply reaches the chat.
#[tokio::test]
async fn killed_worker_mid_run_gives_exactly_one_reply_after_restart() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    // The first call hangs (the worker dies during it); the retry answers.
    llm.push(Scripted::Delay(Duration::from_secs(60), Box::new(Scripted::Text("too late".into()))));
    llm.push(Scripted::Text("the one reply".into()));
    let dir = tempfile::tempdir().unwrap();
    let client = async_nats::connect(nats.url()).await.unwrap();
    // Replies to the API go to the API process's own channel (`api@<instance>`).
    let mut replies = client.subscribe("switchboard.out.>").await.unwrap();

    let mut api = Launch::new(dir.path(), "api", &["channel", "api"]).env("SWITCHBOARD_BUS", &nats.url()).spawn();
    let agent_launch = |name| {
        Launch::new(dir.path(), name, &["agent", "--nats", &nats.url()])
            .llm(&llm.base_url())
            .env("SWITCHBOARD_BUS_OPTIONS__ACK_WAIT_SECS", "3")
    };
    let mut first = agent_launch("agent-1").spawn();
    api.wait_healthy().await;
    first.wait_for_log("worker started").await;

    let url = api.url("/v1/messages");
    let request = tokio::spawn(async move {
        let resp =
            reqwest::Client::new().post(url).json(&json!({"chat_id": "crash", "content": "slow one"})).send().await;
        resp.unwrap().json::<Value>().await.unwrap()
    });
    llm.wait_for_requests(1, Duration::from_secs(10)).await;
    first.kill_hard();
    let second = agent_launch("agent-2").spawn();
    second.wait_for_log("worker started").await;

    let body = tokio::time::timeout(Duration::from_secs(30), request).await.unwrap().unwrap();
    assert_eq!(body["reply"], "the one reply", "{body}\n{}", second.logs());
    // Only one reply was ever published for that message, even after waiting past another ack wait.
    let mut published = Vec::new();
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_secs(5), replies.next()).await {
        published.push(serde_json::from_slice::<Value>(&msg.payload).unwrap());
    }
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(published[0]["content"], "the one reply");
    assert!(second.logs().contains("resuming a run"), "{}", second.logs());
    assert_eq!(llm.requests().len(), 2);
}

/// A turn longer than the ack wait is not given to another worker: progress acks keep it.
#[tokio::test]
async fn long_turn_is_not_redelivered_while_it_runs() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    llm.push(Scripted::Delay(Duration::from_secs(5), Box::new(Scripted::Text("worth the wait".into()))));
    let dir = tempfile::tempdir().unwrap();
    let launch = |name| {
        Launch::new(dir.path(), name, &["run", "--nats", &nats.url()])
            .llm(&llm.base_url())
            .env("SWITCHBOARD_BUS_OPTIONS__ACK_WAIT_SECS", "2")
    };
    // Two workers on one consumer: a redelivery would reach the idle one.
    let mut first = launch("run-1").spawn();
    let second = launch("run-2").env("SWITCHBOARD_CHANNELS__API__ENABLED", "false").spawn();
    first.wait_healthy().await;
    second.wait_for_log("worker started").await;
    let (status, body) = first.post(json!({"chat_id": "long", "content": "take your time"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "worth the wait");
    // Acked: every worker a redelivery reached would have settled it, model call and all.
    crate::support::wait_streams_acked(&nats.url(), &["SWITCHBOARD_IN"]).await;
    assert_eq!(llm.requests().len(), 1, "the message was redelivered during the run");
}

/// Garbage on the inbound subject goes to the dead-letter stream with the reason; the worker
/// keeps answering.
#[tokio::test]
async fn malformed_inbound_is_dead_lettered_on_nats() {
    use switchboard_channels::Bus;
    use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
    use switchboard_channels::subject::Flow;

    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Launch::new(dir.path(), "run", &["run", "--nats", &nats.url()]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.publish("switchboard.in.api.junk", "{not json".into()).await.unwrap().await.unwrap();

    let (status, body) = daemon.post(json!({"chat_id": "after", "content": "still alive?"})).await;
    assert_eq!((status, body["reply"].as_str()), (200, Some("echo: still alive?")), "{body}");
    let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
    let dead = bus.dead_letters(Flow::In, 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].subject, "switchboard.in.api.junk");
    assert_eq!(dead[0].payload, "{not json");
    assert!(dead[0].reason.contains("not a valid InboundMessage"), "{}", dead[0].reason);
}

/// Log lines that say a process tried and failed to reach the NATS server.
fn connect_failures(logs: &str) -> usize {
    logs.lines().filter(|line| line.contains("cannot reach the NATS server")).count()
}

/// An agent started while NATS is still down (both started at boot) does not exit: it logs
/// each failed attempt, and once the server is up it connects and answers.
#[tokio::test]
async fn agent_started_before_nats_waits_for_it() {
    use switchboard_channels::bus::nats::{NatsBus, NatsOptions};
    use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
    use switchboard_channels::{Bus, BusExt};

    let mut nats = NatsServer::start().await;
    nats.kill().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()]).llm(&llm.base_url()).spawn();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while connect_failures(&agent.logs()) < 2 {
        assert!(std::time::Instant::now() < deadline, "no second connect attempt logged:\n{}", agent.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!agent.logs().contains("worker started"), "{}", agent.logs());
    nats.restart().await;
    agent.wait_for_log("worker started").await;

    let bus = NatsBus::connect(&nats.url(), NatsOptions::default()).await.unwrap();
    let mut replies = bus.outbound("test").await.unwrap();
    let sender = Sender { id: "u1".into(), name: "U".into(), is_bot: false };
    bus.publish_inbound(&InboundMessage::user("test", "boot", sender, "up now?")).await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(10), replies.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(delivery.decode::<OutboundMessage>().unwrap().content, "echo: up now?", "{}", agent.logs());
    delivery.ack().await.unwrap();
}

/// A process still waiting for NATS stops at once when asked to (systemd stopping the unit).
#[tokio::test]
async fn process_waiting_for_nats_stops_on_sigterm() {
    let mut nats = NatsServer::start().await;
    nats.kill().await;
    let dir = tempfile::tempdir().unwrap();
    let mut api = Launch::new(dir.path(), "api", &["channel", "api"]).env("SWITCHBOARD_BUS", &nats.url()).spawn();
    api.wait_for_log("cannot reach the NATS server").await;
    api.signal("TERM");
    let status = api.wait_exit(Duration::from_secs(5)).await;
    assert!(status.success(), "{status}\n{}", api.logs());
}

/// Starting again on a server that already has the streams is as quiet as the first start
/// (every start after the first used to warn about the dead-letter stream's duplicate window,
/// which the server fills in), for a worker and for a channel process alike.
#[tokio::test]
async fn restart_on_existing_streams_logs_no_warning() {
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let starts = [("first", "agent"), ("second", "agent"), ("channel", "channel")];
    for (name, kind) in starts {
        let launch = match kind {
            "agent" => Launch::new(dir.path(), name, &["agent", "--nats", &nats.url()]).llm(&llm.base_url()),
            _ => Launch::new(dir.path(), name, &["channel", "api"]).env("SWITCHBOARD_BUS", &nats.url()),
        };
        let mut process = launch.spawn();
        process.wait_for_log("switchboard started").await;
        if kind == "agent" {
            process.wait_for_log("worker started").await;
        }
        process.signal("TERM");
        assert!(process.wait_exit(Duration::from_secs(10)).await.success(), "{}", process.logs());
        let logs = process.logs();
        // Running as root (as CI does) is worth its warning; nothing else is.
        let noted = |line: &&str| (line.contains("WARN") || line.contains("ERROR")) && !line.contains("runs as root");
        let warnings: Vec<&str> = logs.lines().filter(noted).collect();
        assert!(warnings.is_empty(), "{name} start: {warnings:#?}");
        if name != "first" {
            // Nothing to create or bring up to date either: the streams are as it wants them.
            assert!(!logs.contains("created JetStream stream") && !logs.contains("updated the stream"), "{logs}");
        }
    }
}

/// The Python interpreter to run the example adapter with, if nats-py is importable there.
/// `.ci/run` makes one and names it in `SWITCHBOARD_TEST_PYTHON`.
fn python_with_nats() -> Result<String, String> {
    let python = std::env::var("SWITCHBOARD_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let probe = std::process::Command::new(&python).args(["-c", "import nats"]).output();
    match probe {
        Ok(output) if output.status.success() => Ok(python),
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            Err(format!("{python} cannot import nats-py ({})", stderr.lines().last().unwrap_or_default()))
        }
        Err(err) => Err(format!("cannot run {python}: {err}")),
    }
}

/// `docs/examples/python_adapter.py`, written from `docs/bus.md` alone, publishes a message,
/// gets the reply on the documented consumer and acks it: the doc is enough to write an adapter.
#[tokio::test]
async fn python_adapter_written_from_the_bus_doc_gets_its_reply() {
    use tokio::io::AsyncWriteExt;

    let python = match python_with_nats() {
        Ok(python) => python,
        Err(reason) => {
            eprintln!("skipped: {reason} (set SWITCHBOARD_TEST_PYTHON to a Python with nats-py)");
            return;
        }
    };
    let nats = NatsServer::start().await;
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Launch::new(dir.path(), "agent", &["agent", "--nats", &nats.url()]).llm(&llm.base_url()).spawn();
    agent.wait_for_log("worker started").await;

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/python_adapter.py");
    let mut adapter = tokio::process::Command::new(&python)
        .args([script, "--nats", &nats.url(), "--chat", "kitchen table", "--sender", "42", "--timeout", "20"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = adapter.stdin.take().unwrap();
    stdin.write_all("hello from python\n".as_bytes()).await.unwrap();
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(30), adapter.wait_with_output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let context = format!("{stdout}\n{}\n{}", String::from_utf8_lossy(&output.stderr), agent.logs());
    assert!(output.status.success(), "{context}");
    let lines: Vec<Value> = stdout.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{context}");
    assert_eq!(lines[0]["republish_duplicate"], true, "{context}");
    assert_eq!(lines[1]["reply"], "echo: hello from python", "{context}");
    assert_eq!(lines[1]["in_reply_to"], lines[0]["published"], "{context}");
    assert_eq!(llm.requests().len(), 1, "the republished copy ran again");
}
