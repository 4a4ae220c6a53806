//! A chat's messages in order across crashes and workers (NATS).
//!
//! JetStream hands a worker messages in stream order, but a message whose worker died comes
//! back only after `ack_wait`, behind the ones delivered meanwhile; and with several workers
//! two messages of one chat may be at two workers at once. So before a message at stream
//! position `q` on subject `S` is taken on, the worker asks the bus which messages of `S` are
//! still stored before `q` (in a work-queue stream, acked ones are gone). If one is neither held
//! by this worker (where the session queue keeps the order) nor the message itself, it is still
//! waiting, running elsewhere or due for redelivery: this message is handed back with a short,
//! growing delay and looked at again then. The in-process bus delivers in order by itself and
//! offers no [`StreamOrder`], so nothing is looked up there.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use switchboard_channels::bus::{BusError, DeliveryInfo, StoredInbound, StreamOrder};
use thiserror::Error;
use tokio::sync::oneshot;

use crate::store::{Store, StoreError};

/// The first and the longest pause before a message that waits for an older one is seen again.
/// Short enough that a chat goes on soon after its older message is acked; growing so that a
/// message waiting behind a long turn costs a lookup every two seconds, not a storm.
const WAIT_MIN: Duration = Duration::from_millis(200);
const WAIT_MAX: Duration = Duration::from_secs(2);

/// The bus's stream and the positions of the inbound messages this worker holds in it.
pub(super) struct ChatOrder {
    pub(super) stream: Arc<dyn StreamOrder>,
    pub(super) held: HeldSeqs,
}

impl ChatOrder {
    pub(super) fn new(stream: Arc<dyn StreamOrder>) -> Self {
        Self { stream, held: HeldSeqs::default() }
    }
}

/// Stream positions of the inbound messages this worker holds (queued or running).
#[derive(Clone, Default)]
pub(super) struct HeldSeqs(Arc<Mutex<HashSet<u64>>>);

impl HeldSeqs {
    fn contains(&self, seq: u64) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).contains(&seq)
    }

    /// Records `seq` as held until the guard is dropped.
    pub(super) fn hold(&self, seq: u64) -> SeqGuard {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(seq);
        SeqGuard { seqs: self.clone(), seq }
    }
}

/// Keeps a stream position in [`HeldSeqs`] while it lives.
pub(super) struct SeqGuard {
    seqs: HeldSeqs,
    seq: u64,
}

impl Drop for SeqGuard {
    fn drop(&mut self) {
        self.seqs.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.seq);
    }
}

/// Takes of one chat's deliveries, one after another, while those of different chats run at
/// once: a delivery's check must find the one before it of its chat already held here (or
/// handed back), not still being checked, or it would be handed back behind it for nothing.
#[derive(Default)]
pub(super) struct TakeChains(HashMap<String, oneshot::Receiver<()>>);

/// Past this many chats remembered, those whose last take finished are forgotten.
const CHAINS_PRUNED_AT: usize = 256;

impl TakeChains {
    /// For a take of a delivery on `subject`: the end of the chat's previous take to wait for,
    /// if one is under way, and the guard whose drop ends this one.
    pub(super) fn link(&mut self, subject: &str) -> (Option<oneshot::Receiver<()>>, oneshot::Sender<()>) {
        if self.0.len() >= CHAINS_PRUNED_AT {
            self.0.retain(|_, end| matches!(end.try_recv(), Err(oneshot::error::TryRecvError::Empty)));
        }
        let (guard, end) = oneshot::channel();
        (self.0.insert(subject.to_owned(), end), guard)
    }
}

#[derive(Debug, Error)]
pub(super) enum OrderError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// When the delivery must wait for an older message of its chat: how long to hand it back for.
pub(super) async fn wait_for_older(
    order: &ChatOrder,
    store: &dyn Store,
    info: &DeliveryInfo,
) -> Result<Option<Duration>, OrderError> {
    let Some(seq) = info.stream_seq else { return Ok(None) };
    let (bus, held) = (order.stream.as_ref(), &order.held);
    let mut from = 1;
    // Each step skips one message this worker holds or one that is done, so the walk ends.
    while let Some(older) = bus.stored_inbound(&info.subject, from).await? {
        if older.seq >= seq {
            return Ok(None);
        }
        from = older.seq + 1;
        if held.contains(older.seq) {
            continue;
        }
        if answered_but_kept(bus, store, &older).await? {
            continue;
        }
        tracing::debug!(subject = %info.subject, seq, older = older.seq, "an older message of the chat is not done; waiting");
        return Ok(Some(delay(info.attempt)));
    }
    Ok(None)
}

/// An older message whose run is settled (finished, its reply published) but which the stream
/// still holds: its worker's ack is on its way, or was lost (nats-server killed just after it
/// counted the ack, before it removed the message; no one would ever be given it again). It
/// is removed, so the chat goes on at once either way.
async fn answered_but_kept(
    bus: &dyn StreamOrder,
    store: &dyn Store,
    older: &StoredInbound,
) -> Result<bool, OrderError> {
    let Some(id) = &older.id else { return Ok(false) };
    if !store.run_settled(id).await? {
        return Ok(false);
    }
    tracing::debug!(seq = older.seq, inbound = %id, "an older message of the chat is answered but still in the stream; removing it");
    bus.discard_inbound(older.seq).await?;
    Ok(true)
}

/// Grows with the deliveries so far, up to [`WAIT_MAX`].
fn delay(attempt: u64) -> Duration {
    let factor = u32::try_from(attempt.clamp(1, 10)).unwrap_or(10);
    (WAIT_MIN * factor).min(WAIT_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_grows_and_is_capped() {
        assert_eq!(delay(1), WAIT_MIN);
        assert_eq!(delay(3), WAIT_MIN * 3);
        assert_eq!(delay(1000), WAIT_MAX);
    }

    #[tokio::test]
    async fn a_chats_takes_wait_for_the_one_before_and_other_chats_do_not() {
        let mut chains = TakeChains::default();
        let (none, first) = chains.link("sb.in.telegram.1");
        assert!(none.is_none());
        let (other, _other_guard) = chains.link("sb.in.telegram.2");
        assert!(other.is_none(), "another chat waits for nothing");
        let (previous, _second) = chains.link("sb.in.telegram.1");
        let mut previous = previous.expect("the chat's second take waits for its first");
        assert!(matches!(previous.try_recv(), Err(oneshot::error::TryRecvError::Empty)));
        drop(first);
        assert!(previous.await.is_err(), "ends once the first take's guard is dropped");
    }

    #[test]
    fn a_position_is_held_while_its_guard_lives() {
        let held = HeldSeqs::default();
        let guard = held.hold(7);
        assert!(held.contains(7));
        drop(guard);
        assert!(!held.contains(7));
    }
}
