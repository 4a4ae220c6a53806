//! Routing: the gateway socket at `/gateway`, REST under `/api/v10`, files at `/attachments/{name}`.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Request, State};
use axum::http::header;
use axum::response::Response;
use axum::routing::get;
use serde_json::{Map, Value, json};

use super::state::Upload;
use super::wire::{Answer, route_of, token_route};
use super::{Call, Failure, FakeDiscord, Shared, gateway};
use crate::fake_server::{file_response, is_multipart, read_json};

/// Bodies up to this size are accepted (uploads included).
const BODY_LIMIT: usize = 64 << 20;
/// The REST prefix serenity uses.
const API_PREFIX: &str = "/api/v10";

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/gateway", get(gateway::upgrade))
        .fallback(route)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(shared)
}

async fn route(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let at = Instant::now();
    let path = request.uri().path().to_owned();
    let method = request.method().as_str().to_owned();
    if let Some(name) = path.strip_prefix("/attachments/") {
        return download(&shared, name, at);
    }
    let Some(api_path) = path.strip_prefix(API_PREFIX) else {
        let route = route_of(&method, &path);
        let body = Value::Null;
        shared.record(Call { method, route, path, body, at, status: 404, failed: true });
        return Answer::not_found().into_response();
    };
    api_call(&shared, &method, api_path.to_owned(), request, at).await
}

/// One REST call: authorization, a rate limit in force, a scripted failure, then the route
/// itself; always recorded.
async fn api_call(shared: &Shared, method: &str, path: String, request: Request, at: Instant) -> Response {
    let route = route_of(method, &path);
    let authorized = authorized(&request) || route == "GET /gateway" || token_route(&route);
    let (body, uploads) = match read_body(request).await {
        Ok(read) => read,
        Err(error) => (json!({ "unreadable_body": error }), Vec::new()),
    };
    let answer = if authorized {
        let mut state = shared.rest();
        let bucket = format!("{method} {path}");
        match state.rate_limit_in_force(&bucket, at) {
            Some(limited) => limited,
            None => match state.take_failure(&route) {
                Some(Failure::RateLimited { retry_after_secs, global }) => {
                    state.start_rate_limit(&bucket, retry_after_secs, global, at);
                    Failure::RateLimited { retry_after_secs, global }.into()
                }
                Some(lost @ Failure::AnswerLost(_)) => {
                    // The call takes effect; only its answer goes missing.
                    let _ = state.handle(method, &path, &body, &uploads);
                    lost.into()
                }
                Some(failure) => failure.into(),
                None => state.handle(method, &path, &body, &uploads),
            },
        }
    } else {
        Answer::unauthorized()
    };
    let (status, failed) = (answer.status(), answer.is_err());
    shared.record(Call { method: method.to_owned(), route, path, body, at, status, failed });
    answer.into_response()
}

/// `Authorization: Bot fake-discord-token`.
fn authorized(request: &Request) -> bool {
    let value = request.headers().get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
    value.and_then(|value| value.strip_prefix("Bot ")) == Some(FakeDiscord::TOKEN)
}

/// `GET /attachments/{name}`: the registered bytes, or 404. No token needed, like Discord's CDN.
fn download(shared: &Shared, name: &str, at: Instant) -> Response {
    let bytes = shared.rest().attachment(name);
    let path = format!("/attachments/{name}");
    let call = Call {
        method: "GET".to_owned(),
        route: "GET /attachments/{name}".to_owned(),
        path,
        body: Value::Null,
        at,
        status: if bytes.is_some() { 200 } else { 404 },
        failed: bytes.is_none(),
    };
    shared.record(call);
    match bytes {
        Some(bytes) => file_response(bytes),
        None => Answer::not_found().into_response(),
    }
}

/// A JSON body, or a multipart body's `payload_json` plus a `files` summary of its file parts.
async fn read_body(request: Request) -> Result<(Value, Vec<Upload>), String> {
    if is_multipart(&request) {
        let multipart = Multipart::from_request(request, &()).await.map_err(|error| error.body_text())?;
        return read_multipart(multipart).await;
    }
    let body = read_json(request, BODY_LIMIT).await?.unwrap_or(Value::Null);
    Ok((body, Vec::new()))
}

async fn read_multipart(mut multipart: Multipart) -> Result<(Value, Vec<Upload>), String> {
    let mut body = Value::Object(Map::new());
    let mut files = Vec::new();
    let mut uploads = Vec::new();
    while let Some(field) = multipart.next_field().await.map_err(|error| error.body_text())? {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let bytes = field.bytes().await.map_err(|error| error.body_text())?;
        match file_name {
            Some(file_name) => {
                files.push(json!({ "field": name, "filename": file_name, "bytes_len": bytes.len() }));
                uploads.push(Upload { file_name, bytes: bytes.to_vec() });
            }
            None if name == "payload_json" => {
                let payload: Map<String, Value> = serde_json::from_slice(&bytes).map_err(|error| error.to_string())?;
                if let Some(fields) = body.as_object_mut() {
                    fields.extend(payload);
                }
            }
            None => body[name] = json!(String::from_utf8_lossy(&bytes)),
        }
    }
    if !files.is_empty() {
        body["files"] = Value::Array(files);
    }
    Ok((body, uploads))
}
