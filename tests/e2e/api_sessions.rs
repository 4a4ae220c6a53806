//! The API beyond one request: sessions and runs read back, the outbox (messages for API chats
//! that nobody waited for) on WebSockets, in the session and at a signed webhook, and chatting
//! over a WebSocket with the run's events as they happen.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use switchboard_channels::api::access::token_sha256_hex;
use switchboard_channels::api::webhook_signature;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{Daemon, Launch, run_to_exit};

const ALICE: &str = "sb_alice_sessions_0123";
const OPS: &str = "sb_ops_sessions_0123";
const WEBHOOK_SECRET: &str = "whsec-e2e";

/// alice (chat) and ops (admin, an owner); outbox messages posted to `webhook`, if given.
fn write_config(dir: &Path, webhook: Option<&str>) -> String {
    let mut text = format!(
        "[users]\nowners = [\"api:ops\"]\n\
         [channels.api.tokens.alice]\nsha256 = \"{}\"\n\
         [channels.api.tokens.ops]\nsha256 = \"{}\"\nscopes = [\"chat\", \"admin\"]\n",
        token_sha256_hex(ALICE),
        token_sha256_hex(OPS),
    );
    if let Some(url) = webhook {
        text.push_str(&format!("[channels.api.webhook]\nurl = \"{url}\"\nsecret = \"{WEBHOOK_SECRET}\"\n"));
    }
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

async fn start(dir: &Path, llm: &FakeLlm, webhook: Option<&str>) -> Daemon {
    let config = write_config(dir, webhook);
    let mut daemon = Launch::new(dir, "run", &["run", "--config", &config]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    daemon
}

/// A client of one daemon's API (the owner console's tests use it too).
pub struct Api<'a> {
    pub daemon: &'a Daemon,
    client: reqwest::Client,
}

impl<'a> Api<'a> {
    pub fn new(daemon: &'a Daemon) -> Self {
        Self { daemon, client: reqwest::Client::new() }
    }

    pub async fn call(&self, method: reqwest::Method, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.client.request(method, self.daemon.url(path)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, token, None).await
    }

    async fn say(&self, token: &str, chat: &str, content: &str) -> Value {
        let body = json!({"chat_id": chat, "content": content});
        let (status, reply) = self.call(reqwest::Method::POST, "/v1/messages", token, Some(body)).await;
        assert_eq!(status, 200, "{reply}\n{}", self.daemon.logs());
        reply
    }
}

fn encoded(key: &str) -> String {
    key.replace('/', "%2F").replace(':', "%3A")
}

#[tokio::test]
async fn sessions_and_runs_read_back_what_was_said_to_whom_may_read_it() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), &llm, None).await;
    let api = Api::new(&daemon);
    llm.push_when("what time", Scripted::ToolCalls(vec![("current_time".into(), json!({}))]));
    let first = api.say(ALICE, "kitchen", "hello").await;
    api.say(ALICE, "kitchen", "what time is it").await;
    api.say(OPS, "ops-room", "status?").await;
    let key = "api:alice/kitchen";
    assert_eq!(first["session_key"], key, "a chat token's chat lives under its identity");

    let (_, mine) = api.get("/v1/sessions", ALICE).await;
    let keys: Vec<&str> = mine["sessions"].as_array().unwrap().iter().map(|s| s["key"].as_str().unwrap()).collect();
    assert_eq!(keys, [key]);
    let (_, all) = api.get("/v1/sessions", OPS).await;
    assert_eq!(all["sessions"].as_array().unwrap().len(), 2, "{all}");

    let (status, page) = api.get(&format!("/v1/sessions/{}/messages", encoded(key)), ALICE).await;
    assert_eq!(status, 200, "{page}");
    let lines: Vec<(String, String)> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(lines[0], ("user".to_owned(), "hello".to_owned()));
    assert_eq!(lines[1], ("assistant".to_owned(), "echo: hello".to_owned()));
    assert_eq!(lines.last().unwrap(), &("assistant".to_owned(), "echo: what time is it".to_owned()));
    assert!(lines.iter().any(|(role, _)| role == "tool"), "the tool's result is not shown: {lines:?}");
    // Paged: the two newest, then the older ones before them.
    let (_, newest) = api.get(&format!("/v1/sessions/{}/messages?limit=2", encoded(key)), ALICE).await;
    assert_eq!(newest["messages"].as_array().unwrap().len(), 2);
    let before = newest["before"].as_i64().expect("a cursor to older messages");
    let (_, older) = api.get(&format!("/v1/sessions/{}/messages?before={before}", encoded(key)), ALICE).await;
    assert_eq!(older["messages"].as_array().unwrap().len(), lines.len() - 2);
    assert_eq!(older["before"], Value::Null, "the oldest page has no cursor");

    let (status, runs) = api.get(&format!("/v1/runs?session={}", encoded(key)), ALICE).await;
    assert_eq!(status, 200, "{runs}");
    let runs = runs["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r["status"] == "completed" && r["input_tokens"].as_u64().unwrap() > 0), "{runs:?}");
    let (_, run) = api.get(&format!("/v1/runs/{}", runs[0]["id"].as_str().unwrap()), ALICE).await;
    assert_eq!(run["tool_calls"][0]["name"], "current_time", "{run}");
    assert!(run["tool_calls"][0]["result"].as_str().is_some_and(|r| !r.is_empty()), "{run}");

    // What alice may not read.
    assert_eq!(api.get("/v1/runs", ALICE).await.0, 403, "every run is for admins");
    assert_eq!(api.get(&format!("/v1/sessions/{}/messages", encoded("api:ops-room")), ALICE).await.0, 404);
    let ops_run = api.get("/v1/runs?limit=1", OPS).await.1["runs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(api.get(&format!("/v1/runs/{ops_run}"), ALICE).await.0, 404);

    // Deleted: gone from the list and its messages; its runs stay for the usage they cost.
    let path = format!("/v1/sessions/{}", encoded(key));
    assert_eq!(api.call(reqwest::Method::DELETE, &path, ALICE, None).await.0, 204);
    let (_, mine) = api.get("/v1/sessions", ALICE).await;
    assert_eq!(mine["sessions"], json!([]));
    let (_, page) = api.get(&format!("/v1/sessions/{}/messages", encoded(key)), ALICE).await;
    assert_eq!(page["messages"], json!([]));
    assert_eq!(
        api.get(&format!("/v1/runs?session={}", encoded(key)), ALICE).await.1["runs"].as_array().unwrap().len(),
        2
    );
    // The next message starts afresh: the model sees none of the deleted conversation.
    api.say(ALICE, "kitchen", "are you there").await;
    let request = llm.requests().last().unwrap().to_string();
    assert!(!request.contains("echo: hello"), "the deleted conversation reached the model");
}

/// Chats that only ever received messages (a cron job's, another chat's through the `message`
/// tool), with no message from the chat itself, are listed with the chats of whoever may read
/// them, and what they received is read back.
#[tokio::test]
async fn chats_that_only_received_messages_are_listed() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), None);
    let fast_poll = ("SWITCHBOARD_CRON__POLL_INTERVAL_MS", "200");
    let mut daemon = Launch::new(dir.path(), "run", &["run", "--config", &config])
        .llm(&llm.base_url())
        .env(fast_poll.0, fast_poll.1)
        .spawn();
    daemon.wait_healthy().await;
    let api = Api::new(&daemon);
    let cron = |args: &[&str]| {
        let (status, stderr, stdout) = run_to_exit(dir.path(), &[&["cron"], args].concat(), &[fast_poll]);
        assert!(status.success(), "cron {args:?}: {stderr}");
        stdout
    };
    let added =
        cron(&["add", "--to", "api:alice/garden", "--at", "+1h", "--reminder", "--message", "Water the plants"]);
    let id = added.lines().next().and_then(|line| line.strip_prefix("added ")).unwrap_or_else(|| panic!("{added}"));
    cron(&["run", id.trim()]);
    let send = json!({"content": "dinner is ready", "target": "api:alice/kitchen"});
    llm.push_when("tell alice", Scripted::ToolCalls(vec![("message".into(), send)]));
    api.say(OPS, "ops-room", "tell alice dinner is ready").await;
    for chat in ["garden", "kitchen"] {
        let messages = format!("/v1/sessions/{}/messages", encoded(&format!("api:alice/{chat}")));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while api.get(&messages, ALICE).await.1["messages"].as_array().is_none_or(Vec::is_empty) {
            assert!(tokio::time::Instant::now() < deadline, "nothing reached {chat}\n{}", daemon.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    let (_, mine) = api.get("/v1/sessions", ALICE).await;
    let mut listed: Vec<(&str, &str)> = mine["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["key"].as_str().unwrap(), s["chat_id"].as_str().unwrap_or("")))
        .collect();
    listed.sort();
    assert_eq!(listed, [("api:alice/garden", "garden"), ("api:alice/kitchen", "kitchen")], "{mine}");
    let kitchen = mine["sessions"].as_array().unwrap().iter().find(|s| s["chat_id"] == "kitchen").unwrap();
    assert_eq!(kitchen["messages"], 1, "{mine}");
    let (_, all) = api.get("/v1/sessions", OPS).await;
    assert!(all["sessions"].as_array().unwrap().iter().any(|s| s["key"] == "api:alice/kitchen"), "{all}");
    // Deleted like any chat: gone from the list.
    let path = format!("/v1/sessions/{}", encoded("api:alice/kitchen"));
    assert_eq!(api.call(reqwest::Method::DELETE, &path, ALICE, None).await.0, 204);
    let (_, mine) = api.get("/v1/sessions", ALICE).await;
    assert!(mine["sessions"].as_array().unwrap().iter().all(|s| s["chat_id"] != "kitchen"), "{mine}");
}

/// A WebSocket of `token`, speaking the `switchboard` subprotocol with the token as a second
/// one, as a browser does.
pub(crate) async fn socket(
    daemon: &Daemon,
    token: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let url = format!("ws://127.0.0.1:{}/v1/ws", daemon.port);
    let mut request = url.into_client_request().unwrap();
    let protocols = format!("switchboard, bearer.{token}");
    request.headers_mut().insert("sec-websocket-protocol", protocols.parse().unwrap());
    let (socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "switchboard");
    socket
}

/// The next JSON frame, within `within`.
pub(crate) async fn next_frame<S>(socket: &mut S, within: Duration) -> Value
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let message = tokio::time::timeout(within, socket.next()).await.expect("no frame in time").unwrap().unwrap();
        if let Message::Text(text) = message {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

/// Frames until one of type `wanted`, all of them.
pub(crate) async fn frames_until<S>(socket: &mut S, wanted: &str) -> Vec<Value>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let mut frames = Vec::new();
    loop {
        let frame = next_frame(socket, Duration::from_secs(20)).await;
        let done = frame["type"] == wanted;
        frames.push(frame);
        if done {
            return frames;
        }
    }
}

#[tokio::test]
async fn a_websocket_chats_and_sees_the_run_as_it_happens() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), &llm, None).await;
    llm.push_when("what time", Scripted::ToolCalls(vec![("current_time".into(), json!({}))]));
    let mut ws = socket(&daemon, ALICE).await;
    let send = json!({"type": "message", "chat_id": "kitchen", "content": "what time is it", "client_id": "c1"});
    ws.send(Message::Text(send.to_string().into())).await.unwrap();
    let frames = frames_until(&mut ws, "reply").await;
    let types: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    for expected in ["accepted", "run.started", "tool.call", "tool.result", "chunk", "run.completed", "reply"] {
        assert!(types.contains(&expected), "no {expected} frame in {types:?}");
    }
    let position = |t: &str| types.iter().position(|x| *x == t).unwrap();
    assert!(position("run.started") < position("tool.call") && position("tool.call") < position("tool.result"));
    let reply = frames.last().unwrap();
    assert_eq!(
        (reply["content"].as_str(), reply["chat_id"].as_str()),
        (Some("echo: what time is it"), Some("kitchen"))
    );
    assert_eq!(reply["client_id"], "c1");
    assert!(frames.iter().all(|f| f["chat_id"].is_null() || f["chat_id"] == "kitchen"), "{frames:?}");

    ws.send(Message::Text(json!({"type": "ping"}).to_string().into())).await.unwrap();
    assert_eq!(frames_until(&mut ws, "pong").await.last().unwrap()["type"], "pong");
    // A socket without a valid token does not open.
    let url = format!("ws://127.0.0.1:{}/v1/ws", daemon.port);
    assert!(tokio_tungstenite::connect_async(url).await.is_err());
}

