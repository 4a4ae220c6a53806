//! The gate in front of the guarded routes: a valid token (when tokens are configured) within
//! its request rate; the [`Caller`](super::access::Caller) it finds is handed to the route.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::access::Denied;
use super::errors::error;
use super::state::AppState;

/// Lets in requests with a valid token and within its rate, and hands the [`Caller`] on to
/// the route as a request extension.
pub(super) async fn authenticate(State(state): State<Arc<AppState>>, mut request: Request, next: Next) -> Response {
    let access = state.settings.access.current();
    let caller = match access.caller(request.headers()) {
        Ok(caller) => caller,
        Err(denied) => return unauthorized(denied),
    };
    if let Some(name) = &caller.token {
        let per_minute = access.tokens.iter().find(|t| &t.name == name).map_or(0, |t| t.per_minute);
        if let Err(wait) = state.rate_limits.take(name, per_minute) {
            return rate_limited(name, per_minute, wait);
        }
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

fn unauthorized(denied: Denied) -> Response {
    let text = match denied {
        Denied::Missing => "this API needs a token: send Authorization: Bearer <token>",
        Denied::Wrong => "the bearer token is not one of the configured tokens",
    };
    let mut response = error(StatusCode::UNAUTHORIZED, "unauthorized", text);
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn rate_limited(name: &str, per_minute: u32, wait: Duration) -> Response {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    tracing::info!(token = name, per_minute, retry_after_secs = secs, "API token over its request rate");
    let text = format!("token {name:?} is limited to {per_minute} requests a minute; retry in {secs} s");
    let mut response = error(StatusCode::TOO_MANY_REQUESTS, "rate_limited", &text);
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}
