//! Delivering outbound messages: each delivery planned into steps by the platform, sent in
//! order, and acked once it is in the chat; a streamed draft becomes the reply's first part.
//!
//! [`run_outbound`] takes deliveries off the bus and hands them to per-chat sequences (see
//! [`ChatQueues`](super::queues::ChatQueues)): messages for one chat are sent one after the
//! other in arrival order, different chats concurrently.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Ledger;
use super::live::{DraftState, LiveRuns};
use super::platform::{Platform, Unreachable};
use super::record::{DeliveryPolicy, RecordError, Sent};
use crate::bus::Acker;
use crate::contract::{OutboundKind, OutboundMessage, reply};

/// Outbound ids remembered as delivered, so a redelivery is not sent twice.
const DELIVERED_KEPT: usize = 1024;
/// Partly sent messages whose progress is remembered for their redelivery.
const PROGRESS_KEPT: usize = 256;
/// When the platform cannot be reached, the bus offers the message again after this long.
const REDELIVER_AFTER: Duration = Duration::from_secs(30);
/// When the delivery record cannot be read, the bus offers the message again after this long.
const RECORD_RETRY: Duration = Duration::from_secs(5);

/// What became of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// In the chat, or nothing to send: ack.
    Delivered,
    /// Can never be delivered (bad address, bot blocked, chat gone): ack after the log line.
    GivenUp,
    /// Delivered before, or dropped as too late: ack, nothing to record.
    Settled,
    /// The platform could not be reached: let the bus offer it again later.
    Later,
    /// Whether it went out before is unknown (the record cannot be read): offer it again soon.
    Unknown,
}

/// The courier of one platform: delivers an outbound message step by step and acks or naks
/// it, remembering what went out (its state is shared by the delivery tasks of all chats).
pub struct Courier<P: Platform> {
    platform: Arc<P>,
    live: Arc<LiveRuns<P>>,
    shutdown: CancellationToken,
    ledger: Mutex<Ledger>,
    policy: DeliveryPolicy,
}

impl<P: Platform> Courier<P> {
    pub fn new(platform: Arc<P>, live: Arc<LiveRuns<P>>, shutdown: CancellationToken, policy: DeliveryPolicy) -> Self {
        let ledger = Ledger::new(DELIVERED_KEPT, PROGRESS_KEPT);
        Self { platform, live, shutdown, ledger: Mutex::new(ledger), policy }
    }

    pub fn with_ledger(platform: Arc<P>, live: Arc<LiveRuns<P>>, shutdown: CancellationToken, ledger: Ledger) -> Self {
        Self { platform, live, shutdown, ledger: Mutex::new(ledger), policy: DeliveryPolicy::default() }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Delivers one message (offered for the first time) and acks or naks it.
    pub async fn handle(&self, msg: OutboundMessage, acker: Box<dyn Acker>) {
        self.handle_attempt(msg, acker, 1).await;
    }

    /// Delivers one message the bus offers for the `attempt`-th time and acks or naks it.
    pub async fn handle_attempt(&self, msg: OutboundMessage, mut acker: Box<dyn Acker>, attempt: u64) {
        let result = match self.deliver(&msg, attempt).await {
            Outcome::Delivered | Outcome::GivenUp => {
                self.ledger().record_delivered(&msg.id);
                if !self.policy.partial_only {
                    self.record(&msg.id, Sent::All).await;
                }
                acker.ack().await
            }
            Outcome::Settled => {
                self.ledger().record_delivered(&msg.id);
                acker.ack().await
            }
            Outcome::Later => acker.nak(Some(REDELIVER_AFTER)).await,
            Outcome::Unknown => acker.nak(Some(RECORD_RETRY)).await,
        };
        if let Err(err) = result {
            tracing::warn!(%err, id = %msg.id, "cannot acknowledge an outbound delivery");
        }
    }

    /// Records progress in the delivery record, if there is one. A failure only costs a
    /// repeat should the message come again, so it is logged, not fatal.
    async fn record(&self, id: &str, sent: Sent) {
        let Some(record) = &self.policy.record else { return };
        if let Err(err) = record.record_sent(P::CHANNEL, id, sent).await {
            tracing::warn!(%err, id, "cannot record a delivery; a redelivery of it would be sent again");
        }
    }

    /// Whether `msg` was delivered before, by this process (its memory) or an earlier one (the
    /// record); sets the memory's progress from the record.
    async fn settled_before(&self, msg: &OutboundMessage, attempt: u64) -> Result<bool, RecordError> {
        if self.ledger().is_delivered(&msg.id) {
            return Ok(true);
        }
        if self.policy.partial_only && attempt <= 1 {
            return Ok(false);
        }
        let (Some(record), 0) = (&self.policy.record, self.ledger().progress_of(&msg.id)) else { return Ok(false) };
        match record.sent(P::CHANNEL, &msg.id).await? {
            Some(Sent::All) => Ok(true),
            Some(Sent::Steps(done)) => {
                self.ledger().record_progress(&msg.id, done);
                Ok(false)
            }
            None => Ok(false),
        }
    }

    async fn deliver(&self, msg: &OutboundMessage, attempt: u64) -> Outcome {
        match self.settled_before(msg, attempt).await {
            Ok(true) => {
                tracing::info!(id = %msg.id, "outbound message already delivered; not sent again");
                return Outcome::Settled;
            }
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(%err, id = %msg.id, "cannot tell whether the message went out before; trying again soon");
                return Outcome::Unknown;
            }
        }
        if let Some(age) = self.policy.too_late(msg) {
            tracing::warn!(id = %msg.id, chat = %msg.chat_id, age_secs = age.as_secs(),
                max_age_secs = self.policy.max_age.as_secs(),
                "reply older than bus_options.outbound_max_age_secs; dropped, not sent");
            return Outcome::Settled;
        }
        let addressed = if msg.to_user() {
            self.platform.person_target(msg, &self.shutdown).await
        } else {
            self.platform.target_of(msg).map_err(Unreachable::Address)
        };
        let mut target = match addressed {
            Ok(target) => target,
            Err(Unreachable::Address(err)) => {
                tracing::warn!(%err, id = %msg.id, "outbound message cannot be addressed; dropped");
                return Outcome::GivenUp;
            }
            Err(Unreachable::Failed(err)) => return self.failed(msg, &err),
        };
        let draft = self.take_draft(msg).await;
        if reply::says_nothing(msg) {
            if let DraftState::Shown(message) | DraftState::Broken(Some(message)) = draft {
                self.delete_quietly(&target, &message).await;
            }
            return Outcome::Delivered;
        }
        let steps = self.platform.plan(msg).await;
        let mut done = self.ledger().progress_of(&msg.id);
        if done == 0 && self.finish_draft(draft, &target, steps.first()).await {
            done = 1;
            self.progressed(&msg.id, done, steps.len()).await;
        }
        self.send_steps(msg, &mut target, &steps, done).await
    }

