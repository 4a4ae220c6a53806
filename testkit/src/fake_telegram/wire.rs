//! Telegram's answer envelope, the exact error descriptions teloxide matches, and helpers to
//! read parameters that arrive as JSON values or as multipart strings.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{BOT_FIRST_NAME, BOT_ID, BOT_USERNAME, Failure};

pub(super) const CONFLICT: &str =
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running";
pub(super) const CANT_PARSE: &str = "Bad Request: can't parse entities: Unsupported start tag \"foo\" at byte offset 0";
pub(super) const NOT_MODIFIED: &str = "Bad Request: message is not modified: specified new message content and reply \
                                       markup are exactly the same as a current content and reply markup of the message";
pub(super) const EDIT_NOT_FOUND: &str = "Bad Request: message to edit not found";
/// teloxide's `ApiError::FileIdInvalid` matches this spelling.
pub(super) const INVALID_FILE_ID: &str = "Bad Request: invalid file id";

/// One answer: `{"ok":true,"result":…}` or an error envelope.
#[derive(Debug, Clone)]
pub(super) enum Answer {
    Ok(Value),
    Err { code: u16, description: String, retry_after: Option<u32> },
}

impl Answer {
    /// An error without `parameters`.
    pub(super) fn error(code: u16, description: &str) -> Answer {
        Answer::Err { code, description: description.to_owned(), retry_after: None }
    }

    pub(super) fn bad_request(description: &str) -> Answer {
        Answer::error(400, description)
    }

    pub(super) fn is_err(&self) -> bool {
        matches!(self, Answer::Err { .. })
    }

    pub(super) fn into_response(self) -> Response {
        match self {
            Answer::Ok(result) => axum::Json(json!({ "ok": true, "result": result })).into_response(),
            Answer::Err { code, description, retry_after } => {
                let mut body = json!({ "ok": false, "error_code": code, "description": description });
                if let Some(seconds) = retry_after {
                    body["parameters"] = json!({ "retry_after": seconds });
                }
                let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                (status, axum::Json(body)).into_response()
            }
        }
    }
}

impl From<Failure> for Answer {
    fn from(failure: Failure) -> Answer {
        match failure {
            Failure::TooManyRequests { retry_after } => Answer::Err {
                code: 429,
                description: format!("Too Many Requests: retry after {retry_after}"),
                retry_after: Some(retry_after),
            },
            Failure::Conflict => Answer::error(409, CONFLICT),
            Failure::ServerError => Answer::error(502, "Bad Gateway"),
            Failure::CantParseEntities => Answer::bad_request(CANT_PARSE),
            Failure::NotModified => Answer::bad_request(NOT_MODIFIED),
            Failure::Status { code, description } => Answer::error(code, &description),
            // Held by the server first (see `server::answer`).
            Failure::Hang(_) => Answer::error(502, "Bad Gateway"),
        }
    }
}

/// An integer parameter, sent as a JSON number or a (multipart) string.
pub(super) fn int(params: &Value, key: &str) -> Option<i64> {
    match params.get(key)? {
        Value::Number(number) => number.as_i64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// A string parameter.
pub(super) fn string(params: &Value, key: &str) -> Option<String> {
    params.get(key)?.as_str().map(str::to_owned)
}

/// An object parameter, sent as JSON or as a (multipart) JSON string.
pub(super) fn object(params: &Value, key: &str) -> Option<Value> {
    match params.get(key)? {
        Value::String(text) => serde_json::from_str(text).ok(),
        Value::Null => None,
        other => Some(other.clone()),
    }
}

/// The id of the message a send replies to: `reply_parameters.message_id` or `reply_to_message_id`.
pub(super) fn reply_to_id(params: &Value) -> Option<i64> {
    object(params, "reply_parameters")
        .and_then(|reply| int(&reply, "message_id"))
        .or_else(|| int(params, "reply_to_message_id"))
}

/// The bot as a `User`.
pub(super) fn bot_user() -> Value {
    json!({ "id": BOT_ID, "is_bot": true, "first_name": BOT_FIRST_NAME, "username": BOT_USERNAME })
}

/// The `getMe` result.
pub(super) fn bot_me() -> Value {
    let mut me = bot_user();
    me["can_join_groups"] = json!(true);
    me["can_read_all_group_messages"] = json!(false);
    me["supports_inline_queries"] = json!(false);
    me["can_connect_to_business"] = json!(false);
    me["has_main_web_app"] = json!(false);
    me
}

/// Seconds since the Unix epoch.
pub(super) fn now() -> i64 {
    let elapsed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
}

/// What Telegram shows for HTML text: tags removed, the basic entities decoded.
pub(super) fn strip_html(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut in_tag = false;
    for ch in text.chars() {
        match ch {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => plain.push(ch),
            _ => {}
        }
    }
    plain.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_html_removes_tags_and_decodes_entities() {
        assert_eq!(strip_html("<b>a &lt;b&gt;</b> &amp; <a href=\"x\">c</a>"), "a <b> & c");
    }

    #[test]
    fn params_read_from_json_or_strings() {
        let params = json!({ "a": 5, "b": "-7", "r": "{\"message_id\": 3}" });
        assert_eq!((int(&params, "a"), int(&params, "b")), (Some(5), Some(-7)));
        assert_eq!(reply_to_id(&json!({ "reply_parameters": params["r"] })), Some(3));
        assert_eq!(reply_to_id(&json!({ "reply_to_message_id": 9 })), Some(9));
    }
}
