//! The OpenAI-compatible face of the API: `POST /v1/chat/completions` (plain and `stream: true`)
//! and `GET /v1/models`, so programs written for the OpenAI API talk to an agent unchanged.
//!
//! switchboard keeps each conversation itself: only the newest user message of a request goes
//! to the agent, as an ordinary inbound message; the history a client sends along is ignored
//! (the agent has its own, and its own system prompt). The conversation is chosen by the
//! `X-Switchboard-Session` header, else the request's `user` field, else `default`; the model
//! names the agent that answers.

mod stream;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::access::{self, Caller};
use super::compose::{keyed, new_message};
use super::errors::error;
use super::exchange;
use super::state::AppState;
use crate::contract::{InboundMessage, MAX_CHAT_ID_BYTES, OutboundMessage, Usage, check_length, reply};

/// The header that names the conversation (the API chat id).
pub const SESSION_HEADER: &str = "x-switchboard-session";
/// The conversation of a request that names none.
const DEFAULT_CHAT: &str = "default";

/// The part of a chat completions request switchboard reads; the rest (temperature, tools, …)
/// is the agent's business and ignored.
#[derive(Debug, Deserialize)]
struct CompletionRequest {
    #[serde(default)]
    model: String,
    messages: Vec<RequestMessage>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    user: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RequestMessage {
    role: String,
    #[serde(default)]
    content: Value,
}

#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// `GET /v1/models`: the agents, the default one first.
pub(super) async fn models(State(state): State<Arc<AppState>>, Extension(caller): Extension<Caller>) -> Response {
    let created = state.settings.started_at.timestamp();
    let data: Vec<Value> = state
        .settings
        .agents
        .iter()
        .filter(|agent| caller.may_use_agent(agent))
        .map(|agent| json!({"id": agent, "object": "model", "created": created, "owned_by": "switchboard"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `POST /v1/chat/completions`.
pub(super) async fn chat_completions(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if !caller.scopes.chat {
        return access::forbidden(access::NO_CHAT_SCOPE);
    }
    let request = match parse(body) {
        Ok(request) => request,
        Err(response) => return response,
    };
    let agent = match pick_agent(&state, &caller, &request.model) {
        Ok(agent) => agent,
        Err(response) => return response,
    };
    let (chat_id, content) = match conversation(&headers, &request, &caller) {
        Ok(found) => found,
        Err(text) => return error(StatusCode::BAD_REQUEST, "invalid_body", &text),
    };
    let mut msg = new_message(&state, &chat_id, &caller.identity, &content);
    // No model: the chat's binding (or the default agent) answers, as for `/v1/messages`.
    if !request.model.trim().is_empty() {
        msg.set_api_agent(&agent);
    }
    let fingerprint = match keyed(&headers, &mut msg) {
        Ok(fingerprint) => fingerprint,
        Err(response) => return response,
    };
    if request.stream {
        let include_usage = request.stream_options.unwrap_or_default().include_usage;
        return stream::respond(state, msg, fingerprint, Completion { agent, include_usage }).await;
    }
    match exchange::exchange(&state, &msg, fingerprint).await {
        Ok(answer) => {
            let mut response = axum::Json(completion(&msg, &answer.reply, &agent)).into_response();
            if answer.replayed {
                exchange::mark_replayed(&mut response);
            }
            response
        }
        Err(response) => response,
    }
}

/// What a completion answer says about itself.
struct Completion {
    agent: String,
    include_usage: bool,
}

#[expect(clippy::result_large_err, reason = "the error is the answer to send; one per failed request")]
fn parse(body: Result<Bytes, BytesRejection>) -> Result<CompletionRequest, Response> {
    let body = body.map_err(|rejection| error(rejection.status(), "invalid_body", &rejection.body_text()))?;
    serde_json::from_slice(&body)
        .map_err(|err| error(StatusCode::BAD_REQUEST, "invalid_body", &format!("invalid JSON body: {err}")))
}

/// Why a request's `model` names no agent it may use.
pub(super) struct AgentRefusal {
    status: StatusCode,
    code: &'static str,
    pub(super) text: String,
}

/// The agent `model` names among `agents`: an agent by name; empty = the default agent.
pub(super) fn resolve_agent(agents: &[String], caller: &Caller, model: &str) -> Result<String, AgentRefusal> {
    let model = model.trim();
    let found = if model.is_empty() { agents.first() } else { agents.iter().find(|agent| *agent == model) };
    match found {
        Some(agent) if caller.may_use_agent(agent) => Ok(agent.clone()),
        Some(agent) => Err(AgentRefusal {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            text: format!("this token may not use the agent {agent:?}"),
        }),
        None => Err(AgentRefusal {
            status: StatusCode::NOT_FOUND,
            code: "model_not_found",
            text: format!("the model {model:?} does not exist: GET /v1/models lists the agents to choose from"),
        }),
    }
}

#[expect(clippy::result_large_err, reason = "the error is the answer to send; one per failed request")]
fn pick_agent(state: &AppState, caller: &Caller, model: &str) -> Result<String, Response> {
    resolve_agent(&state.settings.agents, caller, model)
        .map_err(|refusal| error(refusal.status, refusal.code, &refusal.text))
}

/// The chat the request continues and the text of its newest message.
fn conversation(headers: &HeaderMap, request: &CompletionRequest, caller: &Caller) -> Result<(String, String), String> {
    let named = match headers.get(SESSION_HEADER) {
        Some(value) => Some(value.to_str().map_err(|_| "X-Switchboard-Session must be text".to_owned())?),
        None => request.user.as_deref(),
    };
    let chat_id = caller.chat_id(named.map(str::trim).filter(|chat| !chat.is_empty()).unwrap_or(DEFAULT_CHAT));
    check_length("session", &chat_id, MAX_CHAT_ID_BYTES).map_err(|err| err.to_string())?;
    let last = request.messages.last().ok_or("messages must not be empty")?;
    if last.role != "user" {
        return Err(format!(
            "the last message must be the user's, not {:?}: switchboard keeps the conversation and runs the tools \
             itself, so a request carries the user's next message",
            last.role
        ));
    }
    let content = text_of(&last.content)?;
    if content.trim().is_empty() {
        return Err("the user message must not be empty".into());
    }
    Ok((chat_id, content))
}

/// A message's text: a string, or the text parts of a list of parts.
fn text_of(content: &Value) -> Result<String, String> {
    match content {
        Value::String(text) => Ok(text.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            for part in parts {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text"), Some(text)) => texts.push(text),
                    (kind, _) => {
                        let kind = kind.unwrap_or("untyped");
                        return Err(format!("content parts of type {kind:?} are not supported; send text"));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err("the user message's content must be a string or a list of text parts".into()),
    }
}

/// The completion id of a message's answer.
fn completion_id(msg: &InboundMessage) -> String {
    format!("chatcmpl-{}", msg.id.replace(':', "-"))
}

/// Token counts in OpenAI's shape.
fn usage_json(reply: &OutboundMessage) -> Value {
    let usage: Usage =
        reply.metadata.get(reply::USAGE).and_then(|u| serde_json::from_value(u.clone()).ok()).unwrap_or_default();
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total(),
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
    })
}

/// What switchboard adds to an answer: where the message went and what its run cost.
fn switchboard_fields(msg: &InboundMessage, reply: &OutboundMessage) -> Value {
    let mut fields = json!({"message_id": msg.id, "session_key": reply.metadata.get(reply::SESSION_KEY)});
    for key in [reply::RUN_ID, reply::MODEL, reply::COST_USD, reply::SUPPRESSED] {
        if let Some(value) = reply.metadata.get(key) {
            fields[key] = value.clone();
        }
    }
    fields
}

fn completion(msg: &InboundMessage, reply: &OutboundMessage, agent: &str) -> Value {
    json!({
        "id": completion_id(msg),
        "object": "chat.completion",
        "created": reply.created_at.timestamp(),
        "model": agent,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": reply.content, "refusal": null},
            "finish_reason": "stop",
            "logprobs": null,
        }],
        "usage": usage_json(reply),
        "system_fingerprint": null,
        "switchboard": switchboard_fields(msg, reply),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> CompletionRequest {
        serde_json::from_value(body).unwrap()
    }

    fn admin() -> Caller {
        Caller {
            token: None,
            scopes: crate::api::Scopes { chat: true, admin: true },
            identity: "api".into(),
            agents: Vec::new(),
        }
    }

    #[test]
    fn the_newest_user_message_is_sent_to_the_session_named() {
        let body = json!({"model": "main", "user": "kitchen", "messages": [
            {"role": "system", "content": "ignored"},
            {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "there"}]},
        ]});
        let (chat, text) = conversation(&HeaderMap::new(), &request(body.clone()), &admin()).unwrap();
        assert_eq!((chat.as_str(), text.as_str()), ("kitchen", "hello\nthere"));
        let mut headers = HeaderMap::new();
        headers.insert(SESSION_HEADER, "garden".parse().unwrap());
        assert_eq!(conversation(&headers, &request(body.clone()), &admin()).unwrap().0, "garden");
        let anonymous = json!({"messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(conversation(&HeaderMap::new(), &request(anonymous), &admin()).unwrap().0, DEFAULT_CHAT);
        let alice =
            Caller { scopes: crate::api::Scopes { chat: true, admin: false }, identity: "alice".into(), ..admin() };
        assert_eq!(
            conversation(&headers, &request(body), &alice).unwrap().0,
            "alice/garden",
            "a chat token's own chat"
        );
    }

    #[test]
    fn requests_switchboard_cannot_answer_are_refused_with_the_reason() {
        let cases = [
            json!({"messages": []}),
            json!({"messages": [{"role": "assistant", "content": "hi"}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            json!({"messages": [{"role": "user", "content": "  "}]}),
        ];
        for body in cases {
            assert!(conversation(&HeaderMap::new(), &request(body.clone()), &admin()).is_err(), "{body}");
        }
    }
}
