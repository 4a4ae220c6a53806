//! The pairing check of a chat platform's inbound side: a direct message from someone not
//! allowed yet is answered with a pairing code (or silence) until the owner approves them.

use std::sync::Arc;
use std::time::Duration;

use crate::pairing::{PairingAnswer, PairingDesk, PairingStore};

/// One channel's pairing: its store (if any), its desk and its limits.
pub struct PairingCheck {
    channel: &'static str,
    store: Option<Arc<dyn PairingStore>>,
    desk: PairingDesk,
    ttl: Duration,
    max_pending: usize,
}

impl PairingCheck {
    pub fn new(channel: &'static str, store: Option<Arc<dyn PairingStore>>, ttl: Duration, max_pending: usize) -> Self {
        Self { channel, store, desk: PairingDesk::default(), ttl, max_pending }
    }

    /// What to do with a direct message from `sender_id` who is not otherwise allowed. Without
    /// a store nobody can be approved: the message is ignored, with a log line.
    pub async fn check(&self, sender_id: &str, sender_name: &str) -> PairingAnswer {
        let Some(store) = &self.store else {
            tracing::warn!(sender = sender_id, "direct message from an unknown user and no pairing store; ignored");
            return PairingAnswer::Silent;
        };
        self.desk.answer(store.as_ref(), self.channel, sender_id, sender_name, self.ttl, self.max_pending).await
    }
}
