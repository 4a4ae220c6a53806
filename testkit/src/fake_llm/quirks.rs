//! How OpenAI-compatible servers that users run depart from the hosted API, for [`FakeLlm`]
//! to behave like them. Each quirk was measured against the real server it names.
//!
//! [`FakeLlm`]: super::FakeLlm

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{content_text, error_body, messages};
use crate::fake_server::json_status;

/// The departures a fake server shows; none by default (the hosted API's behaviour).
#[derive(Debug, Clone, Default)]
pub struct Quirks {
    /// Streamed answers carry no usage at all: `stream_options.include_usage` is ignored.
    pub no_stream_usage: bool,
    /// The server's context window in tokens (counted as about four characters each, over the
    /// messages and the tool schemas). A request over it gets 400 `context_length_exceeded`
    /// when not streamed, and 200 with an empty event stream when streamed, after which the
    /// connection is closed while it still looks reusable: the next request sent over it gets
    /// no answer.
    pub context_window: Option<usize>,
    /// 500 for an assistant message with tool calls and `content: null`, and for
    /// `tool_choice: "required"`.
    pub strict_requests: bool,
    /// 400 unless the conversation after the system messages starts with the user and user and
    /// assistant alternate (tool results follow their call), as the chat templates of Mistral
    /// and Gemma models require.
    pub alternating_roles: bool,
    /// `/v1/embeddings` answers each input with one vector per token (`[[…], […]]`) instead of
    /// one vector, as llama-cpp-python does for a model without pooling (SmolLM2, measured).
    pub per_token_embeddings: bool,
    /// The pause between two frames of a streamed answer, as a model that takes seconds to write
    /// it paces them; `None`: 2 ms.
    pub stream_pace: Option<std::time::Duration>,
    /// llama.cpp's one slot instead of OpenAI's prompt cache: a prompt reuses what it shares
    /// with the prompt just before it, and answers do not say so (see `FakeLlm::prefix_hits`).
    pub slot_cache: bool,
    /// Tools are shown to the model only with a `tool_choice` (llama-cpp-python's
    /// `chatml-function-calling` renders none for a request that leaves it out) ...
    pub tools_need_choice: bool,
    /// ... and a streamed request with tools and `tool_choice: "auto"` gets an empty 200
    /// stream ("Automatic streaming tool choice is not supported").
    pub no_auto_tool_streams: bool,
    /// Twice the tokens for the same text (two characters a token instead of four), in usage
    /// and against the window: a small model's tokenizer on tool output, JSON and code
    /// (SmolLM2 counted 4,162 tokens in 9.4 K characters of a rendered conversation).
    pub dense_tokenizer: bool,
    /// The model is not shown tool results: llama-cpp-python 0.3.36's `chatml-function-calling`
    /// template renders a `tool` message as its role header alone, so a result counts nothing
    /// in usage and against the window, and the model, never seeing it, calls the tool again
    /// (SmolLM2 looped on `list_dir`, measured).
    pub tool_results_unrendered: bool,
}

impl Quirks {
    /// llama-cpp-python 0.3's OpenAI-compatible server, as measured: no usage in streams, an
    /// empty 200 stream for a request over its window, 500s for `content: null` beside tool
    /// calls and for `tool_choice: "required"`, per-token embeddings, one cache slot, no tools
    /// without a `tool_choice`, no streamed answer with `auto`, and no tool results shown.
    pub fn llama_cpp(context_window: usize) -> Quirks {
        Quirks {
            no_stream_usage: true,
            context_window: Some(context_window),
            strict_requests: true,
            alternating_roles: false,
            per_token_embeddings: true,
            stream_pace: None,
            slot_cache: true,
            tools_need_choice: true,
            no_auto_tool_streams: true,
            dense_tokenizer: false,
            tool_results_unrendered: true,
        }
    }

    /// Tokens of the fake's count (four characters each) as this server counts them.
    pub fn scale(&self, tokens: usize) -> usize {
        if self.dense_tokenizer { tokens * 2 } else { tokens }
    }
}

/// The tokens a request asks for, as the fake counts them.
pub fn request_tokens(request: &Value) -> usize {
    rendered_tokens(request, false)
}

/// [`request_tokens`], without the tool results' text when the server does not render it.
fn rendered_tokens(request: &Value, tool_results_unrendered: bool) -> usize {
    let messages: usize = messages(request)
        .map(|m| {
            let calls = m.get("tool_calls").map_or(0, |calls| calls.to_string().len());
            let unrendered = tool_results_unrendered && m.get("role") == Some(&json!("tool"));
            let text = if unrendered { 0 } else { content_text(m).chars().count() };
            4 + (text + calls).div_ceil(4)
        })
        .sum();
    let tools = request.get("tools").map_or(0, |tools| tools.to_string().len().div_ceil(4));
    messages + tools
}

