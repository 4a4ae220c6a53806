//! What an adapter delivered, kept beyond its own memory: in the shared store on the
//! distributed shape, so that a reply redelivered after the adapter restarted (or after the
//! bus lost its ack) is neither sent twice nor cut short, and replies too old to be worth
//! sending are dropped with a log line.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use thiserror::Error;

use crate::contract::OutboundMessage;

/// How much of an outbound message went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The first `n` steps (parts, files); the rest is still to send.
    Steps(usize),
    /// All of it, or it was given up for good.
    All,
}

#[derive(Debug, Error)]
#[error("the delivery record: {0}")]
pub struct RecordError(pub String);

/// Where an adapter records its deliveries (the store's `deliveries` table).
#[async_trait]
pub trait DeliveryRecord: Send + Sync {
    /// What was recorded for outbound message `id` of `channel`; `None` when nothing.
    async fn sent(&self, channel: &str, id: &str) -> Result<Option<Sent>, RecordError>;

    /// Records how much of `id` went out (replacing what was recorded).
    async fn record_sent(&self, channel: &str, id: &str, sent: Sent) -> Result<(), RecordError>;
}

/// How an adapter treats deliveries beyond sending them.
#[derive(Clone, Default)]
pub struct DeliveryPolicy {
    /// A reply created longer ago than this is dropped with a log line instead of sent (zero:
    /// no limit): after a long outage, answers an hour late only confuse the chat.
    pub max_age: Duration,
    /// Where deliveries are recorded so they outlive the process; `None`: in memory only.
    pub record: Option<Arc<dyn DeliveryRecord>>,
    /// Record only how far a message sent in several steps (its text, then its files) got,
    /// and read the record only when the bus offers a message again. Enough for the embedded
    /// shape, whose journal forgets a message once it was acked: a restart in the middle of
    /// such a message then neither repeats its first steps nor skips the rest, and a message
    /// sent in one step costs nothing.
    pub partial_only: bool,
}

impl std::fmt::Debug for DeliveryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryPolicy")
            .field("max_age", &self.max_age)
            .field("record", &self.record.is_some())
            .field("partial_only", &self.partial_only)
            .finish()
    }
}

impl DeliveryPolicy {
    /// How late `msg` is, when that is beyond [`DeliveryPolicy::max_age`].
    pub fn too_late(&self, msg: &OutboundMessage) -> Option<Duration> {
        let age = (Utc::now() - msg.created_at).to_std().ok()?;
        (!self.max_age.is_zero() && age > self.max_age).then_some(age)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_replies_beyond_the_age_are_late() {
        let policy = DeliveryPolicy { max_age: Duration::from_secs(3600), ..DeliveryPolicy::default() };
        let mut msg = OutboundMessage { created_at: Utc::now() - chrono::Duration::minutes(59), ..Default::default() };
        assert_eq!(policy.too_late(&msg), None);
        msg.created_at = Utc::now() - chrono::Duration::minutes(61);
        assert!(policy.too_late(&msg).is_some_and(|age| age > Duration::from_secs(3600)));
        assert_eq!(DeliveryPolicy::default().too_late(&msg), None, "zero is no limit");
        msg.created_at = Utc::now() + chrono::Duration::minutes(5);
        assert_eq!(policy.too_late(&msg), None, "a clock ahead of ours is not late");
    }
}
