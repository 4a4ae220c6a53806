//! The sending half of a chat channel, started and stopped the same way by every adapter:
//! replies from the channel's outbound queue and live feedback from its run events, on two
//! tasks sharing one record of the runs in progress.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{DeliveryPolicy, LiveRuns, Platform, run_live, run_outbound};
use crate::bus::{Bus, BusError, Deliveries, Events};

/// A channel's running delivery.
pub struct Sending {
    tasks: [JoinHandle<()>; 2],
    /// Cancelled by [`Sending::stop_after`], once receiving ended and (in one process) the
    /// worker drained, so turns that finished meanwhile are still delivered.
    stop: CancellationToken,
}

impl Sending {
    /// Subscribes to the deliverable replies and the run events of `P::CHANNEL` on `bus` and
    /// delivers them through `platform`.
    pub async fn start<P: Platform>(
        bus: &Arc<dyn Bus>,
        platform: Arc<P>,
        live: LiveRuns<P>,
        policy: DeliveryPolicy,
    ) -> Result<Sending, BusError> {
        let replies =
            crate::bus::screen::deliverable_outbound(Arc::clone(bus), P::CHANNEL, super::queues::MAX_HELD).await?;
        let events = bus.events(P::CHANNEL, None).await?;
        Ok(Self::spawn(platform, live, replies, events, policy, CancellationToken::new()))
    }

    /// The same over subscriptions already made, until `stop` is cancelled.
    pub fn spawn<P: Platform>(
        platform: Arc<P>,
        live: LiveRuns<P>,
        replies: Deliveries,
        events: Events,
        policy: DeliveryPolicy,
        stop: CancellationToken,
    ) -> Sending {
        let live = Arc::new(live);
        let outbound = run_outbound(Arc::clone(&platform), replies, Arc::clone(&live), policy, stop.clone());
        let feedback = run_live(platform, events, live, stop.clone());
        Sending { tasks: [tokio::spawn(outbound), tokio::spawn(feedback)], stop }
    }

    /// Waits for `receiving` (the adapter's inbound task, which ends once its shutdown token
    /// is cancelled), then stops sending and waits for that too. `channel` names the adapter
    /// in the log.
    pub async fn stop_after(self, receiving: JoinHandle<()>, channel: &str) {
        if let Err(err) = receiving.await {
            tracing::error!(%err, channel, "the channel's receiving task ended abnormally");
        }
        self.stop.cancel();
        for task in self.tasks {
            if let Err(err) = task.await {
                tracing::error!(%err, channel, "a sending task of the channel ended abnormally");
            }
        }
    }
}

/// A key for part `part` of the message known as `key` (an outbound or inbound message id)
/// that a platform deduplicates sends by (Discord's nonce, Matrix's transaction id): the same
/// for every attempt and redelivery, so the message is posted once. 16 hex digits of a 64-bit
/// FNV-1a hash, stable across builds and restarts (unlike std's hasher).
pub fn idempotency_key(key: &str, part: usize) -> String {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = key.bytes().chain([0xff]).chain((part as u64).to_le_bytes());
    let hash = bytes.fold(FNV_OFFSET, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME));
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::idempotency_key;

    #[test]
    fn idempotency_keys_are_short_stable_and_differ_per_message_and_part() {
        let first = idempotency_key("run-1:reply", 0);
        assert_eq!(first.len(), 16);
        assert_eq!(first, idempotency_key("run-1:reply", 0));
        // Fixed by the algorithm, not by the build: a restarted daemon makes the same key.
        assert_eq!(idempotency_key("", 0), "2032dd643620252e");
        let others =
            [idempotency_key("run-1:reply", 1), idempotency_key("run-2:reply", 0), idempotency_key("run-1:repl", 0)];
        assert!(others.iter().all(|other| *other != first), "{first} {others:?}");
    }
}