/// A model that writes for longer than the reply timeout: the answer keeps streaming, so the
/// socket and a plain request get it whole, never "no reply in time" (the limit counts from the
/// run's last piece).
#[tokio::test]
async fn an_answer_still_streaming_past_the_reply_timeout_is_not_given_up_on() {
    let pace = Some(Duration::from_millis(300));
    let llm =
        FakeLlm::start_with_quirks(switchboard_testkit::fake_llm::Quirks { stream_pace: pace, ..Default::default() })
            .await;
    llm.push(Scripted::Text("A long answer, written slowly, piece by piece, over about three seconds.".into()));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), None);
    let mut daemon = Launch::new(dir.path(), "run", &["run", "--config", &config])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_CHANNELS__API__REPLY_TIMEOUT_SECS", "1")
        .spawn();
    daemon.wait_healthy().await;
    let mut ws = socket(&daemon, ALICE).await;
    let send = json!({"type": "message", "chat_id": "slow", "content": "tell me slowly", "client_id": "s1"});
    let started = std::time::Instant::now();
    ws.send(Message::Text(send.to_string().into())).await.unwrap();
    let frames = frames_until(&mut ws, "reply").await;
    assert!(started.elapsed() > Duration::from_secs(2), "the model took {:?}", started.elapsed());
    let types: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap_or_default()).collect();
    assert!(!types.contains(&"error"), "{frames:?}");
    assert_eq!(
        frames.last().unwrap()["content"],
        "A long answer, written slowly, piece by piece, over about three seconds."
    );
    // The same for a plain request, which waits for the whole reply.
    llm.push(Scripted::Text("Another long answer, also written slowly, piece by piece, over seconds.".into()));
    let api = Api::new(&daemon);
    let started = std::time::Instant::now();
    let reply = api.say(ALICE, "slow", "and once more").await;
    assert!(started.elapsed() > Duration::from_secs(2), "the model took {:?}", started.elapsed());
    assert_eq!(reply["reply"], "Another long answer, also written slowly, piece by piece, over seconds.");
}

