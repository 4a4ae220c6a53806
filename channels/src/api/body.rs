//! A request body held to a time limit. A client that sends a head and then part of a body (or
//! declares a length it never sends) would otherwise hold its connection, and its place under
//! the connection limit, for as long as it likes: the body must arrive within the body
//! timeout of the head's end, or the request is answered `408` and its connection closed.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio_util::sync::CancellationToken;

use super::conn::ConnState;
use super::errors::error;

/// A request body that tells its connection when it has arrived in full.
pub(super) struct TimedBody {
    inner: Incoming,
    arrived: Arrived,
}

/// Cancelled once the whole body has been read.
#[derive(Clone)]
pub(super) struct Arrived {
    token: CancellationToken,
    state: Arc<ConnState>,
}

impl Arrived {
    fn mark(&self) {
        if !self.token.is_cancelled() {
            self.token.cancel();
            self.state.body_arrived();
        }
    }

    /// Resolves when the body is late: `limit` passed, or the connection was asked to make
    /// room (evicted) while the body was still coming. Never resolves once it has arrived.
    async fn overdue(&self, limit: Duration) {
        tokio::select! {
            biased;
            () = self.token.cancelled() => std::future::pending().await,
            () = tokio::time::sleep(limit) => {}
            () = self.state.evict.cancelled() => {}
        }
    }
}

/// Marks the request started on its connection and wraps its body; a request without a body
/// (or with an empty one) has nothing to wait for.
pub(super) fn timed(request: Request<Incoming>, state: &Arc<ConnState>) -> (Request<TimedBody>, Arrived) {
    let (parts, inner) = request.into_parts();
    let arrived = Arrived { token: CancellationToken::new(), state: Arc::clone(state) };
    let complete = inner.is_end_stream();
    state.request_started(!complete);
    if complete {
        arrived.token.cancel();
    }
    (Request::from_parts(parts, TimedBody { inner, arrived: arrived.clone() }), arrived)
}

/// The handler's response, or `408` when the body is overdue first (the handler, which may be
/// blocked reading it, is dropped).
pub(super) async fn within(
    response: impl Future<Output = Result<Response, Infallible>>,
    arrived: Arrived,
    limit: Duration,
) -> Result<Response, Infallible> {
    tokio::select! {
        response = response => response,
        () = arrived.overdue(limit) => {
            tracing::debug!(limit_secs = limit.as_secs(), "API request body too slow; answering 408");
            Ok(too_slow(limit))
        }
    }
}

/// `408` and `Connection: close`: the rest of a late body is not worth reading.
fn too_slow(limit: Duration) -> Response {
    let text = format!("the request body did not arrive within {} s of its head", limit.as_secs());
    let mut response = error(StatusCode::REQUEST_TIMEOUT, "body_timeout", &text);
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || (polled.is_ready() && self.inner.is_end_stream()) {
            self.arrived.mark();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conn::Connections;

    fn arrived() -> Arrived {
        let conns = Connections::default();
        let crate::api::conn::Admission::Admitted { state, .. } = conns.admit(1) else { panic!("refused") };
        state.request_started(true);
        Arrived { token: CancellationToken::new(), state }
    }

    async fn answered_late() -> Result<Response, Infallible> {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(Response::default())
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_still_coming_at_the_limit_is_answered_408() {
        let started = tokio::time::Instant::now();
        let response = within(answered_late(), arrived(), Duration::from_secs(2)).await.unwrap();
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(response.headers()[header::CONNECTION], "close");
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    /// A request whose body came may wait for its reply as long as it takes.
    #[tokio::test(start_paused = true)]
    async fn an_arrived_body_is_not_timed() {
        let arrived = arrived();
        arrived.mark();
        assert!(!arrived.state.is_reading_body());
        let response = within(answered_late(), arrived, Duration::from_secs(2)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_body_evicted_to_make_room_is_answered_408_at_once() {
        let arrived = arrived();
        arrived.state.evict.cancel();
        let started = tokio::time::Instant::now();
        let response = within(answered_late(), arrived, Duration::from_secs(30)).await.unwrap();
        assert_eq!((response.status(), started.elapsed()), (StatusCode::REQUEST_TIMEOUT, Duration::ZERO));
    }
}
