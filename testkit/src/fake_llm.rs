//! A scripted OpenAI-compatible server: `POST /v1/chat/completions` on 127.0.0.1, a random
//! port. Tests queue the answers they want ([`Scripted`]); with nothing queued it echoes the
//! last user message, which is all benchmarks and simple end-to-end tests need.
//!
//! When several conversations call the model at once (a sub-agent beside the main agent),
//! their order is not fixed: [`FakeLlm::push_when`] answers a request by what it contains
//! instead of by its place in the queue.
//!
//! It answers `"stream": true` requests with server-sent events shaped like OpenAI's (text
//! split over several chunks, tool calls as indexed deltas with the arguments split, a usage
//! chunk, `[DONE]`) and others with one JSON document. Every request body is recorded, even
//! those answered with an error. `image_url` parts must be base64 `data:` URLs of a JPEG, PNG,
//! GIF or WebP whose bytes match the declared type, else a 400 as from OpenAI;
//! [`sent_images`] decodes those a request carried.
//!
//! `POST /v1/embeddings` answers with a deterministic embedding in which synonyms are close
//! ([`embeddings`]); its calls are recorded apart from the chat requests.
//!
//! `POST /v1/audio/transcriptions` answers transcription requests (see `transcriptions`):
//! [`FakeLlm::push_transcript`] scripts them, [`FakeLlm::transcriptions`] lists them.
//!
//! [`FakeLlm::start_with_quirks`] makes it behave like a server users run instead of the hosted
//! API ([`Quirks::llama_cpp`]: no usage in streams, an empty 200 stream on overflow, …).

mod caching;
mod connection;
pub mod embeddings;
pub mod load;
mod quirks;
pub mod transcriptions;

pub use embeddings::EmbeddingCall;
pub use quirks::{Quirks, request_tokens};
pub use transcriptions::{
    FORMATS as TRANSCRIPTION_FORMATS, MAX_FILE_BYTES as MAX_TRANSCRIPTION_BYTES, TranscriptionCall,
};

pub use crate::fake_server::prompt_cache::PrefixHit;
pub use crate::fake_server::{Scripted, SentImage, split_context_line, split_text, without_context_line};

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::fake_server::prompt_cache::{OpenAiCache, SlotCache};
use crate::fake_server::{
    CallLog, ModelScript, ServerTask, Settled, bind_loopback, event_stream, event_stream_at_once, event_stream_paced,
    images, json_or_text, json_status, lock,
};

impl Scripted {
    /// A 400 with OpenAI's `context_length_exceeded` error body.
    pub fn context_overflow() -> Scripted {
        Scripted::Status {
            code: 400,
            retry_after: None,
            body: error_body(
                "This model's maximum context length is 8192 tokens.",
                "invalid_request_error",
                "context_length_exceeded",
            ),
        }
    }

    /// A 429 with a `Retry-After` header.
    pub fn rate_limited(retry_after_secs: u64) -> Scripted {
        Scripted::Status {
            code: 429,
            retry_after: Some(retry_after_secs),
            body: error_body("Rate limit reached.", "requests", "rate_limit_exceeded"),
        }
    }

    /// A 500 with an OpenAI-style body.
    pub fn server_error() -> Scripted {
        Scripted::Status {
            code: 500,
            retry_after: None,
            body: error_body("The server had an error.", "server_error", "internal_error"),
        }
    }
}

/// An OpenAI-style error body.
pub fn error_body(message: &str, kind: &str, code: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

struct Shared {
    script: ModelScript,
    /// (needle, answer), tried before `script`, oldest first; each answers one request.
    conditional: Mutex<Vec<(String, Scripted)>>,
    requests: CallLog<Value>,
    embedding_calls: CallLog<EmbeddingCall>,
    embeddings_failing: embeddings::Failing,
    /// Answers to transcription requests, in order.
    transcript_script: ModelScript,
    transcriptions: CallLog<TranscriptionCall>,
    api_key: Option<String>,
    quirks: Quirks,
    /// Set for a load test: a fixed answer for every request, none recorded (see [`load`]).
    load: Option<load::LoadModel>,
    /// The hosted API's prompt cache, unless `quirks.slot_cache` ...
    cache: OpenAiCache,
    /// ... makes it llama.cpp's one slot.
    slot: SlotCache,
}

/// The running server; stops when dropped.
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: ServerTask,
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.shared.script.release_hangs();
        self.shared.transcript_script.release_hangs();
    }
}

