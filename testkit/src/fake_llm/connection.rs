//! The fake model server's connections, served one by one so that an answer can close its
//! connection the way llama-cpp-python does after a failed stream: the stream ends cleanly, the
//! connection still looks reusable, a request sent over it at once is dropped unanswered, and
//! the connection is closed a moment later.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower_service::Service;

/// How long a connection lives on after an answer that closes it.
const CLOSE_AFTER: Duration = Duration::from_millis(100);

/// Put in an answer's extensions: the next request on its connection gets no answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct CloseAfter;

/// Why a poisoned connection's request was dropped (hyper closes the connection on it).
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection closed after a failed stream")
    }
}

impl std::error::Error for Dropped {}

pub(super) async fn accept_loop(listener: TcpListener, router: Router, accepted: Arc<AtomicUsize>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        accepted.fetch_add(1, Ordering::Relaxed);
        // As servers meant for many requests do (uvicorn, vLLM); the pieces of a streamed
        // answer would otherwise wait for the client's delayed acknowledgements.
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let poisoned = Arc::new(AtomicBool::new(false));
        let close = Arc::new(Notify::new());
        let closing = Arc::clone(&close);
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let (mut router, poisoned, close) = (router.clone(), Arc::clone(&poisoned), Arc::clone(&closing));
            async move {
                if poisoned.load(Ordering::SeqCst) {
                    return Err(Dropped);
                }
                let response: Response<Body> = match router.call(request.map(Body::new)).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                if response.extensions().get::<CloseAfter>().is_some() {
                    poisoned.store(true, Ordering::SeqCst);
                    close.notify_one();
                }
                Ok::<_, Dropped>(response)
            }
        });
        tokio::spawn(async move {
            // A dropped request ends the connection with an error: that is the point.
            let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = close.notified() => {}
            }
            // Dropping the connection closes the socket.
            let _ = tokio::time::timeout(CLOSE_AFTER, connection.as_mut()).await;
        });
    }
}
