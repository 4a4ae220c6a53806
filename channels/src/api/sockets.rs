//! The open WebSockets of an API channel, held to `channels.api.max_websockets`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Open WebSockets, held to a limit.
#[derive(Debug, Default)]
pub(super) struct Sockets {
    open: AtomicUsize,
}

impl Sockets {
    pub(super) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    pub(super) fn admit(self: &Arc<Self>, max: usize) -> Option<SocketSlot> {
        let admitted = self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        admitted.is_ok().then(|| SocketSlot(Arc::clone(self)))
    }
}

/// One admitted socket; frees its place when dropped.
pub(super) struct SocketSlot(Arc<Sockets>);

impl Drop for SocketSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}
