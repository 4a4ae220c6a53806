//! The OpenAI-compatible endpoint and the API's tokens, against the real daemon: the official
//! OpenAI Python client in both modes and with its error types, the event stream's shape and
//! pace, and what each token may do.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_channels::api::access::token_sha256_hex;
use switchboard_testkit::fake_llm::{self, FakeLlm, Quirks};

use crate::support::{Daemon, Launch, run_to_exit};

const ALICE: &str = "sb_alice_0123456789";
const LIMITED: &str = "sb_limited_0123456789";
const OPS: &str = "sb_ops_0123456789";
const HELPER: &str = "sb_helper_0123456789";

/// A config with four tokens: alice (chat), limited (chat, 2 a minute), ops (admin) and helper
/// (chat, only the `helper` agent); agents `main` and `helper`.
fn write_config(dir: &Path) -> String {
    let entry = |name: &str, token: &str, extra: &str| {
        format!("[channels.api.tokens.{name}]\nsha256 = \"{}\"\n{extra}\n", token_sha256_hex(token))
    };
    let text = [
        "[agents.helper]\n".to_owned(),
        entry("alice", ALICE, ""),
        entry("limited", LIMITED, "requests_per_minute = 2"),
        entry("ops", OPS, "scopes = [\"chat\", \"admin\"]"),
        entry("helper", HELPER, "agents = [\"helper\"]"),
    ]
    .concat();
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

async fn start(dir: &Path, llm: &FakeLlm) -> Daemon {
    let config = write_config(dir);
    let mut daemon = Launch::new(dir, "run", &["run", "--config", &config]).llm(&llm.base_url()).spawn();
    daemon.wait_healthy().await;
    daemon
}

/// The Python interpreter with the `openai` package: `.ci/run` installs it and names it in
/// `SWITCHBOARD_TEST_PYTHON`. In CI its absence fails the test; elsewhere it skips it.
fn python_with_openai() -> Option<String> {
    let python = std::env::var("SWITCHBOARD_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let probe = std::process::Command::new(&python).args(["-c", "import openai"]).output();
    if probe.is_ok_and(|output| output.status.success()) {
        return Some(python);
    }
    assert!(std::env::var_os("CI").is_none(), "CI must have a Python with the openai package ({python})");
    eprintln!("skipped: {python} cannot import openai (set SWITCHBOARD_TEST_PYTHON to a Python with it)");
    None
}

#[tokio::test]
async fn the_official_openai_python_client_works_plain_streamed_and_with_its_errors() {
    let Some(python) = python_with_openai() else { return };
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), &llm).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/api_openai/openai_client.py");
    let output =
        tokio::process::Command::new(&python).args([script, &daemon.url(""), ALICE, LIMITED]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the client failed:\n{stderr}\n{}", daemon.logs());
    let out: Value = serde_json::from_slice(&output.stdout).unwrap();

    assert_eq!(out["models"], json!(["main", "helper"]), "the agents, the default first");
    let plain = &out["plain"];
    assert_eq!(plain["content"], "echo: hello plain");
    assert_eq!((plain["role"].as_str(), plain["finish"].as_str()), (Some("assistant"), Some("stop")));
    assert!(plain["total_tokens"].as_u64().unwrap() > 0, "{plain}");
    let stream = &out["stream"];
    let deltas: Vec<&str> = stream["deltas"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    assert!(deltas.len() > 1, "the reply came in one piece: {deltas:?}");
    assert_eq!(deltas.concat(), "echo: hello streamed");
    assert_eq!(stream["finish"], "stop");
    assert!(stream["total_tokens"].as_u64().unwrap() > 0, "no usage chunk: {stream}");

    assert_eq!(out["wrong_token"], "AuthenticationError:401");
    assert_eq!(out["unknown_model"], "NotFoundError:404");
    assert_eq!(out["rate_limited"], json!(["no error", "no error", "RateLimitError:429"]));
    // Two turns; the failed calls never reached the model, nor did the client's system message.
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests.iter().all(|r| !r.to_string().contains("ignored")),
        "the client's system message reached the model"
    );
}

/// One frame of an event stream and when it arrived.
struct Frame {
    data: String,
    at: Instant,
}

/// Reads an event stream to its end, frame by frame.
async fn read_frames(mut response: reqwest::Response) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut buffer = String::new();
    while let Some(bytes) = response.chunk().await.unwrap() {
        buffer.push_str(std::str::from_utf8(&bytes).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let data: Vec<&str> = frame.lines().filter_map(|line| line.strip_prefix("data: ")).collect();
            if !data.is_empty() {
                frames.push(Frame { data: data.join("\n"), at: Instant::now() });
            }
        }
    }
    frames
}

/// Alice's streamed chat completion `body`: its event stream's frames.
async fn streamed(daemon: &Daemon, body: &Value) -> Vec<Frame> {
    let response = reqwest::Client::new()
        .post(daemon.url("/v1/chat/completions"))
        .bearer_auth(ALICE)
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    read_frames(response).await
}