impl FakeLlm {
    /// Starts a server that accepts any (or no) API key.
    pub async fn start() -> FakeLlm {
        Self::spawn(None, Quirks::default()).await
    }

    /// Starts a server that answers 401 unless `Authorization: Bearer <key>` is sent.
    pub async fn start_with_key(key: &str) -> FakeLlm {
        Self::spawn(Some(key.to_owned()), Quirks::default()).await
    }

    /// Starts a server that behaves like a local one (see [`Quirks`]).
    pub async fn start_with_quirks(quirks: Quirks) -> FakeLlm {
        Self::spawn(None, quirks).await
    }

    /// Starts a server for a load test: every request gets `model`'s answer after its delay,
    /// and nothing is recorded, so memory stays flat however many turns run.
    pub async fn start_for_load(model: load::LoadModel) -> FakeLlm {
        Self::spawn_with(None, Quirks::default(), Some(model)).await
    }

    async fn spawn(api_key: Option<String>, quirks: Quirks) -> FakeLlm {
        Self::spawn_with(api_key, quirks, None).await
    }

    async fn spawn_with(api_key: Option<String>, quirks: Quirks, load: Option<load::LoadModel>) -> FakeLlm {
        let shared = Arc::new(Shared {
            script: ModelScript::new(),
            conditional: Mutex::new(Vec::new()),
            requests: CallLog::new(),
            embedding_calls: CallLog::new(),
            embeddings_failing: embeddings::Failing::default(),
            transcript_script: ModelScript::new(),
            transcriptions: CallLog::new(),
            api_key,
            quirks,
            load,
            cache: OpenAiCache::default(),
            slot: SlotCache::default(),
        });
        let transcriptions =
            post(transcriptions::transcriptions).layer(DefaultBodyLimit::max(transcriptions::BODY_LIMIT));
        let router = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/models", axum::routing::get(models))
            .route("/v1/embeddings", post(embeddings::embeddings))
            .route("/v1/audio/transcriptions", transcriptions)
            .with_state(shared.clone());
        let (listener, addr) = bind_loopback("FakeLlm").await;
        // Its own accept loop, so that an answer can close its connection (see `connection`).
        let server = ServerTask::spawn(|accepted| connection::accept_loop(listener, router, accepted));
        FakeLlm { addr, shared, server }
    }

    /// How many connections clients opened to the server so far.
    pub fn connections_accepted(&self) -> usize {
        self.server.accepted()
    }

    /// `http://127.0.0.1:PORT/v1`, ready for a provider's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues an answer; answers are used in the order queued.
    pub fn push(&self, step: Scripted) {
        self.shared.script.push(step);
    }

    /// Queues an answer for the first request whose system message or last user message
    /// contains `needle`. Such answers are tried before the plain queue ([`FakeLlm::push`]),
    /// the oldest matching one first, and each is used once; a request that matches none gets
    /// the plain queue's next answer (or the echo).
    pub fn push_when(&self, needle: &str, step: Scripted) {
        lock(&self.shared.conditional).push((needle.to_owned(), step));
    }

    /// Queues the answer to a transcription request: `Scripted::Text` is the transcript,
    /// `Scripted::Status` an error (`Scripted::server_error()`), `Scripted::Delay` a slow one.
    pub fn push_transcript(&self, step: Scripted) {
        self.shared.transcript_script.push(step);
    }

    /// Every transcription request received so far, in order.
    pub fn transcriptions(&self) -> Vec<TranscriptionCall> {
        self.shared.transcriptions.all()
    }

