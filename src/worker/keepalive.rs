//! Holding a delivery while it waits and runs: a task owns the acknowledgement handle, tells
//! the bus "still working" at an interval (so JetStream does not give the message to another
//! worker during a long run), and acks or naks when told to.

use std::time::Duration;

use switchboard_channels::bus::{Acker, DeliveryInfo};
use tokio::sync::oneshot;

/// How a held delivery ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    Ack,
    Nak(Option<Duration>),
}

/// The worker's side of a held delivery. Dropping it without settling lets the bus redeliver.
pub struct Held {
    /// The acker itself, when the bus needs no progress: settled here, without a task.
    acker: Option<Box<dyn Acker>>,
    settle: Option<oneshot::Sender<Settle>>,
    done: Option<oneshot::Receiver<()>>,
    /// Marks the message's stream position as held by this worker until it is settled.
    position: Option<super::order::SeqGuard>,
    /// The subject the message came from, for a dead letter.
    subject: String,
    /// The message's position in its stream, when the bus numbers them.
    stream_seq: Option<u64>,
}

impl Held {
    /// Starts holding `acker` of the message `info` describes, sending progress every `interval`.
    pub fn start(acker: Box<dyn Acker>, info: &DeliveryInfo, interval: Duration) -> Self {
        let (subject, stream_seq) = (info.subject.clone(), info.stream_seq);
        let held = Self { acker: None, settle: None, done: None, position: None, subject, stream_seq };
        if !acker.needs_progress() {
            return Self { acker: Some(acker), ..held };
        }
        let (settle_tx, settle_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        tokio::spawn(hold(acker, interval, settle_rx, done_tx));
        Self { settle: Some(settle_tx), done: Some(done_rx), ..held }
    }

    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The message's position in its stream, when the bus numbers them.
    pub fn stream_seq(&self) -> Option<u64> {
        self.stream_seq
    }

    /// Keeps `position` until the delivery is settled (or dropped).
    pub(super) fn keep_position(&mut self, position: super::order::SeqGuard) {
        self.position = Some(position);
    }

    /// Acks or naks and waits until the bus has been told.
    pub async fn settle(mut self, how: Settle) {
        // A nak gives the message back to the bus: released first, so that a later message of
        // the chat does not take it for held here while it waits there. An ack keeps it until
        // the bus confirmed: until then the message is still stored, and a later message of
        // the chat arriving meanwhile (the chat saw the reply already) must not be handed
        // back to wait for it.
        if matches!(how, Settle::Nak(_)) {
            self.position = None;
        }
        if let Some(acker) = self.acker.take() {
            settle_now(acker, Some(how)).await;
        }
        if let Some(tx) = self.settle.take() {
            let _ = tx.send(how);
        }
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
        self.position = None;
    }
}

async fn hold(
    acker: Box<dyn Acker>,
    interval: Duration,
    mut settle: oneshot::Receiver<Settle>,
    done: oneshot::Sender<()>,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let outcome = loop {
        tokio::select! {
            how = &mut settle => break how.ok(),
            _ = ticker.tick() => {
                if let Err(err) = acker.progress().await {
                    tracing::warn!(%err, "cannot tell the bus a run is still in progress");
                }
            }
        }
    };
    settle_now(acker, outcome).await;
    let _ = done.send(());
}

/// Acks or naks; `None` (the worker dropped the delivery without a verdict) lets the bus
/// redeliver it.
async fn settle_now(mut acker: Box<dyn Acker>, outcome: Option<Settle>) {
    let result = match outcome {
        Some(Settle::Ack) => acker.ack().await,
        Some(Settle::Nak(delay)) => acker.nak(delay).await,
        None => Ok(()),
    };
    if let Err(err) = result {
        tracing::warn!(%err, ?outcome, "cannot settle a delivery; the bus will redeliver it");
    }
}
