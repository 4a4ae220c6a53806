//! `503` for connections past the connection limit, instead of a bare close (which the
//! kernel turns into a reset when the client's request is unread): a client that is told
//! `Retry-After` backs off, one that sees a reset just fails or retries at once.
//!
//! Refusing costs a descriptor for a moment, so it is bounded: at most `budget` connections
//! are being refused (or, evicted, answered their last request) at once, each for at most
//! [`LINGER`]; past that a connection is closed as before.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::errors::error_with;

/// What `Retry-After` suggests: connections free up as requests end.
pub(super) const RETRY_AFTER_SECS: u64 = 1;
/// How long one refusal may take: writing the answer, then reading what the client sent, so
/// that closing does not reset the connection before the client has read the answer.
pub(super) const LINGER: Duration = Duration::from_secs(1);
/// The request read (and dropped) at most before closing.
const DRAIN_BYTES: usize = 64 * 1024;
const CODE: &str = "too_many_connections";
const MESSAGE: &str = "the server has too many connections open; retry after a moment";

/// The descriptors refusals may hold at once.
#[derive(Debug, Clone)]
pub(super) struct Refusals {
    budget: Arc<Semaphore>,
}

impl Refusals {
    pub(super) fn new(budget: usize) -> Self {
        Self { budget: Arc::new(Semaphore::new(budget)) }
    }

    /// A place for one more refusal, if the budget has one.
    pub(super) fn reserve(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.budget).try_acquire_owned().ok()
    }

    /// Answers `stream` `503` and closes it, in the background; closes it at once when the
    /// budget is spent.
    pub(super) fn refuse(&self, stream: TcpStream) {
        match self.reserve() {
            Some(permit) => {
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(LINGER, answer(stream)).await;
                    drop(permit);
                });
            }
            None => tracing::debug!("too many connections being refused; closing one without an answer"),
        }
    }
}

/// Writes the `503`, ends the sending side, and reads what the client sent until it closes.
async fn answer(mut stream: TcpStream) {
    if stream.write_all(raw_response().as_bytes()).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    let mut buf = [0u8; 4096];
    let mut drained = 0;
    while drained < DRAIN_BYTES {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

fn body() -> String {
    let body = serde_json::json!({"error": {"code": CODE, "message": MESSAGE, "type": "api_error"}});
    body.to_string()
}

/// The whole answer, written before the request is read (HTTP/1.1 allows an early answer).
fn raw_response() -> String {
    let body = body();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: {RETRY_AFTER_SECS}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The same answer from the HTTP server, to a request on a connection evicted while idle.
pub(super) fn response() -> Response {
    let mut response = error_with(StatusCode::SERVICE_UNAVAILABLE, CODE, MESSAGE, Value::Null);
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_answer_is_a_complete_http_response() {
        let raw = raw_response();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let parsed: Value = serde_json::from_str(body).unwrap();
        assert_eq!(parsed["error"]["code"], CODE);
    }
}
