//! The API's JSON error body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

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