    /// Sends the steps from `done` on, recording progress.
    async fn send_steps(
        &self,
        msg: &OutboundMessage,
        target: &mut P::Target,
        steps: &[P::Step],
        mut done: usize,
    ) -> Outcome {
        let mut redirected = false;
        while let Some(step) = steps.get(done) {
            match self.platform.send_step(target, &msg.id, done, step, &self.shutdown).await {
                Ok(()) => {}
                // The chat moved: the same step goes to its new place (once; two moves is odd).
                Err(err) if !redirected && self.platform.redirect(target, &err) => {
                    redirected = true;
                    continue;
                }
                Err(err) => return self.failed(msg, &err),
            }
            done += 1;
            self.progressed(&msg.id, done, steps.len()).await;
        }
        Outcome::Delivered
    }

    /// `done` of `total` steps of `id` went out. Recorded beyond memory only before the last
    /// step: the last one is recorded as [`Sent::All`] with the ack, so a one-part reply
    /// costs one write.
    async fn progressed(&self, id: &str, done: usize, total: usize) {
        self.ledger().record_progress(id, done);
        if done < total {
            self.record(id, Sent::Steps(done)).await;
        }
    }

    /// Finishes the run this message answers (a reply or notice, not a progress update): stops
    /// its typing and takes over its streamed draft, if any.
    async fn take_draft(&self, msg: &OutboundMessage) -> DraftState<P::MessageId> {
        if msg.kind == OutboundKind::Progress {
            return DraftState::Nothing;
        }
        let mut state = DraftState::Nothing;
        for key in msg.in_reply_to.as_deref().into_iter().chain(reply::run_id(msg)) {
            if let Some(draft) = self.live.finish(key) {
                state = draft.settle().await;
            }
        }
        state
    }

    /// Turns a streamed draft into the first step of the reply. False when there was no draft
    /// to finish or the edit failed; then the draft is deleted (if possible) and the whole
    /// reply is sent as usual, so the chat shows it exactly once either way. A first step the
    /// platform cannot edit a message into (files) is sent anew too.
    async fn finish_draft(&self, draft: DraftState<P::MessageId>, target: &P::Target, first: Option<&P::Step>) -> bool {
        let message = match draft {
            DraftState::Nothing | DraftState::Broken(None) => return false,
            DraftState::Broken(Some(message)) => {
                self.delete_quietly(target, &message).await;
                return false;
            }
            DraftState::Shown(message) => message,
        };
        let Some(step) = first.filter(|step| self.platform.can_edit_into(step)) else {
            self.delete_quietly(target, &message).await;
            return false;
        };
        match self.platform.edit_into(target, &message, step, &self.shutdown).await {
            Ok(()) => true,
            Err(err) => {
                let error = self.platform.describe(&err);
                tracing::info!(?target, %error, "cannot finish a streamed draft; sending the reply");
                self.delete_quietly(target, &message).await;
                false
            }
        }
    }

    /// Deletes a message, logging instead of failing: used to remove streamed drafts.
    async fn delete_quietly(&self, target: &P::Target, message: &P::MessageId) {
        if let Err(err) = self.platform.delete(target, message).await {
            let error = self.platform.describe(&err);
            tracing::info!(?target, ?message, %error, "cannot delete a streamed draft");
        }
    }

    /// Logs a failed send once and decides between giving up and trying later.
    fn failed(&self, msg: &OutboundMessage, err: &P::Error) -> Outcome {
        let (name, error) = (P::NAME, self.platform.describe(err));
        crate::meters::meters().send_failed(&msg.channel);
        if self.platform.is_final(err) {
            tracing::warn!(id = %msg.id, chat = %msg.chat_id, %error, "{name} refused an outbound message; given up");
            Outcome::GivenUp
        } else {
            tracing::warn!(id = %msg.id, chat = %msg.chat_id, %error, "{name} unreachable; the message will be retried");
            Outcome::Later
        }
    }

    pub(super) fn queue_key(&self, msg: &OutboundMessage) -> String {
        self.platform.queue_key(msg)
    }
}
