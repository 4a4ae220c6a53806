//! A scripted Anthropic Messages API: `POST /v1/messages` on 127.0.0.1, a random port.
//! Scripted like [`FakeLlm`](crate::fake_llm::FakeLlm), with the same [`Scripted`] steps;
//! with nothing queued it echoes the last user text.
//!
//! `"stream": true` requests get Anthropic-shaped server-sent events (`message_start`, text in
//! several `text_delta`s, tool calls as `tool_use` blocks whose input is split over several
//! `input_json_delta`s, `message_delta` with usage, `message_stop`, a `ping` in between);
//! others get one JSON message. Every request is recorded with its headers, even those
//! answered with an error. Requests without `anthropic-version` or `max_tokens` get a 400,
//! as from the real API, and so do `image` blocks whose base64 source is not a JPEG, PNG, GIF
//! or WebP of the declared `media_type`; [`sent_images`] decodes those a request carried.
//!
//! Its prompt cache is Anthropic's (see [`crate::fake_server::prompt_cache`]): nothing is
//! cached without `cache_control` breakpoints, more than four is a 400, and usage reports
//! `cache_read_input_tokens` and `cache_creation_input_tokens` beside `input_tokens`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::fake_server::images;
use crate::fake_server::prompt_cache::{AnthropicCache, AnthropicUsage};
use crate::fake_server::{
    CallLog, ModelScript, ServerTask, Settled, bind_loopback, event_stream, event_stream_at_once, json_or_text,
    json_status, split_text,
};
pub use crate::fake_server::{Scripted, SentImage};

/// An Anthropic-style error body.
pub fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// 529 `overloaded_error`, transient.
pub fn overloaded() -> Scripted {
    Scripted::Status { code: 529, retry_after: None, body: error_body("overloaded_error", "Overloaded") }
}

/// 429 with `retry-after`.
pub fn rate_limited(retry_after_secs: u64) -> Scripted {
    let body = error_body("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit");
    Scripted::Status { code: 429, retry_after: Some(retry_after_secs), body }
}

/// 400 "prompt is too long", the Messages API's context overflow.
pub fn prompt_too_long() -> Scripted {
    let body = error_body("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum");
    Scripted::Status { code: 400, retry_after: None, body }
}

/// 500 `api_error`.
pub fn server_error() -> Scripted {
    Scripted::Status { code: 500, retry_after: None, body: error_body("api_error", "Internal server error") }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

struct Shared {
    script: ModelScript,
    requests: CallLog<Recorded>,
    api_key: Option<String>,
    cache: AnthropicCache,
}

/// The running server; stops when dropped.
pub struct FakeAnthropic {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _server: ServerTask,
}

impl Drop for FakeAnthropic {
    fn drop(&mut self) {
        self.shared.script.release_hangs();
    }
}

impl FakeAnthropic {
    /// Starts a server that accepts any (or no) key.
    pub async fn start() -> FakeAnthropic {
        Self::spawn(None).await
    }

    /// Starts a server that answers 401 unless `x-api-key: <key>` is sent.
    pub async fn start_with_key(key: &str) -> FakeAnthropic {
        Self::spawn(Some(key.to_owned())).await
    }

    async fn spawn(api_key: Option<String>) -> FakeAnthropic {
        let shared = Arc::new(Shared {
            script: ModelScript::new(),
            requests: CallLog::new(),
            api_key,
            cache: Default::default(),
        });
        let router = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/models", axum::routing::get(models))
            .with_state(shared.clone());
        let (listener, addr) = bind_loopback("FakeAnthropic").await;
        let server = ServerTask::serve("FakeAnthropic", listener, router);
        FakeAnthropic { addr, shared, _server: server }
    }

    /// `http://127.0.0.1:PORT`, ready for a provider's `base_url` (no `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues an answer; answers are used in the order queued.
    pub fn push(&self, step: Scripted) {
        self.shared.script.push(step);
    }

    /// Every request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.with(|requests| requests.iter().map(|r| r.body.clone()).collect())
    }

    /// Every request with its headers.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.shared.requests.all()
    }

    /// Waits until at least `n` requests arrived or `timeout` passed; returns them all.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<Value> {
        self.shared.requests.wait_for_count(n, timeout).await;
        self.requests()
    }
}

fn record(shared: &Shared, headers: &HeaderMap, body: &Bytes) -> Value {
    let request = json_or_text(body);
    let headers = headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    shared.requests.record(Recorded { headers, body: request.clone() });
    request
}

/// `GET /v1/models`, as Anthropic answers it: the key and the version header checked as for
/// messages, one page listing the model the tests' daemons are configured with.
async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(key) = &shared.api_key
        && header("x-api-key") != Some(key.as_str())
    {
        return json_status(401, None, error_body("authentication_error", "invalid x-api-key"));
    }
    if header("anthropic-version").is_none() {
        return json_status(400, None, error_body("invalid_request_error", "anthropic-version: header is required"));
    }
    let model = serde_json::json!({
        "type": "model", "id": "claude-e2e", "display_name": "Claude (fake)", "created_at": "2025-01-01T00:00:00Z"
    });
    json_status(
        200,
        None,
        serde_json::json!({"data": [model], "has_more": false, "first_id": "claude-e2e", "last_id": "claude-e2e"}),
    )
}

