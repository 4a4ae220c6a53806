//! The HTTP routes of the API channel.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post};
use serde::Deserialize;
use serde_json::json;

use super::access::{self, Caller};
use super::compose::{keyed, new_message};
use super::errors::error;
use super::state::AppState;
use super::{console, exchange, files, guard, openai, sessions, web, ws};
use crate::contract::{ContractError, MAX_CHAT_ID_BYTES, MAX_SENDER_ID_BYTES, check_length};

/// One route: method, path, handler.
type Route = (&'static str, &'static str, MethodRouter<Arc<AppState>>);

/// The routes behind a token (when tokens are configured). `/openapi.json` describes each of
/// them and those of [`open_routes`]; a test holds the two lists to it.
fn guarded_routes() -> Vec<Route> {
    vec![
        ("post", "/v1/messages", post(post_message)),
        ("post", "/v1/chat/completions", post(openai::chat_completions)),
        ("get", "/v1/models", get(openai::models)),
        ("get", "/v1/sessions", get(sessions::list_sessions)),
        ("delete", "/v1/sessions/{key}", delete(sessions::delete_session)),
        ("get", "/v1/sessions/{key}/messages", get(sessions::session_messages)),
        ("get", "/v1/runs", get(sessions::list_runs)),
        ("get", "/v1/runs/{id}", get(sessions::get_run)),
        ("get", "/v1/files/{token}/{name}", get(files::download)),
        ("get", "/v1/ws", get(ws::websocket)),
    ]
    .into_iter()
    .chain(console::routes::routes())
    .collect()
}

/// The routes open to everyone: the health check, the web page and the API's description.
fn open_routes() -> Vec<Route> {
    let mut routes = web::routes();
    routes.push(("get", "/healthz", get(healthz)));
    routes
}

fn add(router: Router<Arc<AppState>>, routes: Vec<Route>) -> Router<Arc<AppState>> {
    routes.into_iter().fold(router, |router, (_, path, handler)| router.route(path, handler))
}

pub(super) fn router(state: Arc<AppState>) -> Router {
    let limit = state.settings.max_body_bytes;
    let guarded = add(Router::new(), guarded_routes())
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&state), guard::authenticate));
    add(Router::new().merge(guarded), open_routes())
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(axum::middleware::from_fn(move |request: Request, next: Next| {
            refuse_declared_too_large(limit, request, next)
        }))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// A body whose declared length is over the limit is answered 413 before any of it is read:
/// waiting for it would only hold the connection until the body timeout.
async fn refuse_declared_too_large(limit: usize, request: Request, next: Next) -> Response {
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    match declared {
        Some(length) if length > limit as u64 => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            &format!("the body is {length} bytes, over this API's limit of {limit} (channels.api.max_body_bytes)"),
        ),
        _ => next.run(request).await,
    }
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
        return access::forbidden(access::NO_CHAT_SCOPE);
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every route is in `/openapi.json` with its method, and the description has no other.
    #[test]
    fn the_openapi_description_matches_the_routes() {
        let served: BTreeSet<(String, String)> = guarded_routes()
            .into_iter()
            .chain(open_routes())
            .filter(|(_, path, _)| !path.starts_with("/assets/"))
            .map(|(method, path, _)| (method.to_owned(), path.to_owned()))
            .collect();
        let document = web::openapi_document();
        let described: BTreeSet<(String, String)> = document["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| item.as_object().unwrap().keys().map(move |method| (method.clone(), path.clone())))
            .collect();
        assert_eq!(served, described);
    }
}
