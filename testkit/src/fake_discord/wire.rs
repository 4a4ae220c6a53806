//! Discord's JSON shapes shared by the REST and gateway sides: the bot user, error bodies,
//! gateway frames, ISO 8601 timestamps, snowflakes sent as strings or numbers, and route names.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{APPLICATION_ID, BOT_ID, BOT_NAME, Failure, LostAnswer};

/// One REST answer: a JSON body with a status, 204 No Content, a 429, or none at all.
#[derive(Debug, Clone)]
pub(super) enum Answer {
    Json(u16, Value),
    NoContent,
    RateLimited {
        retry_after_secs: f64,
        global: bool,
    },
    /// The connection is cut before an answer is complete.
    Dropped,
}

impl Answer {
    /// A successful JSON answer.
    pub(super) fn ok(body: Value) -> Answer {
        Answer::Json(200, body)
    }

    /// Discord's error body `{"message", "code"}` with an HTTP status.
    pub(super) fn error(status: u16, message: &str, code: u64) -> Answer {
        Answer::Json(status, json!({ "message": message, "code": code }))
    }

    /// 404 for routes the fake does not serve.
    pub(super) fn not_found() -> Answer {
        Answer::error(404, "404: Not Found", 0)
    }

    /// 401 for a missing or wrong token.
    pub(super) fn unauthorized() -> Answer {
        Answer::error(401, "401: Unauthorized", 0)
    }

    /// The HTTP status sent; 0 when the connection was cut instead.
    pub(super) fn status(&self) -> u16 {
        match self {
            Answer::Json(status, _) => *status,
            Answer::NoContent => 204,
            Answer::RateLimited { .. } => 429,
            Answer::Dropped => 0,
        }
    }

    pub(super) fn is_err(&self) -> bool {
        !(200..400).contains(&self.status())
    }

    pub(super) fn into_response(self) -> Response {
        match self {
            Answer::Json(status, body) => {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                (status, axum::Json(body)).into_response()
            }
            Answer::NoContent => StatusCode::NO_CONTENT.into_response(),
            Answer::RateLimited { retry_after_secs, global } => rate_limited(retry_after_secs, global),
            Answer::Dropped => dropped(),
        }
    }
}

/// 429 as Discord sends it: `Retry-After` (whole seconds, rounded up), the `X-RateLimit-*`
/// headers (`X-RateLimit-Global` only for the global limit) and a body with `retry_after` in
/// seconds as a float, `global`, and no `code`.
fn rate_limited(seconds: f64, global: bool) -> Response {
    let body = json!({ "message": "You are being rate limited.", "retry_after": seconds, "global": global });
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    let headers = response.headers_mut();
    let whole = seconds.max(0.0).ceil() as u64;
    headers.insert(header::RETRY_AFTER, HeaderValue::from(whole));
    if let Ok(value) = HeaderValue::from_str(&format!("{seconds:.3}")) {
        headers.insert("x-ratelimit-reset-after", value);
    }
    headers.insert("x-ratelimit-remaining", HeaderValue::from(0));
    if global {
        headers.insert("x-ratelimit-global", HeaderValue::from_static("true"));
        headers.insert("x-ratelimit-scope", HeaderValue::from_static("global"));
    } else {
        headers.insert("x-ratelimit-scope", HeaderValue::from_static("user"));
    }
    response
}

/// A response whose body fails at once: hyper gives up on the connection, so the client gets
/// no usable answer (as when a connection breaks after Discord acted on the request).
fn dropped() -> Response {
    let broken = futures_util::stream::once(async { Err::<bytes::Bytes, _>(std::io::Error::other("connection cut")) });
    Response::new(axum::body::Body::from_stream(broken))
}

impl From<Failure> for Answer {
    fn from(failure: Failure) -> Answer {
        match failure {
            Failure::RateLimited { retry_after_secs, global } => Answer::RateLimited { retry_after_secs, global },
            Failure::ServerError | Failure::AnswerLost(LostAnswer::ServerError) => {
                Answer::error(500, "500: Internal Server Error", 0)
            }
            Failure::AnswerLost(LostAnswer::ConnectionDropped) => Answer::Dropped,
            Failure::Status { code, body } => Answer::Json(code, body),
        }
    }
}