/// A model that takes seconds: the client sees the first words long before the last, in
/// OpenAI's chunk shape, then the finish with usage, the usage chunk and `[DONE]`.
#[tokio::test]
async fn a_streamed_answer_arrives_as_the_model_writes_it() {
    let pace = Duration::from_millis(400);
    // Paced, and without usage in the stream, as local servers (llama.cpp) send it: the usage
    // chunk then carries switchboard's estimate.
    let quirks = Quirks { stream_pace: Some(pace), no_stream_usage: true, ..Quirks::default() };
    let llm = FakeLlm::start_with_quirks(quirks).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), &llm).await;
    let body = json!({
        "model": "main", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "tell me slowly"}],
    });
    let frames = streamed(&daemon, &body).await;

    assert_eq!(frames.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> =
        frames[..frames.len() - 1].iter().map(|f| serde_json::from_str(&f.data).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "main"), "{chunks:?}");
    assert!(chunks.iter().all(|c| c["id"] == chunks[0]["id"]), "one id for every chunk");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let texts: Vec<(usize, &str)> = chunks
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i, c["choices"][0]["delta"]["content"].as_str().filter(|t| !t.is_empty())?)))
        .collect();
    assert_eq!(texts.iter().map(|(_, t)| *t).collect::<String>(), "echo: tell me slowly");
    let (first, last) = (frames[texts[0].0].at, frames[texts[texts.len() - 1].0].at);
    assert!(last - first >= pace * 2, "the text came at once ({:?} apart), not as it was written", last - first);
    let finish = chunks.iter().find(|c| c["choices"][0]["finish_reason"] == "stop").expect("a finish chunk");
    assert_eq!(finish["usage"], Value::Null, "usage twice: clients that add it up would count it double");
    let usage_only = chunks.last().unwrap();
    assert_eq!(usage_only["choices"], json!([]));
    assert!(usage_only["usage"]["total_tokens"].as_u64().unwrap() > 0, "{usage_only}");
    assert_eq!(chunks.iter().filter(|c| c["usage"].is_object()).count(), 1);
}

/// A conversation's later turns read the prompt the earlier ones sent from the provider's
/// cache: each completion says how much in `usage.prompt_tokens_details.cached_tokens`, plain
/// and streamed, and `GET /v1/runs` shows the same with each run.
#[tokio::test]
async fn cached_tokens_show_in_the_completions_usage_and_in_the_runs() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    // Alice owns the agent: her prompt (every tool, the workspace files) is long enough to cache.
    let config = write_config(dir.path());
    let mut daemon = Launch::new(dir.path(), "run", &["run", "--config", &config])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_USERS__OWNERS", "[\"api:alice\"]")
        .spawn();
    daemon.wait_healthy().await;
    let client = reqwest::Client::new();
    let ask =
        |content: &str| json!({"model": "main", "user": "kitchen", "messages": [{"role": "user", "content": content}]});
    let mut completions = Vec::new();
    for question in ["what should we cook tonight?", "and for dessert?"] {
        let response =
            client.post(daemon.url("/v1/chat/completions")).bearer_auth(ALICE).json(&ask(question)).send().await;
        completions.push(response.unwrap().json::<Value>().await.unwrap());
    }
    let mut streamed_body = ask("and to drink?");
    streamed_body["stream"] = json!(true);
    streamed_body["stream_options"] = json!({"include_usage": true});
    let frames = streamed(&daemon, &streamed_body).await;
    let mut chunks = frames.iter().filter_map(|frame| serde_json::from_str::<Value>(&frame.data).ok());
    let usage_chunk = chunks.rfind(|chunk| chunk["usage"].is_object()).expect("a usage chunk");

    let cached = |usage: &Value| usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert_eq!(cached(&completions[0]["usage"]), 0, "nothing cached before the first turn: {}", completions[0]);
    for usage in [&completions[1]["usage"], &usage_chunk["usage"]] {
        let prompt = usage["prompt_tokens"].as_u64().unwrap();
        assert!(cached(usage) > 0 && cached(usage) <= prompt, "{usage}");
    }

    let session = completions[0]["switchboard"]["session_key"].as_str().unwrap();
    let runs = client.get(daemon.url("/v1/runs")).query(&[("session", session)]).bearer_auth(ALICE).send().await;
    let runs: Value = runs.unwrap().json().await.unwrap();
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "{runs:?}");
    for completion in &completions {
        let id = &completion["switchboard"]["run_id"];
        let run = runs.iter().find(|run| &run["id"] == id).unwrap_or_else(|| panic!("no run {id} in {runs:?}"));
        assert_eq!(run["cache_read_tokens"].as_u64(), Some(cached(&completion["usage"])), "{run}");
        assert_eq!(run["input_tokens"], completion["usage"]["prompt_tokens"], "{run}");
    }
    let newest = runs.iter().max_by_key(|run| run["started_at"].as_str().unwrap_or_default().to_owned()).unwrap();
    assert_eq!(newest["cache_read_tokens"].as_u64(), Some(cached(&usage_chunk["usage"])), "{newest}");
}