    /// Every chat request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.all()
    }

    /// Drops the recorded request bodies (the count [`FakeLlm::wait_for_requests`] waits on
    /// keeps growing), so a run of many thousand turns does not hold them all.
    pub fn forget_requests(&self) {
        self.shared.requests.forget();
    }

    /// Waits until at least `n` requests arrived or `timeout` passed; returns them all
    /// either way (the caller asserts on the count).
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<Value> {
        self.shared.requests.wait_for_count(n, timeout).await;
        self.requests()
    }

    /// Every call of `/v1/embeddings` so far, in order, refused ones included.
    pub fn embedding_calls(&self) -> Vec<EmbeddingCall> {
        self.shared.embedding_calls.all()
    }

    /// What a load test's model was sent (with [`FakeLlm::start_for_load`]).
    pub fn load_input(&self) -> Option<load::LoadInput> {
        self.shared.load.as_ref().map(load::LoadModel::input)
    }

    /// What llama.cpp's slot reused of each request's prompt, in order (with
    /// [`Quirks::llama_cpp`]; the server's log says it, its answers do not).
    pub fn prefix_hits(&self) -> Vec<PrefixHit> {
        self.shared.slot.hits()
    }

    /// From now on `/v1/embeddings` answers 500 (`true`) or works again (`false`).
    pub fn fail_embeddings(&self, failing: bool) {
        self.shared.embeddings_failing.set(failing);
    }
}

async fn chat_completions(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = json_or_text(&body);
    if let Some(model) = &shared.load {
        let reply = model.reply(&request).await;
        return answer(&shared, 0, &request, reply);
    }
    let number = shared.requests.record(request.clone());
    if let Some(refusal) = refusal(&shared, &headers, &request) {
        return refusal;
    }
    let streamed = request.get("stream").and_then(Value::as_bool) == Some(true);
    let chosen = take_conditional(&shared, &request);
    match shared.script.play(chosen, streamed, &last_user_content(&request)).await {
        Settled::Response(response) => response,
        Settled::Interrupted => interrupted_stream(number, &request),
        Settled::Text(text) => answer(&shared, number, &request, within_max_tokens(&request, text)),
        // A model the server showed no tools cannot call one: it answers in words.
        Settled::ToolCalls(_) if shared.quirks.tools_need_choice && !caching::tools_shown(&shared, &request) => {
            answer(&shared, number, &request, Answer::Text("I have no tools for that.".into(), "stop"))
        }
        Settled::ToolCalls(calls) => {
            let calls = calls.into_iter().map(|(name, args)| (next_call_id(&shared), name, args)).collect();
            answer(&shared, number, &request, Answer::ToolCalls(calls))
        }
    }
}

/// What the server refuses before looking at the script: a wrong key, a body that is no JSON
/// object, and what its quirks refuse.
fn refusal(shared: &Shared, headers: &HeaderMap, request: &Value) -> Option<Response> {
    if let Some(refusal) = key_refusal(shared, headers) {
        return Some(refusal);
    }
    if !request.is_object() {
        return Some(json_status(
            400,
            None,
            error_body("We could not parse the JSON body of your request.", "invalid_request_error", "invalid_json"),
        ));
    }
    if let Some(why) = image_parts(request).find_map(Result::err) {
        return Some(json_status(400, None, error_body(&why, "invalid_request_error", "invalid_image_format")));
    }
    quirks::refusal(&shared.quirks, request)
}

/// `GET /v1/models`, as OpenAI answers it: the key is checked as for chat, and the list
/// names the one model the tests' daemons are configured with.
async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(refused) = key_refusal(&shared, &headers) {
        return refused;
    }
    let model =
        serde_json::json!({"id": "fake-model", "object": "model", "created": 1_700_000_000, "owned_by": "fake"});
    json_status(200, None, serde_json::json!({"object": "list", "data": [model]}))
}

/// A 401 when the server wants a key and the request does not carry it.
fn key_refusal(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let key = shared.api_key.as_ref()?;
    let expected = format!("Bearer {key}");
    if headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) == Some(expected.as_str()) {
        return None;
    }
    let body = error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key");
    Some(json_status(401, None, body))
}

/// The images a request carried as `image_url` parts (a `data:` URL each), in order.
pub fn sent_images(request: &Value) -> Vec<SentImage> {
    image_parts(request).filter_map(Result::ok).collect()
}

fn image_parts(request: &Value) -> impl Iterator<Item = Result<SentImage, String>> {
    images::parts(request).filter(|part| part["type"] == "image_url").map(|part| {
        let url = part["image_url"]["url"].as_str().ok_or("image_url.url: a string is required")?;
        images::decode_data_url(url)
    })
}

