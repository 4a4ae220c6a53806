//! The OpenAI chat-completions wire format: request encoding, response decoding (whole and
//! streamed) and error bodies. Pure functions, so they are tested without a server.
//!
//! Decoding is deliberately liberal: local servers (Ollama, llama.cpp, vLLM) leave out fields,
//! send `null` where OpenAI sends `[]`, or send tool arguments as objects instead of strings.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_channels::contract::Usage;

use crate::provider::http::refusal;
use crate::provider::images::Attached;
use crate::provider::openai::OpenAiHints;
use crate::provider::{ChatMessage, ChatRequest, ChatResponse, ProviderError, Role, ToolCall, ToolChoice};

#[derive(Debug, Serialize)]
pub struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cache_prompt: bool,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: Role,
    /// Never `null`: llama.cpp-style servers answer 500 to an assistant message with tool
    /// calls and `content: null`.
    content: WireContent<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

/// A string, or (a user message with images, for a vision model) content parts: the text,
/// then one `image_url` part with a `data:` URL per image.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<Value>),
}

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    /// A JSON document in a string, as the API wants it.
    arguments: String,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionDef<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunctionDef<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// Builds the request body. With `stream`, also asks for the usage chunk at the end; `hints`
/// say which fields beyond the common ones this server takes.
pub(super) fn encode_request<'a>(
    request: &'a ChatRequest<'_>,
    stream: bool,
    images: Option<&'a Attached>,
    hints: OpenAiHints,
) -> WireRequest<'a> {
    let (max_tokens, max_completion_tokens) =
        if hints.max_completion_tokens { (None, request.max_tokens) } else { (request.max_tokens, None) };
    WireRequest {
        model: &request.model,
        messages: encode_messages(&request.messages, images),
        tools: request
            .tools
            .iter()
            .map(|tool| WireTool {
                kind: "function",
                function: WireFunctionDef {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: &tool.parameters,
                },
            })
            .collect(),
        tool_choice: if request.tools.is_empty() { None } else { Some(encode_tool_choice(&request.tool_choice)) },
        max_tokens,
        max_completion_tokens,
        temperature: request.temperature,
        stream,
        stream_options: stream.then_some(StreamOptions { include_usage: true }),
        prompt_cache_key: request.cache_key.as_deref().filter(|_| hints.prompt_cache_key),
        cache_prompt: hints.cache_prompt,
    }
}

/// The messages as the API takes them. System messages before the conversation (the system
/// prompt, then a compaction's summary) become one: strict chat templates (Mistral, Gemma)
/// refuse a system message anywhere but first.
fn encode_messages<'a>(messages: &'a [ChatMessage], images: Option<&'a Attached>) -> Vec<WireMessage<'a>> {
    let leading = messages.iter().take_while(|message| message.role == Role::System).count();
    let mut out = Vec::with_capacity(messages.len());
    if leading > 1 {
        let joined = messages[..leading].iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n\n");
        out.push(WireMessage {
            role: Role::System,
            content: WireContent::Text(Cow::Owned(joined)),
            tool_calls: Vec::new(),
            tool_call_id: None,
        });
    }
    let skip = if leading > 1 { leading } else { 0 };
    out.extend(
        messages
            .iter()
            .enumerate()
            .skip(skip)
            .map(|(index, message)| encode_message(message, Attached::of(images, index))),
    );
    out
}

/// `tool_choice` as the API spells it. `auto` is sent too, not left to the default:
/// llama-cpp-python renders no tools at all for the model when `tool_choice` is absent.
fn encode_tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => Value::from("auto"),
        ToolChoice::None => Value::from("none"),
        ToolChoice::Required => Value::from("required"),
        ToolChoice::Named(name) => serde_json::json!({"type": "function", "function": {"name": name}}),
    }
}

fn encode_message<'a>(message: &'a ChatMessage, images: Option<&'a Attached>) -> WireMessage<'a> {
    let tool_calls = message
        .tool_calls
        .iter()
        .map(|call| WireToolCall {
            id: &call.id,
            kind: "function",
            function: WireFunctionCall { name: &call.name, arguments: encode_arguments(&call.arguments) },
        })
        .collect();
    WireMessage {
        role: message.role,
        content: encode_content(message.text_for_model(), images),
        tool_calls,
        // Only tool results carry the id; `name` is left out, as strict servers refuse it.
        tool_call_id: (message.role == Role::Tool).then_some(message.tool_call_id.as_deref()).flatten(),
    }
}

fn encode_content<'a>(content: Cow<'a, str>, images: Option<&'a Attached>) -> WireContent<'a> {
    let Some(images) = images else { return WireContent::Text(content) };
    let text = images.text(&content);
    if images.images.is_empty() {
        return WireContent::Text(Cow::Owned(text));
    }
    let mut parts = vec![serde_json::json!({"type": "text", "text": text})];
    parts.extend(
        images
            .images
            .iter()
            .map(|image| serde_json::json!({"type": "image_url", "image_url": {"url": image.data_url()}})),
    );
    WireContent::Parts(parts)
}

