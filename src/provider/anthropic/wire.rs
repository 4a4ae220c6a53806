//! The Anthropic Messages wire format: request encoding, whole-response decoding and error
//! bodies. Pure functions, tested without a server.
//!
//! The Messages API is stricter than OpenAI's about the conversation's shape: the system prompt
//! is a top-level field, roles must alternate user/assistant starting with user, tool results
//! are `tool_result` blocks inside a user message, and text blocks must not be empty. Our
//! transcript follows OpenAI's shape, so the encoder reshapes it here.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchboard_channels::contract::Usage;

use crate::config::CacheTtl;
use crate::provider::http::refusal;
use crate::provider::images::Attached;
use crate::provider::{ChatMessage, ChatRequest, ChatResponse, ProviderError, Role, ToolCall, ToolChoice};

/// Sent when the request sets no `max_tokens`: the Messages API requires one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Stands in for history cut off before its first user message: the API refuses a
/// conversation that starts with the assistant.
const OMITTED_HISTORY: &str = "(earlier messages omitted)";

#[derive(Debug, Serialize)]
pub struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    /// A string, or (with prompt caching) text blocks, the last one a cache breakpoint.
    #[serde(skip_serializing_if = "Value::is_null")]
    system: Value,
    messages: Vec<WireMessage>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

#[derive(Debug, Serialize, PartialEq)]
pub(super) struct WireMessage {
    role: &'static str,
    content: Vec<Value>,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<Value>,
}

/// Builds the request body. With `cache` (a lifetime), three `cache_control` breakpoints mark
/// what the next request will share with this one, rendered in the API's order: the end of the
/// tools, the end of the system prompt, and the newest message (of four allowed; a request
/// finds an earlier request's breakpoint up to 20 blocks before its own). Anthropic
/// caches nothing without them; a prefix shorter than the model's minimum is just not cached.
pub(super) fn encode_request<'a>(
    request: &'a ChatRequest<'_>,
    stream: bool,
    images: Option<&'a Attached>,
    cache: Option<CacheTtl>,
) -> WireRequest<'a> {
    let breakpoint = cache.map(cache_control);
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System && !m.content.trim().is_empty())
        .map(|m| m.content.as_str())
        .collect();
    let mut tools: Vec<WireTool<'a>> = request
        .tools
        .iter()
        .map(|tool| WireTool {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.parameters,
            cache_control: None,
        })
        .collect();
    let mut messages = encode_messages(&request.messages, images);
    if let Some(breakpoint) = &breakpoint {
        if let Some(last) = tools.last_mut() {
            last.cache_control = Some(breakpoint.clone());
        }
        // On the newest message's last block, but before what it recalled (see `encode_messages`).
        let recalled = request.messages.last().is_some_and(|message| message.recalled.is_some());
        if let Some(content) = messages.last_mut().map(|message| &mut message.content)
            && let Some(block) = content.len().checked_sub(1 + usize::from(recalled)).and_then(|at| content.get_mut(at))
        {
            block["cache_control"] = breakpoint.clone();
        }
    }
    WireRequest {
        model: &request.model,
        max_tokens: request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        system: system_field(&system, breakpoint),
        messages,
        tools,
        tool_choice: if request.tools.is_empty() { None } else { encode_tool_choice(&request.tool_choice) },
        temperature: request.temperature,
        stream,
    }
}

/// A breakpoint: `{"type": "ephemeral"}`, with `"ttl": "1h"` for the hour-long lifetime.
fn cache_control(ttl: CacheTtl) -> Value {
    match ttl {
        CacheTtl::FiveMinutes => json!({"type": "ephemeral"}),
        CacheTtl::OneHour => json!({"type": "ephemeral", "ttl": "1h"}),
    }
}

/// The system prompt (and a compaction's summary after it): a string, or with a breakpoint one
/// text block per part, the breakpoint on the first, the system prompt that every turn of the
/// chat shares (a new summary then still finds it cached); nothing when there is none.
fn system_field(parts: &[&str], breakpoint: Option<Value>) -> Value {
    match (parts, breakpoint) {
        ([], _) => Value::Null,
        (_, None) => Value::from(parts.join("\n\n")),
        (_, Some(breakpoint)) => {
            let mut blocks: Vec<Value> = parts.iter().map(|text| json!({"type": "text", "text": text})).collect();
            if let Some(first) = blocks.first_mut() {
                first["cache_control"] = breakpoint;
            }
            Value::Array(blocks)
        }
    }
}

/// `tool_choice` as the Messages API spells it; nothing for `auto`, its default.
fn encode_tool_choice(choice: &ToolChoice) -> Option<Value> {
    match choice {
        ToolChoice::Auto => None,
        ToolChoice::None => Some(json!({"type": "none"})),
        ToolChoice::Required => Some(json!({"type": "any"})),
        ToolChoice::Named(name) => Some(json!({"type": "tool", "name": name})),
    }
}

