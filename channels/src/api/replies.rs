//! Replies by inbound message id: requests waiting for one (several may wait for the same
//! message when a client retries), and a bounded, time-limited cache of recent replies to
//! idempotent messages, so a retry after the reply went out gets it again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::contract::OutboundMessage;

/// A digest of what a request asked, to tell a retry from a different request that reuses
/// an idempotency key.
pub(crate) type Fingerprint = [u8; 32];

/// How long and how many replies to idempotent messages are kept.
#[derive(Debug, Clone, Copy)]
pub struct ReplayCache {
    pub ttl: Duration,
    pub max_entries: usize,
}

type Slot = watch::Sender<Option<Arc<OutboundMessage>>>;

/// A message some request waits for.
struct Pending {
    fingerprint: Option<Fingerprint>,
    slot: Slot,
    /// The bus confirmed the message: requests joining later need not publish it again.
    accepted: bool,
}

struct Done {
    fingerprint: Option<Fingerprint>,
    reply: Arc<OutboundMessage>,
    at: Instant,
}

#[derive(Default)]
struct Inner {
    pending: HashMap<String, Pending>,
    done: HashMap<String, Done>,
    /// Cached ids, oldest first, for expiry and the entry bound.
    order: VecDeque<(Instant, String)>,
}

/// What a request for a message id finds.
pub(crate) enum Claim {
    /// Nobody had asked for this message: the caller publishes it, then waits.
    First(watch::Receiver<Option<Arc<OutboundMessage>>>),
    /// Another request already waits for it: wait with it, and publish it only if the bus has
    /// not confirmed it yet (`accepted`).
    Joined { receiver: watch::Receiver<Option<Arc<OutboundMessage>>>, accepted: bool },
    /// Its reply is known already.
    Replied(Arc<OutboundMessage>),
    /// The id was used for a request that asked something else.
    Conflict,
}

pub(crate) struct Replies {
    inner: Mutex<Inner>,
    cache: ReplayCache,
}

impl Replies {
    pub(crate) fn new(cache: ReplayCache) -> Self {
        Self { inner: Mutex::new(Inner::default()), cache }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a request for `id`. A missing fingerprint (on either side) is not checked.
    pub(crate) fn claim(&self, id: &str, fingerprint: Option<Fingerprint>) -> Claim {
        let mut inner = self.lock();
        self.expire(&mut inner);
        let differs = |known: Option<Fingerprint>| matches!((known, fingerprint), (Some(a), Some(b)) if a != b);
        if let Some(done) = inner.done.get(id) {
            return if differs(done.fingerprint) { Claim::Conflict } else { Claim::Replied(Arc::clone(&done.reply)) };
        }
        if let Some(pending) = inner.pending.get(id) {
            if differs(pending.fingerprint) {
                return Claim::Conflict;
            }
            return Claim::Joined { receiver: pending.slot.subscribe(), accepted: pending.accepted };
        }
        let (slot, receiver) = watch::channel(None);
        inner.pending.insert(id.to_owned(), Pending { fingerprint, slot, accepted: false });
        Claim::First(receiver)
    }

    /// The bus confirmed the message `id`.
    pub(crate) fn accepted(&self, id: &str) {
        if let Some(pending) = self.lock().pending.get_mut(id) {
            pending.accepted = true;
        }
    }

    /// A request stops waiting for `id`; once nobody waits, the id is forgotten (a reply that
    /// comes later is still cached when `cache` says so).
    pub(crate) fn release(&self, id: &str, receiver: watch::Receiver<Option<Arc<OutboundMessage>>>) {
        drop(receiver);
        let mut inner = self.lock();
        if inner.pending.get(id).is_some_and(|pending| pending.slot.receiver_count() == 0) {
            inner.pending.remove(id);
        }
    }

    /// Hands a reply to the requests waiting for it, and caches it when `cache`; gives it back
    /// when nobody waited (for the outbox).
    pub(crate) fn resolve(&self, reply: OutboundMessage, cache: bool) -> Option<Arc<OutboundMessage>> {
        let reply = Arc::new(reply);
        let Some(id) = reply.in_reply_to.clone() else { return Some(reply) };
        let mut inner = self.lock();
        let pending = inner.pending.remove(&id);
        let waited = pending.as_ref().is_some_and(|p| p.slot.receiver_count() > 0);
        if cache && !inner.done.contains_key(&id) {
            let fingerprint = pending.as_ref().and_then(|p| p.fingerprint);
            let now = Instant::now();
            inner.done.insert(id.clone(), Done { fingerprint, reply: Arc::clone(&reply), at: now });
            inner.order.push_back((now, id));
            self.expire(&mut inner);
        }
        if let Some(pending) = pending {
            pending.slot.send_replace(Some(Arc::clone(&reply)));
        }
        (!waited).then_some(reply)
    }

    /// Requests waiting for a reply, and replies kept for retries.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.pending.len(), inner.done.len())
    }

