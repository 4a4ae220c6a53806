//! What every fake server in the testkit shares: a server on a free loopback port that stops
//! when its handle goes, a log of the calls it received that tests wait on, the JSON and
//! multipart bodies it reads, and (for the model fakes) the script of answers and the
//! server-sent events they are written as.

mod call_log;
pub(crate) mod images;
pub mod prompt_cache;
mod script;

pub(crate) use call_log::{CallLog, Describe};
pub use images::SentImage;
pub(crate) use script::{ModelScript, Settled, event_stream, event_stream_at_once, event_stream_paced};
pub use script::{Scripted, split_context_line, split_text, without_context_line};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A poisoned lock only means another test thread panicked; the data is still usable.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A fake's accept loop; aborted when dropped.
pub(crate) struct ServerTask {
    task: JoinHandle<()>,
    /// Connections accepted so far: the accept loop counts them.
    accepted: Arc<AtomicUsize>,
}

impl Drop for ServerTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ServerTask {
    /// Runs the accept loop `start` makes, given the counter it adds each connection to,
    /// until the task is dropped.
    pub(crate) fn spawn<F>(start: impl FnOnce(Arc<AtomicUsize>) -> F) -> ServerTask
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let accepted = Arc::new(AtomicUsize::new(0));
        ServerTask { task: tokio::spawn(start(Arc::clone(&accepted))), accepted }
    }

    /// Serves `router` with axum on `listener`, counting the connections it accepts.
    pub(crate) fn serve(fake: &'static str, listener: TcpListener, router: Router) -> ServerTask {
        ServerTask::spawn(move |counter| async move {
            // Like the real services' servers, pieces of an answer go out at once (no Nagle).
            let listener = axum::serve::ListenerExt::tap_io(listener, move |stream| {
                counter.fetch_add(1, Ordering::Relaxed);
                let _ = stream.set_nodelay(true);
            });
            if let Err(error) = axum::serve(listener, router).await {
                eprintln!("{fake} server stopped: {error}");
            }
        })
    }

    /// How many connections clients opened to the server so far.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

/// A listener on 127.0.0.1, a free port, and its address.
pub(crate) async fn bind_loopback(fake: &str) -> (TcpListener, SocketAddr) {
    // A test helper: failing to bind loopback is an environment problem worth a panic.
    let listener =
        TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("bind 127.0.0.1:0 for {fake}: {e}"));
    let addr = local_addr(fake, &listener);
    (listener, addr)
}

pub(crate) fn local_addr(fake: &str, listener: &TcpListener) -> SocketAddr {
    listener.local_addr().unwrap_or_else(|e| panic!("{fake} local address: {e}"))
}

/// A request body as JSON; a body that is not JSON is kept as a string, so it is still recorded.
pub(crate) fn json_or_text(body: &Bytes) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// A JSON error answer, with `Retry-After` when given.
pub(crate) fn json_status(code: u16, retry_after: Option<u64>, body: Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(seconds) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// Bytes served as a file download.
pub(crate) fn file_response(bytes: Vec<u8>) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
}

/// Whether the request carries a multipart form (uploads).
pub(crate) fn is_multipart(request: &Request) -> bool {
    let content_type = request.headers().get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok());
    content_type.is_some_and(|value| value.starts_with("multipart/form-data"))
}

/// A JSON request body of at most `limit` bytes; `None` when the body is empty or blank.
pub(crate) async fn read_json(request: Request, limit: usize) -> Result<Option<Value>, String> {
    let bytes = axum::body::to_bytes(request.into_body(), limit).await.map_err(|error| error.to_string())?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&bytes).map(Some).map_err(|error| error.to_string())
}