/// A model whose text leaks its reasoning and a tool call in MiniMax's XML (a server without
/// its tool parser), streamed in pieces that cut the blocks anywhere: the client is shown only
/// the answer, as it is written, never a piece of what the final reply leaves out.
#[tokio::test]
async fn a_streamed_answer_never_shows_a_leaked_block() {
    let quirks = Quirks { stream_pace: Some(Duration::from_millis(150)), ..Quirks::default() };
    let llm = FakeLlm::start_with_quirks(quirks).await;
    llm.push(fake_llm::Scripted::Text(
        "<think>The secret plan: read the file.</think>\n\n<minimax:tool_call>\n<invoke name=\"exec\">\n\
         <parameter name=\"command\">cat secret.txt</parameter>\n</invoke>\n</minimax:tool_call>\n\
         The file holds a list of 42 names, sorted by the date they joined."
            .into(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), &llm).await;
    let body = json!({"model": "main", "stream": true, "messages": [{"role": "user", "content": "what is in it?"}]});
    let frames = streamed(&daemon, &body).await;
    let texts: Vec<String> = frames
        .iter()
        .filter_map(|frame| serde_json::from_str::<Value>(&frame.data).ok())
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .filter(|text| !text.is_empty())
        .collect();
    for leaked in ["secret", "think", "minimax", "invoke", "parameter", "<"] {
        assert!(texts.iter().all(|text| !text.contains(leaked)), "{leaked:?} was streamed: {texts:?}");
    }
    assert_eq!(texts.concat(), "The file holds a list of 42 names, sorted by the date they joined.");
    assert!(texts.len() >= 2, "the answer came at once, not as it was written: {texts:?}");
}

/// Tokens: none or a wrong one is refused; a chat token speaks as its identity and no one
/// else; an agent list limits the models; only an admin token names another sender.
#[tokio::test]
async fn each_token_speaks_as_its_identity_within_its_scopes() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), &llm).await;
    let client = reqwest::Client::new();
    let post = |path: &str, token: Option<&str>, body: Value| {
        let mut request = client.post(daemon.url(path)).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let www = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned());
            (status, response.json::<Value>().await.unwrap_or(Value::Null), www)
        }
    };
    let message = json!({"chat_id": "c1", "content": "who am I"});

    let (status, body, www) = post("/v1/messages", None, message.clone()).await;
    assert_eq!(
        (status, body["error"]["type"].as_str(), www.as_deref()),
        (401, Some("authentication_error"), Some("Bearer"))
    );
    assert_eq!(post("/v1/messages", Some("sb_nope"), message.clone()).await.0, 401);

    let (status, body, _) = post("/v1/messages", Some(ALICE), message.clone()).await;
    assert_eq!(status, 200, "{body}");
    let line = fake_llm::context_lines(llm.requests().last().unwrap()).pop().flatten().unwrap_or_default();
    assert!(line.contains("(id alice),"), "the sender is not the token's identity:\n{line}");

    let (status, body, _) =
        post("/v1/messages", Some(ALICE), json!({"chat_id": "c1", "content": "hi", "sender": "bob"})).await;
    assert_eq!((status, body["error"]["type"].as_str()), (403, Some("permission_error")), "{body}");
    let (status, _, _) =
        post("/v1/messages", Some(OPS), json!({"chat_id": "c1", "content": "hi", "sender": "bob"})).await;
    assert_eq!(status, 200);
    let line = fake_llm::context_lines(llm.requests().last().unwrap()).pop().flatten().unwrap_or_default();
    assert!(line.contains("(id bob),"), "an admin token could not name the sender:\n{line}");

    let ask = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(post("/v1/chat/completions", Some(HELPER), ask("main")).await.0, 403);
    let (status, body, _) = post("/v1/chat/completions", Some(HELPER), ask("helper")).await;
    assert_eq!((status, body["model"].as_str()), (200, Some("helper")), "{body}");
    // The helper agent's session of the token's own chat (`default` under its identity).
    assert_eq!(body["switchboard"]["session_key"], "helper/api:helper/default", "the model did not pick the agent");
    let models = client.get(daemon.url("/v1/models")).bearer_auth(HELPER).send().await.unwrap();
    assert_eq!(models.json::<Value>().await.unwrap()["data"][0]["id"], "helper", "a token sees only its agents");

    // Two requests a minute: the third waits about 30 s for the bucket to refill.
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = client.get(daemon.url("/v1/models")).bearer_auth(LIMITED).send().await.unwrap();
        let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
        statuses.push((response.status().as_u16(), retry_after));
    }
    assert_eq!(&statuses[..2], [(200, None), (200, None)]);
    assert!(matches!(statuses[2], (429, Some(secs)) if (25..=30).contains(&secs)), "{statuses:?}");
}

/// Listening beyond loopback with no token is refused at start, with what to do.
#[test]
fn an_unguarded_api_beyond_loopback_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let env =
        [("SWITCHBOARD_CHANNELS__API__LISTEN", "0.0.0.0:0"), ("OPENAI_API_KEY", "sk-x"), ("SWITCHBOARD_MODEL", "m")];
    let (status, stderr, _) = run_to_exit(dir.path(), &["run"], &env);
    assert!(!status.success());
    assert!(stderr.contains("0.0.0.0:0") && stderr.contains("api-token"), "{stderr}");
}