/// What the real API would refuse before looking at the script.
fn refusal(shared: &Shared, headers: &HeaderMap, request: &Value) -> Option<Response> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(key) = &shared.api_key
        && header("x-api-key") != Some(key.as_str())
    {
        return Some(json_status(401, None, error_body("authentication_error", "invalid x-api-key")));
    }
    if header("anthropic-version").is_none() {
        return Some(json_status(
            400,
            None,
            error_body("invalid_request_error", "anthropic-version: header is required"),
        ));
    }
    if !request.is_object() || request.get("max_tokens").and_then(Value::as_u64).is_none() {
        return Some(json_status(400, None, error_body("invalid_request_error", "max_tokens: Field required")));
    }
    if let Some(why) = image_blocks(request).find_map(Result::err) {
        return Some(json_status(400, None, error_body("invalid_request_error", &why)));
    }
    let breakpoints = crate::fake_server::prompt_cache::breakpoints(request);
    if breakpoints > crate::fake_server::prompt_cache::MAX_BREAKPOINTS {
        let why = format!("A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}.");
        return Some(json_status(400, None, error_body("invalid_request_error", &why)));
    }
    None
}

/// The images a request carried as `image` blocks (base64 sources), in order.
pub fn sent_images(request: &Value) -> Vec<SentImage> {
    image_blocks(request).filter_map(Result::ok).collect()
}

fn image_blocks(request: &Value) -> impl Iterator<Item = Result<SentImage, String>> {
    images::parts(request).filter(|block| block["type"] == "image").map(|block| {
        let source = &block["source"];
        if source["type"] != "base64" {
            return Err("image.source.type: this fake takes \"base64\" sources only".to_owned());
        }
        let field = |name: &str| source[name].as_str().ok_or(format!("image.source.{name}: Field required"));
        images::decode(field("media_type")?, field("data")?)
    })
}

async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = record(&shared, &headers, &body);
    if let Some(response) = refusal(&shared, &headers, &request) {
        return response;
    }
    let streamed = request["stream"] == true;
    match shared.script.play(None, streamed, &last_user_text(&request)).await {
        Settled::Response(response) => response,
        // A stream cut short: `message_start`, then the body ends without `message_stop`.
        Settled::Interrupted => {
            let start = json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message",
                "role": "assistant", "model": request["model"], "content": [], "usage": {"input_tokens": 1, "output_tokens": 0}}});
            event_stream_at_once(format!("event: message_start\ndata: {start}\n\n"))
        }
        Settled::Text(text) => answer(&shared, &request, vec![json!({"type": "text", "text": text})]),
        Settled::ToolCalls(calls) => {
            let blocks = calls
                .into_iter()
                .map(|(name, input)| {
                    let id = format!("toolu_{}", shared.script.next_call_id());
                    json!({"type": "tool_use", "id": id, "name": name, "input": input})
                })
                .collect();
            answer(&shared, &request, blocks)
        }
    }
}

/// The text of the last user message that has any (tool results are not user text).
fn last_user_text(request: &Value) -> String {
    let messages = request.get("messages").and_then(Value::as_array).into_iter().flatten();
    messages
        .rev()
        .filter(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            Value::String(text) => text.clone(),
            Value::Array(blocks) => {
                blocks.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str()).collect()
            }
            _ => String::new(),
        })
        .find(|text| !text.is_empty())
        .unwrap_or_default()
}

/// Plausible usage: about four characters per token, the input split as the cache served it.
fn usage(shared: &Shared, request: &Value, blocks: &[Value]) -> (AnthropicUsage, u64) {
    // Refused earlier when its breakpoints are too many.
    let input = shared.cache.serve(request).unwrap_or_default();
    let output = blocks.iter().map(|b| b.to_string().len() as u64).sum::<u64>() / 4;
    (AnthropicUsage { input: input.input.max(1), ..input }, output.max(1))
}

fn usage_json(input: AnthropicUsage, output: u64) -> Value {
    json!({"input_tokens": input.input, "output_tokens": output,
        "cache_read_input_tokens": input.cache_read, "cache_creation_input_tokens": input.cache_creation})
}

fn answer(shared: &Shared, request: &Value, blocks: Vec<Value>) -> Response {
    let model = request["model"].as_str().unwrap_or("claude-fake").to_owned();
    let stop_reason = if blocks.iter().any(|b| b["type"] == "tool_use") { "tool_use" } else { "end_turn" };
    let (input, output) = usage(shared, request, &blocks);
    if request["stream"] == true {
        return stream_answer(&model, blocks, stop_reason, (input, output));
    }
    axum::Json(json!({
        "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
        "content": blocks, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": usage_json(input, output),
    }))
    .into_response()
}

fn stream_answer(
    model: &str,
    blocks: Vec<Value>,
    stop_reason: &str,
    (input, output): (AnthropicUsage, u64),
) -> Response {
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "usage": usage_json(input, 1)}}),
    )];
    for (index, block) in blocks.iter().enumerate() {
        events.extend(block_events(index, block));
        if index == 0 {
            events.push(("ping", json!({"type": "ping"})));
        }
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    let frames = events.iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect();
    event_stream(frames)
}

/// `content_block_start`, the deltas (text in four pieces, tool input JSON in three), `_stop`.
fn block_events(index: usize, block: &Value) -> Vec<(&'static str, Value)> {
    let delta =
        |delta: Value| ("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta}));
    let mut events = Vec::new();
    if block["type"] == "tool_use" {
        let start = json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}});
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        for piece in split_text(&block["input"].to_string(), 3) {
            events.push(delta(json!({"type": "input_json_delta", "partial_json": piece})));
        }
    } else {
        let start = json!({"type": "text", "text": ""});
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        for piece in split_text(block["text"].as_str().unwrap_or_default(), 4) {
            events.push(delta(json!({"type": "text_delta", "text": piece})));
        }
    }
    events.push(("content_block_stop", json!({"type": "content_block_stop", "index": index})));
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_skips_tool_results() {
        let request = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "first"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
        ]});
        assert_eq!(last_user_text(&request), "first");
        assert_eq!(last_user_text(&json!({"messages": [{"role": "user", "content": "plain"}]})), "plain");
    }
}
