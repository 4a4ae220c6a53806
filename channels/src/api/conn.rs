//! What each HTTP connection is doing, so that the server can close the ones that waste a
//! descriptor: idle too long, too slow to send a request head, or the one that has waited
//! longest for its client (idle, or sending a head or body) when the connection limit is
//! reached.
//!
//! hyper's own header timer starts when it begins to wait for a head, so it would also be the
//! idle timeout; tracking the phase here keeps the two limits apart.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where a connection is between requests.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// No request in progress and no byte of the next one yet.
    Idle { since: Instant },
    /// Bytes of a request head arrived; the head is not complete yet.
    ReadingHead { since: Instant },
    /// The head is complete and its body is still coming (held to the body timeout by
    /// [`super::body`]).
    ReadingBody { since: Instant },
    /// A request is being handled (its body read, its reply awaited or written).
    Busy,
}

/// Why a connection was closed by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CloseReason {
    Idle,
    HeaderTimeout,
}

impl CloseReason {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            CloseReason::Idle => "idle",
            CloseReason::HeaderTimeout => "request head too slow",
        }
    }
}

/// One connection's phase, shared by its reader, its service and the server.
#[derive(Debug)]
pub(super) struct ConnState {
    phase: Mutex<Phase>,
    /// Wakes the deadline watcher when the phase changes, so it sleeps to the right deadline.
    changed: Notify,
    /// Cancelled to make the connection close (evicted at the connection limit).
    pub(super) evict: CancellationToken,
}

impl ConnState {
    fn new() -> Self {
        Self {
            phase: Mutex::new(Phase::Idle { since: Instant::now() }),
            changed: Notify::new(),
            evict: CancellationToken::new(),
        }
    }

