//! The fake's prompt cache and what the model is shown: OpenAI's automatic prefix cache by
//! default, llama.cpp's one slot with [`Quirks::llama_cpp`](super::Quirks::llama_cpp) (see
//! [`crate::fake_server::prompt_cache`]).

use serde_json::{Value, json};

use super::{Shared, content_text, messages};

/// The tokens of a request's prompt, and those its cache served.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PromptTokens {
    pub total: usize,
    pub cached: usize,
}

/// Whether the model is shown the request's tools. Like llama-cpp-python's
/// `chatml-function-calling`, a server with `tools_need_choice` renders none without a
/// `tool_choice`.
pub(super) fn tools_shown(shared: &Shared, request: &Value) -> bool {
    request.get("tools").is_some() && !(shared.quirks.tools_need_choice && request.get("tool_choice").is_none())
}

/// The prompt as the model reads it, in order: the tools it is shown, then each message's role,
/// text (none of a tool result's, with `tool_results_unrendered`) and tool calls.
pub(super) fn prompt_text(shared: &Shared, request: &Value) -> String {
    let mut text = match tools_shown(shared, request) {
        true => request.get("tools").map_or_else(String::new, Value::to_string),
        false => String::new(),
    };
    for message in messages(request) {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        text.push('\n');
        text.push_str(role);
        text.push(':');
        if !(role == "tool" && shared.quirks.tool_results_unrendered) {
            text.push_str(&content_text(message));
        }
        if let Some(calls) = message.get("tool_calls") {
            text.push_str(&calls.to_string());
        }
    }
    text
}

/// The prompt's tokens: four characters each (at least one) of the prompt as the model reads it
/// (what the cache compares, so a cached part is never more than the whole).
fn total(shared: &Shared, request: &Value) -> usize {
    (prompt_text(shared, request).chars().count() / 4).max(1)
}

/// Counts `request`'s prompt without a cache.
pub(super) fn count(shared: &Shared, request: &Value) -> PromptTokens {
    PromptTokens { total: shared.quirks.scale(total(shared, request)), cached: 0 }
}

/// Counts `request`'s prompt and serves it from the cache, which keeps it for later requests.
pub(super) fn serve(shared: &Shared, request: &Value) -> PromptTokens {
    let prompt = prompt_text(shared, request);
    let total = (prompt.chars().count() / 4).max(1);
    let cached = if shared.quirks.slot_cache {
        shared.slot.serve(&prompt).reused
    } else {
        let model = request.get("model").and_then(Value::as_str).unwrap_or_default();
        shared.cache.serve(model, &prompt)
    };
    PromptTokens { total: shared.quirks.scale(total), cached: shared.quirks.scale(cached.min(total)) }
}

/// The usage object: OpenAI reports cached tokens in `prompt_tokens_details`; llama-cpp-python
/// reports none.
pub(super) fn usage_json(shared: &Shared, prompt: PromptTokens, completion: usize) -> Value {
    let mut usage = json!({"prompt_tokens": prompt.total, "completion_tokens": completion, "total_tokens": prompt.total + completion});
    if !shared.quirks.slot_cache {
        usage["prompt_tokens_details"] = json!({"cached_tokens": prompt.cached});
    }
    usage
}