/// The oldest conditional answer whose needle is in the request's system or last user message.
fn take_conditional(shared: &Shared, request: &Value) -> Option<Scripted> {
    let mut conditional = lock(&shared.conditional);
    if conditional.is_empty() {
        return None;
    }
    let system: String = messages(request)
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
        .map(content_text)
        .collect::<Vec<_>>()
        .join("\n");
    let user = last_user_content(request);
    let index = conditional.iter().position(|(needle, _)| system.contains(needle) || user.contains(needle))?;
    Some(conditional.remove(index).1)
}

/// Like a real server, stops at the request's `max_tokens` (or `max_completion_tokens`),
/// about four characters a token, and says so with `finish_reason: "length"`.
fn within_max_tokens(request: &Value, text: String) -> Answer {
    let limit = ["max_completion_tokens", "max_tokens"].iter().find_map(|key| request.get(*key)?.as_u64());
    match limit.and_then(|tokens| text.char_indices().nth(usize::try_from(tokens).ok()?.saturating_mul(4))) {
        Some((cut, _)) => Answer::Text(text[..cut].to_owned(), "length"),
        None => Answer::Text(text, "stop"),
    }
}

fn next_call_id(shared: &Shared) -> String {
    format!("call_{}", shared.script.next_call_id())
}

enum Answer {
    /// The text and why it ended: `stop`, or `length` when `max_tokens` cut it.
    Text(String, &'static str),
    /// (id, name, arguments)
    ToolCalls(Vec<(String, String, Value)>),
}

/// Plausible usage: about four characters per token. Like real servers, the prompt count
/// includes the tool schemas the model is shown, and the cache says what it served.
fn usage(shared: &Shared, request: &Value, answer: &Answer) -> Value {
    let completion_chars = match answer {
        Answer::Text(text, _) => text.chars().count(),
        Answer::ToolCalls(calls) => calls.iter().map(|(_, name, args)| name.len() + args.to_string().len()).sum(),
    };
    let prompt = match &shared.load {
        Some(model) => {
            let prompt =
                if model.prompt_cache { caching::serve(shared, request) } else { caching::count(shared, request) };
            model.count(prompt.total, prompt.cached);
            prompt
        }
        None => caching::serve(shared, request),
    };
    caching::usage_json(shared, prompt, (completion_chars / 4).max(1))
}

/// The texts of a request's user messages, in order, without their context lines.
pub fn user_texts(request: &Value) -> Vec<String> {
    messages(request)
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| without_context_line(&content_text(m)).to_owned())
        .collect()
}

/// The context lines of a request's user messages, in order (`None` for a message without).
pub fn context_lines(request: &Value) -> Vec<Option<String>> {
    messages(request)
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| split_context_line(&content_text(m)).0.map(str::to_owned))
        .collect()
}

fn messages(request: &Value) -> impl Iterator<Item = &Value> {
    request.get("messages").and_then(Value::as_array).into_iter().flatten()
}

/// A message's text: a string, or the `text` of its content parts.
fn content_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text")?.as_str()).collect(),
        _ => String::new(),
    }
}

fn last_user_content(request: &Value) -> String {
    messages(request)
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .last()
        .map(content_text)
        .unwrap_or_default()
}

fn answer(shared: &Shared, number: usize, request: &Value, answer: Answer) -> Response {
    let model = request.get("model").and_then(Value::as_str).unwrap_or("fake-model").to_owned();
    let usage = usage(shared, request, &answer);
    let id = format!("chatcmpl-fake-{number}");
    if request.get("stream").and_then(Value::as_bool) == Some(true) {
        let usage = (!shared.quirks.no_stream_usage).then_some(usage);
        let frames = stream_frames(&id, &model, answer, usage);
        // A load test's model takes exactly its delay: its stream comes at once, not paced.
        match (&shared.load, shared.quirks.stream_pace) {
            (Some(_), _) => event_stream_at_once(frames.concat()),
            (None, Some(pace)) => event_stream_paced(frames, pace),
            (None, None) => event_stream(frames),
        }
    } else {
        axum::Json(whole_answer(&id, &model, answer, usage)).into_response()
    }
}

fn wire_calls(calls: &[(String, String, Value)]) -> Vec<Value> {
    calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}))
        .collect()
}