/// The bot as a `User` object.
pub(super) fn bot_user() -> Value {
    json!({
        "id": BOT_ID.to_string(),
        "username": BOT_NAME,
        "discriminator": "0",
        "global_name": null,
        "avatar": null,
        "bot": true,
    })
}

/// The bot as `GET /users/@me` answers it (a `CurrentUser`).
pub(super) fn current_user() -> Value {
    let mut user = bot_user();
    user["verified"] = json!(true);
    user["mfa_enabled"] = json!(false);
    user["flags"] = json!(0);
    user["public_flags"] = json!(0);
    user
}

/// `GET /oauth2/applications/@me`.
pub(super) fn application() -> Value {
    json!({
        "id": APPLICATION_ID.to_string(),
        "name": BOT_NAME,
        "icon": null,
        "description": "",
        "bot_public": false,
        "bot_require_code_grant": false,
        "verify_key": "0000000000000000000000000000000000000000000000000000000000000000",
        "flags": 0,
        "owner": bot_user(),
        "team": null,
        "bot": bot_user(),
    })
}

/// A gateway frame: op 0 dispatches carry `t` and `s`, the others null.
pub(super) fn frame(op: u8, d: Value, t: Option<&str>, s: Option<u64>) -> String {
    json!({ "op": op, "d": d, "t": t, "s": s }).to_string()
}

/// A snowflake sent as a JSON string or number.
pub(super) fn snowflake(value: &Value) -> Option<u64> {
    match value {
        Value::String(text) => text.parse().ok(),
        Value::Number(number) => number.as_u64(),
        _ => None,
    }
}

/// `METHOD /path` with every numeric segment replaced by `{id}` (`GET /channels/{id}`), and the
/// token of an interaction or webhook route by `{token}` (`POST /interactions/{id}/{token}/callback`).
pub(super) fn route_of(method: &str, path: &str) -> String {
    let mut segments: Vec<&str> =
        path.split('/')
            .map(|segment| {
                if !segment.is_empty() && segment.bytes().all(|byte| byte.is_ascii_digit()) { "{id}" } else { segment }
            })
            .collect();
    if let ["", "interactions" | "webhooks", "{id}", token, ..] = segments.as_mut_slice() {
        *token = "{token}";
    }
    format!("{method} {}", segments.join("/"))
}

/// Routes Discord serves without the bot's token: an interaction's token is its credential.
pub(super) fn token_route(route: &str) -> bool {
    route.starts_with("POST /interactions/{id}/{token}") || route.contains(" /webhooks/{id}/{token}")
}

/// The current time as ISO 8601 with milliseconds, as Discord writes timestamps.
pub(super) fn now_iso() -> String {
    let elapsed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    iso_from_unix_millis(elapsed.as_millis() as u64)
}

/// Formats milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmm+00:00`.
fn iso_from_unix_millis(millis: u64) -> String {
    let (days, rest) = ((millis / 86_400_000) as i64, millis % 86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (rest / 3_600_000, rest / 60_000 % 60);
    let (second, milli) = (rest / 1000 % 60, rest % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}+00:00")
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_replace_ids() {
        assert_eq!(route_of("POST", "/channels/123/messages"), "POST /channels/{id}/messages");
        assert_eq!(route_of("GET", "/users/@me"), "GET /users/@me");
        assert_eq!(route_of("PATCH", "/channels/1/messages/22"), "PATCH /channels/{id}/messages/{id}");
        assert_eq!(route_of("POST", "/interactions/9/tok-1/callback"), "POST /interactions/{id}/{token}/callback");
        assert_eq!(
            route_of("PATCH", "/webhooks/5/t/messages/@original"),
            "PATCH /webhooks/{id}/{token}/messages/@original"
        );
    }

    #[test]
    fn timestamps_are_iso_8601() {
        assert_eq!(iso_from_unix_millis(0), "1970-01-01T00:00:00.000+00:00");
        assert_eq!(iso_from_unix_millis(1_709_251_199_123), "2024-02-29T23:59:59.123+00:00");
    }

    #[test]
    fn snowflakes_read_from_strings_or_numbers() {
        assert_eq!(
            (snowflake(&json!("42")), snowflake(&json!(42)), snowflake(&json!(null))),
            (Some(42), Some(42), None)
        );
    }
}
