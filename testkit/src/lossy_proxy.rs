//! A reverse proxy in front of a test's homeserver that can lose answers: told to, it passes a
//! room message send (`PUT …/send/…/{txnId}`) on, lets the homeserver make the event, and then
//! either drops the connection without a word (a network that failed on the way back) or
//! answers 504 (a proxy whose upstream answered too late). The client cannot know the event
//! exists; sending it again must not post it twice.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;

/// Bodies larger than this are not proxied (a test's uploads are small).
const MAX_BODY: usize = 64 * 1024 * 1024;

struct Shared {
    upstream: String,
    client: reqwest::Client,
    /// Send answers still to lose, and whether by dropping the connection (else by a 504).
    to_lose: AtomicUsize,
    drop_connection: std::sync::atomic::AtomicBool,
    /// Send answers lost so far.
    lost: AtomicUsize,
}

/// The running proxy; stops when dropped.
pub struct LossyProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LossyProxy {
    /// Proxies to `upstream` (`http://127.0.0.1:PORT`) from a free loopback port.
    pub async fn start(upstream: &str) -> LossyProxy {
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: reqwest::Client::new(),
            to_lose: AtomicUsize::new(0),
            drop_connection: std::sync::atomic::AtomicBool::new(false),
            lost: AtomicUsize::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let task = tokio::spawn(serve(listener, Arc::clone(&shared)));
        LossyProxy { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Loses the answers of the next `n` room message sends: a 504 instead.
    pub fn lose_send_answers(&self, n: usize) {
        self.shared.drop_connection.store(false, Ordering::SeqCst);
        self.shared.to_lose.store(n, Ordering::SeqCst);
    }

    /// Loses the answers of the next `n` room message sends: the connection closes instead.
    pub fn drop_send_answers(&self, n: usize) {
        self.shared.drop_connection.store(true, Ordering::SeqCst);
        self.shared.to_lose.store(n, Ordering::SeqCst);
    }

    /// How many answers were lost.
    pub fn lost(&self) -> usize {
        self.shared.lost.load(Ordering::SeqCst)
    }
}

/// The answer was dropped: hyper closes a connection whose service fails, without a response.
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the answer was dropped on purpose")
    }
}

impl std::error::Error for Dropped {}

/// Serves each connection with hyper directly (axum's services cannot fail, so could not
/// drop a connection).
async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    while let Ok((stream, _)) = listener.accept().await {
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let shared = Arc::clone(&shared);
                async move { forward(&shared, request.map(Body::new)).await }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn forward(shared: &Shared, request: Request) -> Result<Response, Dropped> {
    let (parts, body) = request.into_parts();
    let Ok(body) = to_bytes(body, MAX_BODY).await else { return Ok(StatusCode::PAYLOAD_TOO_LARGE.into_response()) };
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let is_send = parts.method == axum::http::Method::PUT && path.contains("/send/m.room.");
    let mut upstream = shared.client.request(parts.method.clone(), format!("{}{path}", shared.upstream));
    for (name, value) in &parts.headers {
        if name != axum::http::header::HOST {
            upstream = upstream.header(name, value);
        }
    }
    let answer = match upstream.body(body).send().await {
        Ok(answer) => answer,
        Err(err) => return Ok((StatusCode::BAD_GATEWAY, err.to_string()).into_response()),
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await.unwrap_or_default();
    let lose = is_send
        && status.is_success()
        && shared.to_lose.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1)).is_ok();
    if lose {
        shared.lost.fetch_add(1, Ordering::SeqCst);
        if shared.drop_connection.load(Ordering::SeqCst) {
            return Err(Dropped);
        }
        return Ok((StatusCode::GATEWAY_TIMEOUT, "the upstream answered too late").into_response());
    }
    let mut response = Response::builder().status(status);
    for (name, value) in &headers {
        if name != axum::http::header::TRANSFER_ENCODING && name != axum::http::header::CONTENT_LENGTH {
            response = response.header(name, value);
        }
    }
    Ok(response.body(Body::from(bytes)).unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response()))
}
