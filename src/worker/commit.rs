//! Committing a run: its outcome stored, its reply published and marked sent, and what makes
//! a message go back to the bus instead of being acked. One port, [`CommitPort`], with two
//! ways of doing it; the assembly picks the one the bus in use allows.

use std::sync::Arc;

use async_trait::async_trait;
use switchboard_channels::bus::{Bus, BusExt, StoreJournal};
use switchboard_channels::contract::{InboundMessage, OutboundMessage};

use crate::store::{BusWrites, RunOutcome, Store};

/// Why a message goes back to the bus instead of being acked.
pub(crate) enum Giveback {
    Stopping,
    Transient(String),
    /// It can never be finished (its reply is one the bus refuses): dead-letter it.
    Permanent(String),
}

pub(super) fn transient(err: impl std::fmt::Display) -> Giveback {
    Giveback::Transient(err.to_string())
}

/// How the worker commits a finished run: the outcome stored (and a cron job's run recorded),
/// the reply published. Once it returns, the message is acked.
#[async_trait]
pub(crate) trait CommitPort: Send + Sync {
    /// Commits `outcome` of `msg`'s run. `position`: the message's delivery's position in its
    /// stream, when the bus numbers them.
    async fn finish(
        &self,
        msg: &InboundMessage,
        run_id: &str,
        outcome: &RunOutcome,
        position: Option<u64>,
    ) -> Result<(), Giveback>;
}

/// Stores the outcome, then publishes the reply and marks it sent: three transactions, on any
/// bus (NATS: the store and the bus are two systems).
pub(crate) struct StoreThenPublish {
    bus: Arc<dyn Bus>,
    store: Arc<dyn Store>,
}

impl StoreThenPublish {
    pub(crate) fn new(bus: Arc<dyn Bus>, store: Arc<dyn Store>) -> Self {
        Self { bus, store }
    }
}

#[async_trait]
impl CommitPort for StoreThenPublish {
    async fn finish(
        &self,
        msg: &InboundMessage,
        run_id: &str,
        outcome: &RunOutcome,
        _: Option<u64>,
    ) -> Result<(), Giveback> {
        let store = self.store.as_ref();
        store.finish_run(run_id, outcome).await.map_err(transient)?;
        crate::scheduler::hooks::record_finish(store, msg, outcome).await;
        if let Some(reply) = &outcome.reply {
            deliver(self.bus.as_ref(), store, run_id, reply).await?;
        }
        Ok(())
    }
}

/// The embedded shape, whose bus journals in the store: the outcome, the reply's journal row
/// and the removal of the answered message's row are one transaction, and the delivery's ack
/// writes nothing more.
pub(crate) struct JournalInStore {
    journal: Arc<dyn StoreJournal>,
    /// For a reply the bus refuses: stored, then published apart (and dead-lettered).
    apart: StoreThenPublish,
}

impl JournalInStore {
    pub(crate) fn new(journal: Arc<dyn StoreJournal>, bus: Arc<dyn Bus>, store: Arc<dyn Store>) -> Self {
        Self { journal, apart: StoreThenPublish::new(bus, store) }
    }
}

#[async_trait]
impl CommitPort for JournalInStore {
    async fn finish(
        &self,
        msg: &InboundMessage,
        run_id: &str,
        outcome: &RunOutcome,
        position: Option<u64>,
    ) -> Result<(), Giveback> {
        let record = match outcome.reply.as_ref().map(|reply| self.journal.outbound_record(reply)) {
            Some(Ok(record)) => Some(record),
            None => None,
            Some(Err(_)) => return self.apart.finish(msg, run_id, outcome, position).await,
        };
        let answered_row = position.and_then(|row| i64::try_from(row).ok());
        let writes = BusWrites { reply: record.as_ref(), answered_row };
        let store = self.apart.store.as_ref();
        let reply_row = store.finish_run_journaled(run_id, outcome, &writes).await.map_err(transient)?;
        crate::scheduler::hooks::record_finish(store, msg, outcome).await;
        let reply = record.zip(reply_row);
        if let Err(err) = self.journal.committed(position, reply).await {
            // It is in the journal: the next start delivers it.
            tracing::warn!(%err, "cannot queue the reply now");
        }
        Ok(())
    }
}

/// A message whose run finished before: its stored reply is delivered if it never went out,
/// or sent again when a client asks for it again.
pub(super) async fn answered_before(
    bus: &dyn Bus,
    store: &dyn Store,
    msg: &InboundMessage,
    run_id: &str,
    reply: Option<OutboundMessage>,
    delivered: bool,
) -> Result<(), Giveback> {
    match (reply, delivered) {
        (Some(reply), false) => deliver(bus, store, run_id, &reply).await,
        (Some(reply), true) if msg.wants_reply_again() => resend(bus, msg, &reply).await,
        _ => Ok(()),
    }
}

/// Sends a stored reply again under a new id, so the bus's dedupe of the first one (within
/// its window) does not swallow it. The run is not touched.
async fn resend(bus: &dyn Bus, msg: &InboundMessage, reply: &OutboundMessage) -> Result<(), Giveback> {
    let mut again = reply.clone();
    again.id = format!("{}:again:{}", reply.id, uuid::Uuid::now_v7());
    // The retry may have come through another instance of the channel than the first try.
    again.channel = msg.reply_channel();
    bus.publish_outbound(&again).await.map_err(transient)
}

async fn deliver(bus: &dyn Bus, store: &dyn Store, run_id: &str, reply: &OutboundMessage) -> Result<(), Giveback> {
    bus.publish_outbound(reply).await.map_err(|err| {
        if err.is_permanent() {
            Giveback::Permanent(format!("its reply cannot be published: {err}"))
        } else {
            transient(err)
        }
    })?;
    store.mark_reply_delivered(run_id).await.map_err(transient)
}

#[cfg(test)]
mod tests;
