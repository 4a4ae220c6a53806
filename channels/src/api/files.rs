//! Files that come with replies: named as attachments (with a download URL) in answers and
//! events, and served by `GET /v1/files/{token}/{name}`.
//!
//! A run's files are kept by the worker as `<sent dir>/<token>/<name>` in the agent's
//! workspace (`outbox/sent/`), beside `<token>.json`, which names their session (see
//! `media_files`). The token is a keyed hash nobody can guess; a download also needs what every
//! guarded route needs (the token, when tokens are configured), and a chat token only gets the
//! files of the sessions it may read. Server paths never leave the process.

use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, Path as UrlPath, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use super::access::Caller;
use super::errors::error;
use super::sessions::may_see;
use super::state::AppState;
use crate::contract::Media;
use crate::media_files::{is_token, label_session};

/// Bytes read from the file per piece of the body.
const CHUNK: usize = 64 * 1024;

/// `media` as the API shows it: name, size, kind, and the URL (relative to the API's base) of
/// files it serves; a remote file keeps its own URL. No server path is shown.
pub(super) fn attachments(media: &[Media]) -> Vec<Value> {
    media
        .iter()
        .map(|item| {
            let path = item.path.as_deref().map(Path::new);
            let name = item.file_name.clone().or_else(|| path?.file_name().map(|n| n.to_string_lossy().into_owned()));
            let url = item.url.clone().or_else(|| path.and_then(download_url));
            json!({ "name": name, "size": item.size, "kind": item.kind, "url": url })
        })
        .collect()
}

/// `/v1/files/<token>/<name>` for a file kept as `…/outbox/sent/<token>/<name>` (whichever
/// workspace: the download looks for the token in each).
fn download_url(path: &Path) -> Option<String> {
    let mut parts = path.iter().rev().map(|part| part.to_str());
    let (Some(Some(name)), Some(Some(token)), Some(Some("sent")), Some(Some("outbox"))) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    is_token(token).then(|| format!("/v1/files/{token}/{}", encode_component(name)))
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
fn encode_component(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// Replaces a run event's `media` (server paths) by `attachments`, as answers show them.
pub(super) fn show_event_media(fields: &mut serde_json::Map<String, Value>) {
    let Some(media) = fields.remove("media") else { return };
    let media: Vec<Media> = serde_json::from_value(media).unwrap_or_default();
    fields.insert("attachments".into(), Value::Array(attachments(&media)));
}

/// `GET /v1/files/{token}/{name}`: one file a reply came with.
pub(super) async fn download(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    UrlPath((token, name)): UrlPath<(String, String)>,
) -> Response {
    let gone = || error(StatusCode::NOT_FOUND, "not_found", "no such file among those this token may read");
    if !is_token(&token) || !is_plain_name(&name) {
        return gone();
    }
    let mut found = None;
    for dir in &state.settings.sent_dirs {
        if let Ok(label) = tokio::fs::read(dir.join(format!("{token}.json"))).await {
            found = label_session(&label).map(|session| (dir.join(&token).join(&name), session));
            break;
        }
    }
    let Some((path, session)) = found.filter(|(_, session)| may_see(&caller, session)) else { return gone() };
    // Only a regular file: the worker moved it there, but a link is never followed.
    let size = match tokio::fs::symlink_metadata(&path).await {
        Ok(meta) if meta.is_file() => meta.len(),
        _ => return gone(),
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(file) => file,
        Err(err) => {
            tracing::warn!(%err, session = %session, "cannot open a sent file for download");
            return gone();
        }
    };
    let mut response = Body::from_stream(chunks(file)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(&name)));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    // Always a download, never shown as a page of this origin: the file is the model's work.
    let disposition = format!("attachment; filename*=UTF-8''{}", encode_component(&name));
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=3600"));
    response
}

/// One file name as the worker writes them: no separators, no leading dot.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\\', '\0'])
}

/// The file's bytes, piece by piece.
fn chunks(file: tokio::fs::File) -> impl futures_util::Stream<Item = std::io::Result<Vec<u8>>> {
    futures_util::stream::try_unfold(file, |mut file| async move {
        let mut buffer = vec![0; CHUNK];
        let read = file.read(&mut buffer).await?;
        buffer.truncate(read);
        Ok((read > 0).then_some((buffer, file)))
    })
}

/// The media type of a file by its extension; anything unknown is plain bytes.
fn content_type(name: &str) -> &'static str {
    let extension = name.rsplit_once('.').map(|(_, extension)| extension.to_ascii_lowercase()).unwrap_or_default();
    match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "csv" => "text/csv; charset=utf-8",
        "txt" | "md" => "text/plain; charset=utf-8",
        "json" => "application/json",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_files_get_a_download_url_and_no_path_is_shown() {
        let token = "0123456789abcdef0123456789abcdef";
        let kept = Media {
            kind: "document".into(),
            path: Some(format!("/srv/ws/outbox/sent/{token}/Q3 report.csv")),
            file_name: Some("Q3 report.csv".into()),
            size: Some(12),
            ..Media::default()
        };
        let elsewhere = Media { kind: "photo".into(), path: Some("/srv/ws/chart.png".into()), ..Media::default() };
        let shown = attachments(&[kept, elsewhere]);
        assert_eq!(
            shown[0],
            json!({"name": "Q3 report.csv", "size": 12, "kind": "document",
            "url": format!("/v1/files/{token}/Q3%20report.csv")})
        );
        assert_eq!(shown[1], json!({"name": "chart.png", "size": null, "kind": "photo", "url": null}));
        assert!(!shown.iter().any(|item| item.to_string().contains("/srv")));
    }

    #[test]
    fn only_plain_names_are_served() {
        for name in ["a.csv", "Q3_report.csv"] {
            assert!(is_plain_name(name), "{name}");
        }
        for name in ["", ".key", "../x", "a/b", "a\\b"] {
            assert!(!is_plain_name(name), "{name}");
        }
        assert_eq!(content_type("chart.PNG"), "image/png");
        assert_eq!(content_type("page.html"), "application/octet-stream");
    }
}