    fn with_phase<T>(&self, f: impl FnOnce(&mut Phase) -> T) -> T {
        f(&mut self.phase.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Bytes arrived: on an idle connection they start a request head.
    fn on_read(&self) {
        let started = self.with_phase(|phase| {
            let idle = matches!(phase, Phase::Idle { .. });
            if idle {
                *phase = Phase::ReadingHead { since: Instant::now() };
            }
            idle
        });
        if started {
            self.changed.notify_one();
        }
    }

    /// hyper parsed a head and called the service; the body, if any, is still to come.
    pub(super) fn request_started(&self, has_body: bool) {
        let next = if has_body { Phase::ReadingBody { since: Instant::now() } } else { Phase::Busy };
        self.with_phase(|phase| *phase = next);
        self.changed.notify_one();
    }

    /// The request's body has been read in full.
    pub(super) fn body_arrived(&self) {
        self.with_phase(|phase| {
            if matches!(phase, Phase::ReadingBody { .. }) {
                *phase = Phase::Busy;
            }
        });
    }

    /// Whether the connection waits for its client (a request, or the rest of one).
    pub(super) fn waits_for_client(&self) -> bool {
        self.waiting_since().is_some()
    }

    /// Whether a request's body is still coming.
    #[cfg(test)]
    pub(super) fn is_reading_body(&self) -> bool {
        self.with_phase(|phase| matches!(phase, Phase::ReadingBody { .. }))
    }

    /// The response is ready; the connection waits for the next request from now.
    pub(super) fn request_finished(&self) {
        self.with_phase(|phase| *phase = Phase::Idle { since: Instant::now() });
        self.changed.notify_one();
    }

    /// When the connection has waited for its client (idle, or slow) since, if it does.
    fn waiting_since(&self) -> Option<Instant> {
        self.with_phase(|phase| match *phase {
            Phase::Idle { since } | Phase::ReadingHead { since } | Phase::ReadingBody { since } => Some(since),
            Phase::Busy => None,
        })
    }

    /// Resolves when the connection passes its idle or header deadline.
    pub(super) async fn deadline(&self, idle: Duration, header: Duration) -> CloseReason {
        loop {
            let phase = self.with_phase(|phase| *phase);
            let (due, reason) = match phase {
                Phase::Idle { since } => (since + idle, CloseReason::Idle),
                Phase::ReadingHead { since } => (since + header, CloseReason::HeaderTimeout),
                // A request may wait minutes for its reply: wait for it to end. A late body is
                // answered by the request's own timer (`body`), with a 408.
                Phase::Busy | Phase::ReadingBody { .. } => (Instant::now() + idle.max(header), CloseReason::Idle),
            };
            tokio::select! {
                _ = tokio::time::sleep_until(due) => {}
                _ = self.changed.notified() => continue,
            }
            // The phase may have moved on while sleeping: only an unchanged one is overdue.
            let still = self.with_phase(|now| match (*now, phase) {
                (Phase::Idle { since: a }, Phase::Idle { since: b }) => a == b,
                (Phase::ReadingHead { since: a }, Phase::ReadingHead { since: b }) => a == b,
                _ => false,
            });
            if still {
                return reason;
            }
        }
    }
}

/// The open connections of one server, for the connection limit.
#[derive(Debug, Default)]
pub(super) struct Connections {
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
    next_id: Mutex<u64>,
}

/// What to do with a connection just accepted.
pub(super) enum Admission {
    Admitted {
        id: u64,
        state: Arc<ConnState>,
    },
    /// Every connection has a request in progress: the new one is refused.
    Refused,
}

impl Connections {
    /// Admits a new connection; at `max`, closes the connection that has waited longest for
    /// its client (idle ones, slow heads and slow bodies alike) to make room, or refuses the
    /// new one.
    pub(super) fn admit(&self, max: usize) -> Admission {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let live = open.values().filter(|c| !c.evict.is_cancelled()).count();
        if live >= max {
            let oldest = open
                .values()
                .filter(|c| !c.evict.is_cancelled())
                .filter_map(|c| c.waiting_since().map(|since| (since, c)))
                .min_by_key(|(since, _)| *since);
            match oldest {
                Some((_, victim)) => victim.evict.cancel(),
                None => return Admission::Refused,
            }
        }
        let id = {
            let mut next = self.next_id.lock().unwrap_or_else(PoisonError::into_inner);
            *next += 1;
            *next
        };
        let state = Arc::new(ConnState::new());
        open.insert(id, Arc::clone(&state));
        Admission::Admitted { id, state }
    }

    /// Connections open now, those asked to close included.
    pub(super) fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub(super) fn remove(&self, id: u64) {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
    }
}

/// A socket that tells its connection's state when request bytes arrive.
pub(super) struct TrackedIo<T> {
    inner: T,
    state: Arc<ConnState>,
}

impl<T> TrackedIo<T> {
    pub(super) fn new(inner: T, state: Arc<ConnState>) -> Self {
        Self { inner, state }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TrackedIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.on_read();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TrackedIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_limit_the_longest_waiting_connection_makes_room() {
        let conns = Connections::default();
        let Admission::Admitted { state: first, .. } = conns.admit(2) else { panic!("refused") };
        let Admission::Admitted { state: second, .. } = conns.admit(2) else { panic!("refused") };
        second.request_started(false);
        let Admission::Admitted { .. } = conns.admit(2) else { panic!("refused") };
        assert!(first.evict.is_cancelled(), "the idle connection was not closed");
        assert!(!second.evict.is_cancelled(), "a busy connection was closed");
    }

    /// The head starts after the watcher went to sleep on the (long) idle deadline: it must
    /// wake up and hold the head to the header timeout.
    #[tokio::test(start_paused = true)]
    async fn a_head_started_while_watching_idle_gets_the_header_deadline() {
        let state = ConnState::new();
        let started = Instant::now();
        let watch = state.deadline(Duration::from_secs(60), Duration::from_secs(2));
        let reading = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            state.on_read();
            std::future::pending::<()>().await;
        };
        let reason = tokio::select! {
            reason = watch => reason,
            _ = reading => unreachable!(),
        };
        assert_eq!(reason, CloseReason::HeaderTimeout);
        assert_eq!(started.elapsed(), Duration::from_millis(2100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_is_not_closed_and_idles_from_its_last_reply() {
        let state = ConnState::new();
        state.request_started(false);
        let started = Instant::now();
        let watch = state.deadline(Duration::from_secs(5), Duration::from_secs(2));
        let request = async {
            tokio::time::sleep(Duration::from_secs(100)).await;
            state.request_finished();
            std::future::pending::<()>().await;
        };
        let reason = tokio::select! {
            reason = watch => reason,
            _ = request => unreachable!(),
        };
        assert_eq!(reason, CloseReason::Idle);
        assert_eq!(started.elapsed(), Duration::from_secs(105));
    }

    /// A body still coming waits for its client like a slow head: it makes room at the limit;
    /// once it has arrived, the request is busy and kept.
    #[test]
    fn a_slow_body_makes_room_and_an_arrived_one_is_kept() {
        let conns = Connections::default();
        let Admission::Admitted { state: slow, .. } = conns.admit(2) else { panic!("refused") };
        let Admission::Admitted { state: arrived, .. } = conns.admit(2) else { panic!("refused") };
        slow.request_started(true);
        arrived.request_started(true);
        arrived.body_arrived();
        assert!(slow.is_reading_body() && !arrived.is_reading_body());
        let Admission::Admitted { .. } = conns.admit(2) else { panic!("refused") };
        assert!(slow.evict.is_cancelled(), "the slow body was not closed");
        assert!(!arrived.evict.is_cancelled(), "a request whose body arrived was closed");
    }

    #[test]
    fn with_every_connection_busy_a_new_one_is_refused() {
        let conns = Connections::default();
        let Admission::Admitted { state, .. } = conns.admit(1) else { panic!("refused") };
        state.request_started(false);
        assert!(matches!(conns.admit(1), Admission::Refused));
    }
}
