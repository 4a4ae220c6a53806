//! The API channel's accept loop: HTTP/1 connections served by hyper with a header timeout,
//! a body timeout, an idle timeout, a bound on header size and a connection limit, past which
//! connections are answered `503` (axum::serve has none of these).

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::body;
use super::conn::{Admission, ConnState, Connections, TrackedIo};
use super::refusal::{self, Refusals};

/// hyper's smallest read buffer; a head must fit in it.
pub const MIN_HEADER_BYTES: usize = 8192;
/// Pause after `accept` failed (out of descriptors, for one), so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The limits every connection is held to.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// A request head must be complete this long after its first byte.
    pub header_timeout: Duration,
    /// A request body must be complete this long after its head.
    pub body_timeout: Duration,
    /// A connection with no request in progress is closed after this long.
    pub idle_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections past the limit answered `503` at once (each for a moment); more are closed
    /// without an answer. Bounded so that a flood cannot spend every descriptor on refusals.
    pub max_refusing: usize,
    /// Largest request head (request line and headers); at least [`MIN_HEADER_BYTES`].
    pub max_header_bytes: usize,
}

/// Serves `app` until `shutdown`, then lets requests in progress finish.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    connections: Arc<Connections>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let mut tasks = JoinSet::new();
    let refusals = Refusals::new(limits.max_refusing);
    let mut refused_report = RefusedReport::default();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        // Reap finished connection tasks so the set does not grow with every connection.
        while tasks.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => {
                // A response goes out in pieces (head, body): without this the kernel holds a
                // later piece until the client acknowledges the first, which a client that
                // delays its acknowledgements does 40 ms later, on every request.
                if let Err(err) = stream.set_nodelay(true) {
                    tracing::debug!(%err, "cannot set TCP_NODELAY on an API connection");
                }
                stream
            }
            Err(err) => {
                // EMFILE and friends: the connection stays in the kernel's queue until a
                // descriptor is free again.
                tracing::warn!(%err, "cannot accept an API connection; retrying shortly");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        match connections.admit(limits.max_connections) {
            Admission::Admitted { id, state } => {
                let connections = Arc::clone(&connections);
                let (app, shutdown, refusals) = (app.clone(), shutdown.clone(), refusals.clone());
                tasks.spawn(async move {
                    serve_connection(stream, app, state, limits, shutdown, refusals).await;
                    connections.remove(id);
                });
            }
            Admission::Refused => {
                refused_report.note(limits.max_connections);
                refusals.refuse(stream);
            }
        }
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// The log of connections refused at the limit: one line at once, then one a minute at most
/// with the count since, so a flood does not flood the log too.
#[derive(Default)]
struct RefusedReport {
    last: Option<Instant>,
    since: u64,
}

impl RefusedReport {
    const EVERY: Duration = Duration::from_secs(60);

    fn note(&mut self, max: usize) {
        self.since += 1;
        if self.last.is_some_and(|last| last.elapsed() < Self::EVERY) {
            return;
        }
        tracing::warn!(max, refused = self.since, "API connection limit reached; new connections refused (503)");
        (self.last, self.since) = (Some(Instant::now()), 0);
    }
}

async fn serve_connection(
    stream: TcpStream,
    app: Router,
    state: Arc<ConnState>,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    refusals: Refusals,
) {
    let io = TokioIo::new(TrackedIo::new(stream, Arc::clone(&state)));
    let tower = TowerToHyperService::new(app);
    let tracked = Arc::clone(&state);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        // Evicted while idle: a request that was already on its way gets the 503 a new
        // connection past the limit would get, rather than a closed connection.
        let evicted = tracked.evict.is_cancelled();
        let (request, arrived) = body::timed(request, &tracked);
        let response = (!evicted).then(|| tower.call(request));
        let tracked = Arc::clone(&tracked);
        async move {
            let response = match response {
                Some(response) => body::within(response, arrived, limits.body_timeout).await,
                None => Ok(refusal::response()),
            };
            tracked.request_finished();
            response
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The timeouts are kept by `ConnState`; hyper's header timer would also cut idle waits.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(limits.max_header_bytes.max(MIN_HEADER_BYTES));
    // With upgrades: a WebSocket takes the connection over once its handshake is answered.
    let conn = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(err) = result {
                tracing::debug!(%err, "API connection ended with an error");
            }
        }
        reason = state.deadline(limits.idle_timeout, limits.header_timeout) => {
            tracing::debug!(reason = reason.as_str(), "API connection closed");
        }
        _ = state.evict.cancelled() => {
            // An idle connection may have a request on its way (a head just read, even), and a
            // slow body is answered 408: let that answer go out, briefly and within the
            // refusal budget.
            match state.waits_for_client().then(|| refusals.reserve()).flatten() {
                Some(_permit) => {
                    let _ = tokio::time::timeout(refusal::LINGER, conn.as_mut()).await;
                }
                None => tracing::debug!("API connection closed to make room under the connection limit"),
            }
        }
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            if let Err(err) = conn.await {
                tracing::debug!(%err, "API connection ended with an error during shutdown");
            }
        }
    }
}
