//! Routing (`/bot{token}/{method}`, `/file/bot{token}/{path}`), body parsing and long polling.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Request, State};
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::state::Upload;
use super::wire::{Answer, int};
use super::{Call, Failure, FakeTelegram, Shared};
use crate::fake_server::{file_response, is_multipart, read_json};

/// Bodies up to this size are accepted (uploads included).
const BODY_LIMIT: usize = 64 << 20;

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(route).layer(DefaultBodyLimit::max(BODY_LIMIT)).with_state(shared)
}

async fn route(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let at = Instant::now();
    let path = percent_decode(request.uri().path());
    let path = path.trim_start_matches('/');
    if let Some(rest) = path.strip_prefix("file/bot")
        && let Some((token, file_path)) = rest.split_once('/')
    {
        return download(&shared, token, file_path, at);
    }
    if let Some(rest) = path.strip_prefix("bot")
        && let Some((token, method)) = rest.split_once('/')
    {
        return api_call(&shared, token, &method.to_ascii_lowercase(), request, at).await;
    }
    Answer::error(404, "Not Found").into_response()
}

async fn api_call(shared: &Arc<Shared>, token: &str, method: &str, request: Request, at: Instant) -> Response {
    let (params, uploads) = match read_params(request).await {
        Ok(read) => read,
        Err(error) => (json!({ "unreadable_body": error }), HashMap::new()),
    };
    let answer = if token == FakeTelegram::TOKEN {
        answer(shared, method, &params, &uploads).await
    } else {
        Answer::error(401, "Unauthorized")
    };
    shared.record(Call { method: method.to_owned(), params, at, failed: answer.is_err() });
    answer.into_response()
}

/// A queued failure first, then the method itself.
async fn answer(shared: &Arc<Shared>, method: &str, params: &Value, uploads: &HashMap<String, Upload>) -> Answer {
    let latency = shared.state().latency.get(method).copied();
    if let Some(latency) = latency {
        tokio::time::sleep(latency).await;
    }
    let failure = shared.state().take_failure(method);
    if let Some(Failure::Hang(time)) = failure {
        shared.state().held.push(method.to_owned());
        tokio::time::sleep(time).await;
        return Answer::error(502, "Bad Gateway");
    }
    if let Some(failure) = failure {
        return failure.into();
    }
    if method == "getupdates" {
        return get_updates(shared, params).await;
    }
    shared.state().handle(method, params, uploads)
}

/// Confirms the offset, then answers at once with pending updates or waits up to `timeout` seconds.
async fn get_updates(shared: &Arc<Shared>, params: &Value) -> Answer {
    let offset = int(params, "offset").filter(|offset| *offset > 0);
    let limit = int(params, "limit").unwrap_or(100).clamp(1, 100) as usize;
    let timeout = u64::try_from(int(params, "timeout").unwrap_or(0)).unwrap_or(0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let mut pushed = shared.pushed.subscribe();
    if shared.state().has_webhook() {
        // Telegram's own words, with the 409 code.
        return Answer::error(
            409,
            "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first",
        );
    }
    loop {
        let batch = shared.state().take_batch(offset, limit);
        if !batch.is_empty() || tokio::time::Instant::now() >= deadline {
            return Answer::Ok(Value::Array(batch));
        }
        if !matches!(tokio::time::timeout_at(deadline, pushed.changed()).await, Ok(Ok(()))) {
            return Answer::Ok(Value::Array(shared.state().take_batch(offset, limit)));
        }
    }
}

/// `GET /file/bot{token}/{path}`: the registered bytes, or 404. Recorded as `download_file`.
fn download(shared: &Shared, token: &str, file_path: &str, at: Instant) -> Response {
    let bytes = if token == FakeTelegram::TOKEN { shared.state().file_bytes(file_path) } else { None };
    let params = json!({ "file_path": file_path });
    shared.record(Call { method: "download_file".to_owned(), params, at, failed: bytes.is_none() });
    match bytes {
        Some(bytes) => file_response(bytes),
        None => Answer::error(404, "Not Found").into_response(),
    }
}

/// The parameters of a JSON or multipart body; uploads are keyed by the parameter naming them.
async fn read_params(request: Request) -> Result<(Value, HashMap<String, Upload>), String> {
    if is_multipart(&request) {
        let multipart = Multipart::from_request(request, &()).await.map_err(|error| error.body_text())?;
        return read_multipart(multipart).await;
    }
    let params = read_json(request, BODY_LIMIT).await?.unwrap_or_else(|| json!({}));
    Ok((params, HashMap::new()))
}

/// Text fields as strings; each `attach://name` field is replaced by its file part's summary.
async fn read_multipart(mut multipart: Multipart) -> Result<(Value, HashMap<String, Upload>), String> {
    let mut fields = Map::new();
    let mut parts = HashMap::new();
    while let Some(field) = multipart.next_field().await.map_err(|error| error.body_text())? {
        let name = field.name().unwrap_or_default().to_owned();
        match field.file_name().map(str::to_owned) {
            Some(file_name) => {
                let bytes = field.bytes().await.map_err(|error| error.body_text())?.to_vec();
                parts.insert(name, Upload { file_name, bytes });
            }
            None => {
                let text = field.text().await.map_err(|error| error.body_text())?;
                fields.insert(name, Value::String(text));
            }
        }
    }
    let mut uploads = HashMap::new();
    for (key, value) in fields.iter_mut() {
        let attached = value.as_str().and_then(|text| text.strip_prefix("attach://")).and_then(|id| parts.remove(id));
        if let Some(upload) = attached {
            *value = summary(&upload);
            uploads.insert(key.clone(), upload);
        }
    }
    for (name, upload) in parts {
        fields.insert(name.clone(), summary(&upload));
        uploads.insert(name, upload);
    }
    Ok((Value::Object(fields), uploads))
}

fn summary(upload: &Upload) -> Value {
    json!({ "file_name": upload.file_name, "bytes_len": upload.bytes.len() })
}

/// Decodes `%XX` escapes (teloxide escapes `/` in file paths).
fn percent_decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = bytes.get(index + 1..index + 3).and_then(|hex| std::str::from_utf8(hex).ok());
        match hex.filter(|_| bytes[index] == b'%').and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
            Some(byte) => {
                decoded.push(byte);
                index += 3;
            }
            None => {
                decoded.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn percent_decode_handles_escapes_and_stray_percents() {
        assert_eq!(percent_decode("/file/bot1:A/files%2Ffile_1"), "/file/bot1:A/files/file_1");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
