//! The HTTP routes of the API channel.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::json;

use super::access::{self, Caller};
use super::replies::Fingerprint;
use super::state::{AppState, error};
use super::{CHANNEL, exchange, idempotency, openai, sessions, ws};
use crate::contract::reply::REPLY_CHANNEL;
use crate::contract::{ContractError, InboundMessage, MAX_CHAT_ID_BYTES, MAX_SENDER_ID_BYTES, Sender, check_length};

pub(super) fn router(state: Arc<AppState>) -> Router {
    let limit = state.settings.max_body_bytes;
    // Routes behind a token (when tokens are configured); the health check is not.
    let guarded = Router::new()
        .route("/v1/messages", post(post_message))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/models", get(openai::models))
        .route("/v1/sessions", get(sessions::list_sessions))
        .route("/v1/sessions/{key}", delete(sessions::delete_session))
        .route("/v1/sessions/{key}/messages", get(sessions::session_messages))
        .route("/v1/runs", get(sessions::list_runs))
        .route("/v1/runs/{id}", get(sessions::get_run))
        .route("/v1/ws", get(ws::websocket))
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&state), access::authenticate));
    Router::new()
        .merge(guarded)
        .route("/healthz", get(healthz))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// The body of `POST /v1/messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PostMessage {
    chat_id: String,
    content: String,
    #[serde(default)]
    sender: Option<String>,
}

/// The ids of a request within the bus's limits: a chat id becomes part of NATS subjects,
/// and a longer one would be refused by the bus (or, unchecked, break the NATS connection).
fn check_id_lengths(request: &PostMessage) -> Result<(), ContractError> {
    check_length("chat_id", &request.chat_id, MAX_CHAT_ID_BYTES)?;
    check_length("sender", request.sender.as_deref().unwrap_or_default(), MAX_SENDER_ID_BYTES)
}

async fn healthz() -> Response {
    (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response()
}

async fn post_message(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if !caller.scopes.chat {
        return access::forbidden("this token has no chat scope: it cannot send messages");
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return error(rejection.status(), "invalid_body", &rejection.body_text()),
    };
    let mut request: PostMessage = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(err) => return error(StatusCode::BAD_REQUEST, "invalid_body", &format!("invalid JSON body: {err}")),
    };
    if request.chat_id.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "invalid_body", "chat_id must not be empty");
    }
    if request.content.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "invalid_body", "content must not be empty");
    }
    // Users are keyed by sender id: an empty one would be one user shared by every such client.
    if request.sender.as_deref().is_some_and(|sender| sender.trim().is_empty()) {
        return error(StatusCode::BAD_REQUEST, "invalid_body", "sender must not be empty when given");
    }
    request.chat_id = caller.chat_id(&request.chat_id);
    if let Err(problem) = check_id_lengths(&request) {
        return error(StatusCode::BAD_REQUEST, "invalid_body", &problem.to_string());
    }
    let sender_id = match request.sender {
        Some(named) if named != caller.identity && !caller.scopes.admin => {
            let text =
                format!("this token speaks as {:?}; only an admin token may name another sender", caller.identity);
            return access::forbidden(&text);
        }
        Some(named) => named,
        None => caller.identity.clone(),
    };
    let mut msg = new_message(&state, &request.chat_id, &sender_id, &request.content);
    let fingerprint = match keyed(&headers, &mut msg) {
        Ok(fingerprint) => fingerprint,
        Err(response) => return response,
    };
    match exchange::exchange(&state, &msg, fingerprint).await {
        Ok(answer) => exchange::replied(&msg, &answer.reply, answer.replayed),
        Err(response) => response,
    }
}

/// A user message from the API to chat `chat_id`, its replies routed to this process.
pub(super) fn new_message(state: &AppState, chat_id: &str, sender_id: &str, content: &str) -> InboundMessage {
    let sender = Sender { id: sender_id.to_owned(), name: sender_id.to_owned(), is_bot: false };
    let mut msg = InboundMessage::user(CHANNEL, chat_id, sender, content);
    if let Some(own) = &state.settings.reply_channel {
        msg.metadata.insert(REPLY_CHANNEL.into(), own.clone().into());
    }
    msg
}

/// Applies the request's `Idempotency-Key`, if it has one: the message's id then stands for the
/// key, and the fingerprint of its content tells a retry from a reuse.
#[expect(clippy::result_large_err, reason = "the error is the answer to send; one per failed request")]
pub(super) fn keyed(headers: &HeaderMap, msg: &mut InboundMessage) -> Result<Option<Fingerprint>, Response> {
    match idempotency::key(headers) {
        Ok(Some(key)) => {
            idempotency::apply(msg, &key);
            Ok(Some(idempotency::fingerprint(&msg.content)))
        }
        Ok(None) => Ok(None),
        Err(text) => Err(error(StatusCode::BAD_REQUEST, "invalid_idempotency_key", &text)),
    }
}