/// The answer the quirks give instead of the scripted one, if any.
pub(super) fn refusal(quirks: &Quirks, request: &Value) -> Option<Response> {
    if quirks.strict_requests
        && let Some(response) = strict_refusal(request)
    {
        return Some(response);
    }
    if quirks.alternating_roles && !alternates(request) {
        let body = json!({"error": {"message": "Conversation roles must alternate user/assistant/user/assistant/...",
            "type": "invalid_request_error", "param": null, "code": null}});
        return Some(json_status(400, None, body));
    }
    let streamed = request.get("stream").and_then(Value::as_bool) == Some(true);
    let auto_tools = request.get("tools").is_some() && request.get("tool_choice") == Some(&json!("auto"));
    if quirks.no_auto_tool_streams && streamed && auto_tools {
        return Some(empty_stream());
    }
    let window = quirks.context_window?;
    let asked = quirks.scale(rendered_tokens(request, quirks.tool_results_unrendered));
    if asked <= window {
        return None;
    }
    if streamed {
        return Some(empty_stream());
    }
    let message = format!(
        "This model's maximum context length is {window} tokens. However, you requested {asked} tokens \
         ({asked} in the messages, None in the completion). Please reduce the length of the messages or completion."
    );
    let mut body = error_body(&message, "invalid_request_error", "context_length_exceeded");
    body["error"]["param"] = json!("messages");
    Some(json_status(400, None, body))
}

/// What llama-cpp-python does when a streamed request fails: the error is raised inside the
/// stream's generator, the stream ends empty, and the server drops the connection after it.
fn empty_stream() -> Response {
    let mut response = Body::empty().into_response();
    let event_stream = HeaderValue::from_static("text/event-stream; charset=utf-8");
    response.headers_mut().insert(header::CONTENT_TYPE, event_stream);
    response.extensions_mut().insert(super::connection::CloseAfter);
    response
}

fn strict_refusal(request: &Value) -> Option<Response> {
    let null_beside_calls = messages(request).any(|m| {
        m.get("role").and_then(Value::as_str) == Some("assistant")
            && m.get("tool_calls").is_some_and(|calls| calls.as_array().is_some_and(|c| !c.is_empty()))
            && m.get("content").is_none_or(Value::is_null)
    });
    let required = request.get("tool_choice").and_then(Value::as_str) == Some("required");
    (null_beside_calls || required).then(|| {
        let body = json!({"error": {"message": "", "type": "internal_server_error", "param": null, "code": null}});
        json_status(500, None, body)
    })
}

/// User and assistant alternate after the system messages, starting with the user; tool
/// results may follow the assistant message that called them.
fn alternates(request: &Value) -> bool {
    let mut last: Option<&str> = None;
    for message in messages(request) {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        let fits = match (last, role) {
            (_, "system") => last.is_none(),
            (None, "user") => true,
            (Some("assistant" | "tool"), "user") => true,
            (Some("user" | "tool"), "assistant") => true,
            (Some("assistant" | "tool"), "tool") => true,
            _ => false,
        };
        if !fits {
            return false;
        }
        if role != "system" {
            last = Some(role);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(roles: &[&str]) -> Value {
        json!({"messages": roles.iter().map(|r| json!({"role": r, "content": "x"})).collect::<Vec<_>>()})
    }

    #[test]
    fn alternation_is_checked_like_a_strict_chat_template() {
        assert!(alternates(&roles(&["system", "user", "assistant", "user"])));
        assert!(alternates(&roles(&["system", "user", "assistant", "tool", "tool", "assistant", "user"])));
        assert!(!alternates(&roles(&["system", "assistant", "user"])));
        assert!(!alternates(&roles(&["system", "user", "user"])));
        assert!(!alternates(&roles(&["user", "system", "user"])));
    }

    #[test]
    fn tokens_count_messages_and_tools() {
        let small = json!({"messages": [{"role": "user", "content": "abcd"}]});
        assert_eq!(request_tokens(&small), 5);
        let with_tools =
            json!({"messages": [{"role": "user", "content": "abcd"}], "tools": [{"name": "x".repeat(40)}]});
        assert!(request_tokens(&with_tools) > 15);
    }

    #[test]
    fn a_server_that_renders_no_tool_results_counts_only_their_headers() {
        let result = json!({"role": "tool", "tool_call_id": "c", "content": "x".repeat(4000)});
        let request = json!({"messages": [{"role": "user", "content": "abcd"}, result]});
        assert_eq!(rendered_tokens(&request, true), 5 + 4);
        assert_eq!(rendered_tokens(&request, false), 5 + 4 + 1000);
    }
}