    /// Drops every waiting request; their handlers answer that the service is stopping.
    pub(crate) fn release_all(&self) {
        self.lock().pending.clear();
    }

    fn expire(&self, inner: &mut Inner) {
        let now = Instant::now();
        while let Some((at, _)) = inner.order.front() {
            let too_old = now.duration_since(*at) >= self.cache.ttl;
            if !too_old && inner.order.len() <= self.cache.max_entries {
                break;
            }
            if let Some((at, id)) = inner.order.pop_front()
                && inner.done.get(&id).is_some_and(|done| done.at == at)
            {
                inner.done.remove(&id);
            }
        }
    }
}

/// Waits until the slot holds a reply; `None` when the slot was dropped (shutting down).
pub(crate) async fn wait(receiver: &mut watch::Receiver<Option<Arc<OutboundMessage>>>) -> Option<Arc<OutboundMessage>> {
    match receiver.wait_for(Option::is_some).await {
        Ok(reply) => reply.clone(),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{InboundMessage, OutboundKind, Sender};

    fn reply_to(id: &str) -> OutboundMessage {
        let mut msg = InboundMessage::user("api", "c", Sender::default(), "hi");
        msg.id = id.to_owned();
        OutboundMessage::answering(&msg, format!("{id}:reply"), OutboundKind::Reply, "answer".into())
    }

    fn replies(ttl_secs: u64, max_entries: usize) -> Replies {
        Replies::new(ReplayCache { ttl: Duration::from_secs(ttl_secs), max_entries })
    }

    #[tokio::test]
    async fn every_waiter_of_one_message_gets_its_reply() {
        let replies = replies(60, 10);
        let Claim::First(mut first) = replies.claim("m", Some([1; 32])) else { panic!("not first") };
        replies.accepted("m");
        let Claim::Joined { receiver: mut second, accepted: true } = replies.claim("m", Some([1; 32])) else {
            panic!("not joined as accepted")
        };
        assert!(replies.resolve(reply_to("m"), true).is_none(), "the waiters got it");
        assert_eq!(wait(&mut first).await.unwrap().content, "answer");
        assert_eq!(wait(&mut second).await.unwrap().content, "answer");
        assert!(matches!(replies.claim("m", Some([1; 32])), Claim::Replied(_)));
        assert!(matches!(replies.claim("m", Some([2; 32])), Claim::Conflict));
    }

    #[tokio::test(start_paused = true)]
    async fn cached_replies_expire_and_are_bounded() {
        let replies = replies(60, 2);
        for id in ["a", "b", "c"] {
            assert!(replies.resolve(reply_to(id), true).is_some(), "nobody waited");
        }
        assert!(matches!(replies.claim("a", None), Claim::First(_)), "the oldest entry outlived the bound");
        assert!(matches!(replies.claim("c", None), Claim::Replied(_)));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(matches!(replies.claim("c", None), Claim::First(_)), "an entry outlived its time");
    }

    #[tokio::test]
    async fn a_released_id_is_forgotten() {
        let replies = replies(60, 10);
        let Claim::First(receiver) = replies.claim("m", Some([1; 32])) else { panic!("not first") };
        replies.release("m", receiver);
        assert!(matches!(replies.claim("m", Some([2; 32])), Claim::First(_)));
    }
}