/// Turns the transcript into alternating user/assistant messages of content blocks; `images`
/// (read for a vision model) go with their message.
pub(super) fn encode_messages(messages: &[ChatMessage], images: Option<&Attached>) -> Vec<WireMessage> {
    let mut out: Vec<WireMessage> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let (role, blocks) = match message.role {
            Role::System => continue,
            Role::User => {
                let mut blocks = user_blocks(&message.text_without_recall(), Attached::of(images, index));
                // A block of its own, after the breakpoint: the next turn sends the message without it.
                blocks.extend(message.recalled.as_deref().and_then(text_block));
                ("user", blocks)
            }
            Role::Assistant => ("assistant", assistant_blocks(message)),
            // A tool result whose call was cut off with older history would be refused
            // ("unexpected tool_use_id"): leave it out.
            Role::Tool if out.last().is_none_or(|m| m.role == "user" && !has_tool_results(m)) => continue,
            Role::Tool => ("user", vec![tool_result_block(message)]),
        };
        push_blocks(&mut out, role, blocks);
    }
    if out.first().is_some_and(|m| m.role == "assistant") {
        out.insert(0, WireMessage { role: "user", content: vec![json!({"type": "text", "text": OMITTED_HISTORY})] });
    }
    out
}

fn has_tool_results(message: &WireMessage) -> bool {
    message.content.iter().any(|b| b["type"] == "tool_result")
}

/// Appends blocks to the last message when it has the same role (the API wants strict
/// alternation, so consecutive tool results become one user message); nothing is added for
/// an empty list, which keeps empty messages out.
fn push_blocks(out: &mut Vec<WireMessage>, role: &'static str, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(last) if last.role == role => last.content.extend(blocks),
        _ => out.push(WireMessage { role, content: blocks }),
    }
}

/// The API refuses empty text blocks.
fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// A user message's text; with images, an `image` block per image before it (as the API's
/// documentation advises) and a line per image left out.
fn user_blocks(content: &str, images: Option<&Attached>) -> Vec<Value> {
    let Some(images) = images else { return text_block(content).into_iter().collect() };
    let mut blocks: Vec<Value> = images
        .images
        .iter()
        .map(|image| {
            json!({"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.data}})
        })
        .collect();
    blocks.extend(text_block(&images.text(content)));
    blocks
}

fn assistant_blocks(message: &ChatMessage) -> Vec<Value> {
    let mut blocks: Vec<Value> = text_block(&message.content).into_iter().collect();
    blocks.extend(message.tool_calls.iter().map(
        |call| json!({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(&call.arguments)}),
    ));
    blocks
}

/// `input` must be an object; arguments the model wrote as invalid JSON were kept as a string,
/// and go back wrapped so the model still sees what it wrote.
fn tool_input(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        other => json!({"input": other}),
    }
}

fn tool_result_block(message: &ChatMessage) -> Value {
    json!({
        "type": "tool_result",
        "tool_use_id": message.tool_call_id.as_deref().unwrap_or_default(),
        "content": message.content,
    })
}

/// Tool input as the model wrote it; invalid JSON is kept as a string so the agent loop can
/// tell the model, instead of failing the whole call.
pub(super) fn decode_input(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Cached prompt tokens are input the model read too; they count as input.
    pub fn input(&self) -> Option<u64> {
        let parts = [self.input_tokens, self.cache_creation_input_tokens, self.cache_read_input_tokens];
        parts.iter().any(Option::is_some).then(|| parts.iter().flatten().sum())
    }

    pub fn output(&self) -> Option<u64> {
        self.output_tokens
    }

    /// (read from the cache, written into it)
    pub fn cache(&self) -> (u64, u64) {
        (self.cache_read_input_tokens.unwrap_or(0), self.cache_creation_input_tokens.unwrap_or(0))
    }

    /// The counts as switchboard keeps them.
    pub fn usage(&self) -> Usage {
        let (read, written) = self.cache();
        Usage::new(self.input().unwrap_or(0), self.output().unwrap_or(0)).with_cache(read, written)
    }
}

#[derive(Debug, Deserialize)]
struct MessageResponse {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Vec<Value>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: WireUsage,
}

/// Turns a whole (non-streamed) answer into a [`ChatResponse`].
pub(super) fn decode_response(body: &[u8]) -> Result<ChatResponse, ProviderError> {
    let parsed: MessageResponse =
        serde_json::from_slice(body).map_err(|e| ProviderError::Decode(format!("messages response: {e}")))?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for block in parsed.content {
        match block["type"].as_str() {
            Some("text") => content.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block["id"].as_str().unwrap_or_default().to_owned(),
                name: block["name"].as_str().unwrap_or_default().to_owned(),
                arguments: block.get("input").cloned().unwrap_or_else(|| json!({})),
            }),
            // Thinking and other block types carry nothing for the user.
            _ => {}
        }
    }
    Ok(ChatResponse {
        content,
        tool_calls,
        usage: parsed.usage.usage(),
        model: parsed.model.unwrap_or_default(),
        finish_reason: parsed.stop_reason,
    })
}

/// Maps an error answer (`{"type": "error", "error": {"type", "message"}}`) to a
/// [`ProviderError`]; `secret` is blanked out of the message should the provider echo it.
pub(super) fn error_from_body(
    status: u16,
    retry_after: Option<std::time::Duration>,
    body: &[u8],
    secret: Option<&str>,
) -> ProviderError {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let message =
        json.as_ref().and_then(|v| v["error"]["message"].as_str().or(v["message"].as_str()).map(str::to_owned));
    refusal(status, retry_after, message, body, false, secret)
}

/// An `error` event inside a stream (after the 200): its error type says which status the
/// API would have sent, so transient ones (`overloaded_error`) stay transient.
pub(super) fn error_from_event(data: &str, secret: Option<&str>) -> ProviderError {
    let json: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    let status = match json["error"]["type"].as_str().unwrap_or_default() {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    };
    error_from_body(status, None, data.as_bytes(), secret)
}

#[cfg(test)]
mod tests;
