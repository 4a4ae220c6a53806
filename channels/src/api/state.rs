//! What every route of the API channel shares: its state and the JSON error body.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::ApiSettings;
use super::access::RateLimits;
use super::feed::RunFeed;
use super::replies::Replies;
use super::store::ApiStore;
use super::ws::Sockets;
use crate::bus::Bus;

pub(super) struct AppState {
    pub(super) bus: Arc<dyn Bus>,
    pub(super) settings: ApiSettings,
    pub(super) replies: Arc<Replies>,
    pub(super) feed: Arc<RunFeed>,
    pub(super) rate_limits: RateLimits,
    /// Sessions, runs and the outbox; `None` in a process without a database.
    pub(super) store: Option<Arc<dyn ApiStore>>,
    pub(super) sockets: Arc<Sockets>,
    /// Cancelled when the channel stops accepting: WebSockets close then.
    pub(super) shutdown: CancellationToken,
}

pub(super) fn error(status: StatusCode, code: &str, message: &str) -> Response {
    error_with(status, code, message, Value::Null)
}

/// An error body `{"error": {"code", "message", "type", …extra}}`. `type` is the class OpenAI's
/// clients know, so their error types work against this API too.
pub(super) fn error_with(status: StatusCode, code: &str, message: &str, extra: Value) -> Response {
    let mut body = json!({"error": {"code": code, "message": message, "type": error_type(status)}});
    if let Value::Object(extra) = extra {
        for (key, value) in extra {
            body["error"][key] = value;
        }
    }
    (status, axum::Json(body)).into_response()
}

fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}