/// What the test webhook received: (headers, body).
type Posts = Arc<Mutex<Vec<(axum::http::HeaderMap, String)>>>;

/// A receiver that answers 500 to the first post and 200 after.
async fn webhook_receiver() -> (String, Posts) {
    let posts: Posts = Arc::default();
    let seen = Arc::clone(&posts);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let seen = Arc::clone(&seen);
            async move {
                let mut posts = seen.lock().unwrap();
                posts.push((headers, body));
                if posts.len() == 1 {
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    axum::http::StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, posts)
}

#[tokio::test]
async fn a_message_nobody_waits_for_reaches_the_socket_the_session_and_the_webhook() {
    let llm = FakeLlm::start().await;
    let (hook, posts) = webhook_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), &llm, Some(&hook)).await;
    let api = Api::new(&daemon);
    let mut ws = socket(&daemon, ALICE).await;
    ws.send(Message::Text(json!({"type": "subscribe", "chat_id": "kitchen"}).to_string().into())).await.unwrap();
    frames_until(&mut ws, "subscribed").await;

    let send = json!({"content": "dinner is ready", "target": "api:alice/kitchen"});
    llm.push_when("tell alice", Scripted::ToolCalls(vec![("message".into(), send)]));
    api.say(OPS, "ops-room", "tell alice dinner is ready").await;

    let pushed = frames_until(&mut ws, "message").await.pop().unwrap();
    assert_eq!((pushed["content"].as_str(), pushed["chat_id"].as_str()), (Some("dinner is ready"), Some("kitchen")));
    let (_, page) = api.get(&format!("/v1/sessions/{}/messages", encoded("api:alice/kitchen")), ALICE).await;
    assert_eq!(page["messages"][0]["role"], "outbox", "{page}");
    assert_eq!(page["messages"][0]["content"], "dinner is ready");

    // The webhook said 500 once; the post came again about a second later, signed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while posts.lock().unwrap().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the webhook post was not retried\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let posts = posts.lock().unwrap().clone();
    let (headers, body) = &posts[1];
    assert_eq!(posts[0].1, posts[1].1.clone(), "a retry posts the same message");
    let timestamp: i64 = headers["x-switchboard-timestamp"].to_str().unwrap().parse().unwrap();
    let expected = webhook_signature(WEBHOOK_SECRET, timestamp, body.as_bytes());
    assert_eq!(headers["x-switchboard-signature"].to_str().unwrap(), expected);
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!((body["chat_id"].as_str(), body["content"].as_str()), (Some("alice/kitchen"), Some("dinner is ready")));
    assert_eq!(headers["x-switchboard-delivery"].to_str().unwrap(), body["id"].as_str().unwrap());
}

