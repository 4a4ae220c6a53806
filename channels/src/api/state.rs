//! What every route of the API channel shares: its state and the JSON error body.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::ApiSettings;
use super::replies::Replies;
use crate::bus::Bus;

pub(super) struct AppState {
    pub(super) bus: Arc<dyn Bus>,
    pub(super) settings: ApiSettings,
    pub(super) replies: Arc<Replies>,
}

pub(super) fn error(status: StatusCode, code: &str, message: &str) -> Response {
    error_with(status, code, message, Value::Null)
}

pub(super) fn error_with(status: StatusCode, code: &str, message: &str, extra: Value) -> Response {
    let mut body = json!({"error": {"code": code, "message": message}});
    if let Value::Object(extra) = extra {
        for (key, value) in extra {
            body["error"][key] = value;
        }
    }
    (status, axum::Json(body)).into_response()
}
