//! The HTTP routes of the API channel.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::replies::Replies;
use super::state::{AppState, error};
use super::{ApiSettings, CHANNEL, exchange, idempotency};
use crate::bus::Bus;
use crate::contract::reply::REPLY_CHANNEL;
use crate::contract::{ContractError, InboundMessage, MAX_CHAT_ID_BYTES, MAX_SENDER_ID_BYTES, Sender, check_length};

pub(super) fn router(bus: Arc<dyn Bus>, settings: ApiSettings, replies: Arc<Replies>) -> Router {
    let limit = settings.max_body_bytes;
    let state = Arc::new(AppState { bus, settings, replies });
    Router::new()
        .route("/v1/messages", post(post_message))
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
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if !authorized(&state.settings, &headers) {
        return error(StatusCode::UNAUTHORIZED, "unauthorized", "missing or wrong bearer token");
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return error(rejection.status(), "invalid_body", &rejection.body_text()),
    };
    let request: PostMessage = match serde_json::from_slice(&body) {
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
    if let Err(problem) = check_id_lengths(&request) {
        return error(StatusCode::BAD_REQUEST, "invalid_body", &problem.to_string());
    }
    let sender_id = request.sender.unwrap_or_else(|| "api".to_owned());
    let sender = Sender { id: sender_id.clone(), name: sender_id, is_bot: false };
    let key = match idempotency::key(&headers) {
        Ok(key) => key,
        Err(text) => return error(StatusCode::BAD_REQUEST, "invalid_idempotency_key", &text),
    };
    let mut msg = InboundMessage::user(CHANNEL, &request.chat_id, sender, &request.content);
    if let Some(own) = &state.settings.reply_channel {
        msg.metadata.insert(REPLY_CHANNEL.into(), own.clone().into());
    }
    let fingerprint = key.map(|key| {
        idempotency::apply(&mut msg, &key);
        idempotency::fingerprint(&request.content)
    });
    exchange::exchange(&state, msg, fingerprint).await
}

/// True when no token is configured or the request carries the right one.
fn authorized(settings: &ApiSettings, headers: &HeaderMap) -> bool {
    let Some(expected) = settings.token.as_deref() else { return true };
    let given =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer_credentials).unwrap_or("");
    constant_time_eq(given.as_bytes(), expected.as_bytes())
}

/// The credentials of a `Bearer` authorization; the scheme name is case-insensitive
/// (RFC 9110, section 11.1).
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| credentials.trim_start_matches(' '))
}

/// Compares without an early exit, so response timing does not reveal the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