/// A client that stops reading is disconnected instead of being buffered for: 150 answers of
/// 20 KB each stream into its chats while it reads nothing; the daemon keeps answering, closes
/// the socket, and its memory stays within what its shared event buffer holds.
#[tokio::test]
async fn a_websocket_that_stops_reading_is_closed_and_costs_no_memory() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), None);
    // 150 turns in a minute are beyond a new sender's (a guest's) monthly tokens and the token's
    // request rate: lift both for this test.
    let mut daemon = Launch::new(dir.path(), "run", &["run", "--config", &config])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_BUDGETS__GUEST", "0")
        .env("SWITCHBOARD_CHANNELS__API__TOKENS__ALICE__REQUESTS_PER_MINUTE", "0")
        .spawn();
    daemon.wait_healthy().await;
    let api = Api::new(&daemon);
    // A small receive buffer, so the daemon's writes back up soon.
    let tcp = tokio::net::TcpSocket::new_v4().unwrap();
    tcp.set_recv_buffer_size(4096).unwrap();
    let stream = tcp.connect(format!("127.0.0.1:{}", daemon.port).parse().unwrap()).await.unwrap();
    let mut request = format!("ws://127.0.0.1:{}/v1/ws", daemon.port).into_client_request().unwrap();
    request.headers_mut().insert("sec-websocket-protocol", format!("switchboard, bearer.{ALICE}").parse().unwrap());
    let (mut slow, _) = tokio_tungstenite::client_async(request, stream).await.unwrap();
    const TURNS: usize = 150;
    // One chat a turn, so no history grows (and no compaction asks the model in between).
    for n in 0..TURNS {
        let subscribe = json!({"type": "subscribe", "chat_id": format!("k{n}")});
        slow.send(Message::Text(subscribe.to_string().into())).await.unwrap();
    }
    api.say(ALICE, "warm-up", "warm up").await;
    let before = daemon.rss_kib();

    let answer = "word ".repeat(4000);
    for n in 0..TURNS {
        llm.push(Scripted::Text(format!("{n} {answer}")));
        let reply = api.say(ALICE, &format!("k{n}"), &format!("turn {n}")).await;
        assert!(reply["reply"].as_str().unwrap().starts_with(&format!("{n} ")), "{}", &reply.to_string()[..200]);
    }
    let grown_mib = daemon.rss_kib().saturating_sub(before) / 1024;

    // Now it reads: what was buffered, then the end, before every answer came through.
    // The daemon gives up on it once a frame has waited 10 s to go out.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !daemon.logs().contains("too slow") {
        assert!(tokio::time::Instant::now() < deadline, "the slow socket was never closed\n{}", daemon.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut completed = 0;
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(Ok(message)) = slow.next().await {
            match message {
                Message::Text(text) if text.contains("\"run.completed\"") => completed += 1,
                Message::Close(frame) => return frame.map(|f| u16::from(f.code)),
                _ => {}
            }
        }
        None
    })
    .await
    .expect("the slow socket did not end");
    assert!(completed < TURNS, "the slow socket got all {completed} answers: nothing was cut off");
    assert!(matches!(ended, None | Some(1008)), "closed with {ended:?}");
    assert!(grown_mib < 64, "the daemon grew by {grown_mib} MiB while a client did not read");
    eprintln!("slow socket: {completed} of {TURNS} answers before it was closed ({ended:?}); RSS grew {grown_mib} MiB");
}
