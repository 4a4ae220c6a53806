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
use serde_json::{Value, json};

use super::{ApiSettings, CHANNEL, Waiters};
use crate::bus::{Bus, BusExt};
use crate::contract::{ContractError, InboundMessage, MAX_CHAT_ID_BYTES, MAX_SENDER_ID_BYTES, Sender, check_length};

struct AppState {
    bus: Arc<dyn Bus>,
    settings: ApiSettings,
    waiters: Arc<Waiters>,
}

pub(super) fn router(bus: Arc<dyn Bus>, settings: ApiSettings, waiters: Arc<Waiters>) -> Router {
    let limit = settings.max_body_bytes;
    let state = Arc::new(AppState { bus, settings, waiters });
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
    let msg = InboundMessage::user(CHANNEL, &request.chat_id, sender, &request.content);
    let waiting = state.waiters.register(&msg.id);
    if let Err(err) = state.bus.publish_inbound(&msg).await {
        state.waiters.forget(&msg.id);
        tracing::error!(%err, "cannot publish an API message");
        return error(StatusCode::SERVICE_UNAVAILABLE, "bus_unavailable", "the message bus is unavailable");
    }
    match tokio::time::timeout(state.settings.reply_timeout, waiting).await {
        Ok(Ok(reply)) => {
            let mut body = json!({
                "reply": reply.content,
                "kind": reply.kind,
                "message_id": msg.id,
                "reply_id": reply.id,
                "session_key": msg.session_key(),
            });
            // `suppressed`: the model chose not to answer (`reply` is then empty).
            for key in ["run_id", "model", "usage", "cost_usd", "suppressed"] {
                if let Some(value) = reply.metadata.get(key) {
                    body[key] = value.clone();
                }
            }
            (StatusCode::OK, axum::Json(body)).into_response()
        }
        Ok(Err(_)) => error_with(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "switchboard is stopping; the message was accepted and will be answered after restart",
            json!({"message_id": msg.id}),
        ),
        Err(_) => {
            state.waiters.forget(&msg.id);
            let secs = state.settings.reply_timeout.as_secs();
            let text = format!("no reply within {secs} s; the message was accepted and may still be answered");
            error_with(StatusCode::GATEWAY_TIMEOUT, "reply_timeout", &text, json!({"message_id": msg.id}))
        }
    }
}

/// True when no token is configured or the request carries the right one.
fn authorized(settings: &ApiSettings, headers: &HeaderMap) -> bool {
    let Some(expected) = settings.token.as_deref() else { return true };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    constant_time_eq(given.as_bytes(), expected.as_bytes())
}

/// Compares without an early exit, so response timing does not reveal the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    error_with(status, code, message, Value::Null)
}

fn error_with(status: StatusCode, code: &str, message: &str, extra: Value) -> Response {
    let mut body = json!({"error": {"code": code, "message": message}});
    if let Value::Object(extra) = extra {
        for (key, value) in extra {
            body["error"][key] = value;
        }
    }
    (status, axum::Json(body)).into_response()
}
