//! A reverse proxy in front of a test's homeserver that can lose answers: told to, it passes a
//! room message send (`PUT …/send/…/{txnId}`) on, lets the homeserver make the event, and
//! answers the client 504, as a proxy whose upstream answered too late does. The client cannot
//! know the event exists; sending it again must not post it twice.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::task::JoinHandle;

/// Bodies larger than this are not proxied (a test's uploads are small).
const MAX_BODY: usize = 64 * 1024 * 1024;

struct Shared {
    upstream: String,
    client: reqwest::Client,
    /// Send answers still to lose.
    to_lose: AtomicUsize,
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
            lost: AtomicUsize::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let app = axum::Router::new().fallback(forward).with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        LossyProxy { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Loses the answers of the next `n` room message sends.
    pub fn lose_send_answers(&self, n: usize) {
        self.shared.to_lose.store(n, Ordering::SeqCst);
    }

    /// How many answers were lost.
    pub fn lost(&self) -> usize {
        self.shared.lost.load(Ordering::SeqCst)
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = to_bytes(body, MAX_BODY).await else { return StatusCode::PAYLOAD_TOO_LARGE.into_response() };
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
        Err(err) => return (StatusCode::BAD_GATEWAY, err.to_string()).into_response(),
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await.unwrap_or_default();
    let lose = is_send
        && status.is_success()
        && shared.to_lose.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1)).is_ok();
    if lose {
        shared.lost.fetch_add(1, Ordering::SeqCst);
        return (StatusCode::GATEWAY_TIMEOUT, "the upstream answered too late").into_response();
    }
    let mut response = Response::builder().status(status);
    for (name, value) in &headers {
        if name != axum::http::header::TRANSFER_ENCODING && name != axum::http::header::CONTENT_LENGTH {
            response = response.header(name, value);
        }
    }
    response.body(Body::from(bytes)).unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}