fn whole_answer(id: &str, model: &str, answer: Answer, usage: Value) -> Value {
    let (message, finish) = match answer {
        Answer::Text(text, finish) => (json!({"role": "assistant", "content": text}), finish),
        // Like OpenAI: `content` is null when the model only calls tools.
        Answer::ToolCalls(calls) => {
            (json!({"role": "assistant", "content": null, "tool_calls": wire_calls(&calls)}), "tool_calls")
        }
    };
    json!({
        "id": id, "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    })
}

fn stream_frames(id: &str, model: &str, answer: Answer, usage: Option<Value>) -> Vec<String> {
    let chunk = |choices: Value| json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": choices});
    let delta = |delta: Value| chunk(json!([{"index": 0, "delta": delta, "finish_reason": null}]));
    let mut events = vec![delta(json!({"role": "assistant", "content": ""}))];
    let finish = match answer {
        Answer::Text(text, finish) => {
            events.extend(split_text(&text, 4).into_iter().map(|piece| delta(json!({"content": piece}))));
            finish
        }
        Answer::ToolCalls(calls) => {
            for (index, (call_id, name, args)) in calls.iter().enumerate() {
                let head = json!({"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}});
                events.push(delta(json!({"tool_calls": [head]})));
                for piece in split_text(&args.to_string(), 3) {
                    events.push(delta(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})));
                }
            }
            "tool_calls"
        }
    };
    events.push(chunk(json!([{"index": 0, "delta": {}, "finish_reason": finish}])));
    if let Some(usage) = usage {
        let mut usage_chunk = chunk(json!([]));
        usage_chunk["usage"] = usage;
        events.push(usage_chunk);
    }

    let mut frames: Vec<String> = events.iter().map(|event| format!("data: {event}\n\n")).collect();
    frames.push("data: [DONE]\n\n".to_owned());
    frames
}

fn interrupted_stream(number: usize, request: &Value) -> Response {
    let model = request.get("model").and_then(Value::as_str).unwrap_or("fake-model");
    let role = json!({"id": format!("chatcmpl-fake-{number}"), "object": "chat.completion.chunk", "created": 0,
        "model": model, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": null}]});
    event_stream_at_once(format!("data: {role}\n\ndata: [DONE]\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(response: Value) -> String {
        response["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_owned()
    }

    async fn ask(llm: &FakeLlm, system: &str, user: &str) -> String {
        let body = json!({"model": "m", "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "earlier question"},
            {"role": "assistant", "content": "earlier answer"},
            {"role": "user", "content": user},
        ]});
        let url = format!("{}/chat/completions", llm.base_url());
        text_of(reqwest::Client::new().post(url).json(&body).send().await.unwrap().json().await.unwrap())
    }

    #[tokio::test]
    async fn conditional_answers_go_to_the_request_that_matches() {
        let llm = FakeLlm::start().await;
        llm.push(Scripted::Text("first in line".into()));
        llm.push_when("prompt mode minimal", Scripted::Text("for the sub-agent".into()));
        llm.push_when("weather", Scripted::Text("sunny".into()));
        // Neither needle: the plain queue, then the echo.
        assert_eq!(ask(&llm, "prompt mode full", "hello").await, "first in line");
        // The user message matches; then the system message matches.
        assert_eq!(ask(&llm, "prompt mode full", "what is the weather?").await, "sunny");
        assert_eq!(ask(&llm, "runtime: prompt mode minimal", "task").await, "for the sub-agent");
        // Each conditional answer is used once; only the last user message counts.
        assert_eq!(ask(&llm, "prompt mode minimal", "weather again").await, "echo: weather again");
        assert_eq!(ask(&llm, "x", "earlier").await, "echo: earlier");
    }

    #[tokio::test]
    async fn the_oldest_matching_conditional_answer_wins() {
        let llm = FakeLlm::start().await;
        llm.push_when("task", Scripted::Text("one".into()));
        llm.push_when("task", Scripted::Text("two".into()));
        assert_eq!(ask(&llm, "s", "a task").await, "one");
        assert_eq!(ask(&llm, "s", "a task").await, "two");
    }

    #[test]
    fn echo_uses_the_last_user_message() {
        let request = json!({"messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": [{"type": "text", "text": "second"}]},
            {"role": "tool", "content": "result", "tool_call_id": "c"},
        ]});
        assert_eq!(last_user_content(&request), "second");
        assert_eq!(last_user_content(&json!({})), "");
    }
}