/// Arguments the model wrote as invalid JSON were kept as a string: send them back verbatim.
fn encode_arguments(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// Arguments as the model wrote them; invalid JSON is kept as a string so the agent loop can
/// tell the model, instead of failing the whole call.
pub(super) fn decode_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// Tool arguments arrive as a string (OpenAI) or, from some local servers, as an object.
fn arguments_text(arguments: Option<Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text,
        Some(other) => other.to_string(),
    }
}

/// Message content: a string, or (rarely) an array of `{type: "text", text}` parts.
fn content_text(content: Option<Value>) -> String {
    match content {
        Some(Value::String(text)) => text,
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text")?.as_str()).collect(),
        _ => String::new(),
    }
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    /// OpenAI: `cached_tokens`, the part of the prompt its cache served.
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Debug, Default, Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// llama.cpp's server reports what it reused of the previous prompt in `timings.cache_n`
/// (beside, not inside, `usage`).
#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct Timings {
    #[serde(default)]
    cache_n: Option<u64>,
}

impl WireUsage {
    fn into_usage(self, timings: Option<Timings>) -> Usage {
        let cached = self
            .prompt_tokens_details
            .and_then(|details| details.cached_tokens)
            .or(timings.and_then(|timings| timings.cache_n))
            .unwrap_or(0);
        Usage::new(self.prompt_tokens.unwrap_or(0), self.completion_tokens.unwrap_or(0)).with_cache(cached, 0)
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct CompletionResponse {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    timings: Option<Timings>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<ResponseMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<ResponseToolCall>>,
}

#[derive(Debug, Deserialize)]
struct ResponseToolCall {
    #[serde(default)]
    id: Option<String>,
    function: ResponseFunction,
}

#[derive(Debug, Deserialize)]
struct ResponseFunction {
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Turns a whole (non-streamed) answer into a [`ChatResponse`].
pub(super) fn decode_response(body: &[u8]) -> Result<ChatResponse, ProviderError> {
    let parsed: CompletionResponse =
        serde_json::from_slice(body).map_err(|e| ProviderError::Decode(format!("chat completion: {e}")))?;
    let choice = parsed
        .choices
        .and_then(|choices| choices.into_iter().next())
        .ok_or_else(|| ProviderError::Decode("chat completion without choices".into()))?;
    let message = choice.message.ok_or_else(|| ProviderError::Decode("choice without a message".into()))?;
    let tool_calls = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, call)| ToolCall {
            id: call.id.filter(|id| !id.is_empty()).unwrap_or_else(|| fallback_call_id(i)),
            name: call.function.name,
            arguments: decode_arguments(&arguments_text(call.function.arguments)),
        })
        .collect();
    Ok(ChatResponse {
        content: content_text(message.content),
        tool_calls,
        usage: parsed.usage.map(|usage| usage.into_usage(parsed.timings)).unwrap_or_default(),
        model: parsed.model.unwrap_or_default(),
        finish_reason: choice.finish_reason,
    })
}

/// Some local servers leave tool-call ids out; the transcript needs one to pair results.
fn fallback_call_id(index: usize) -> String {
    format!("call_auto_{index}")
}

/// Maps an error answer to a [`ProviderError`], with the provider's own message.
/// `secret` (the API key) is blanked out of the message should the provider echo it.
pub(super) fn error_from_body(
    status: u16,
    retry_after: Option<std::time::Duration>,
    body: &[u8],
    secret: Option<&str>,
) -> ProviderError {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let (message, code) = match &json {
        Some(value) => error_fields(value),
        None => (None, None),
    };
    let overflow_code = code.as_deref() == Some("context_length_exceeded");
    refusal(status, retry_after, message, body, overflow_code, secret)
}

/// An `error` object inside a stream (after the 200): its `code` is the HTTP status some
/// servers (vLLM) would have sent; otherwise it counts as a server error.
pub(super) fn error_from_stream(error: &Value, secret: Option<&str>) -> ProviderError {
    let status = error.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()).unwrap_or(500);
    let body = serde_json::json!({ "error": error }).to_string();
    error_from_body(status, None, body.as_bytes(), secret)
}

/// `(message, code)` from the shapes seen in the wild: OpenAI `{error: {message, code,
/// type}}`, Ollama `{error: "…"}`, and `{message}` / `{detail}` from other servers.
fn error_fields(body: &Value) -> (Option<String>, Option<String>) {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    match body.get("error") {
        Some(Value::Object(error)) => (text(error.get("message")), text(error.get("code")).or(text(error.get("type")))),
        Some(Value::String(message)) => (Some(message.clone()), None),
        _ => (text(body.get("message")).or(text(body.get("detail"))), None),
    }
}

mod stream;
#[cfg(test)]
mod tests;

pub use stream::StreamAccumulator;
