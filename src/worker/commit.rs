//! Committing a run: its outcome stored, its reply published and marked sent, and what makes
//! a message go back to the bus instead of being acked.

use switchboard_channels::bus::{Bus, BusExt};
use switchboard_channels::contract::{InboundMessage, OutboundMessage};

use crate::store::{BusWrites, RunOutcome, Store};

/// Why a message goes back to the bus instead of being acked.
pub(super) enum Giveback {
    Stopping,
    Transient(String),
    /// It can never be finished (its reply is one the bus refuses): dead-letter it.
    Permanent(String),
}

pub(super) fn transient(err: impl std::fmt::Display) -> Giveback {
    Giveback::Transient(err.to_string())
}

/// Stores the outcome and publishes the reply. When the bus's journal is the store's database
/// (the embedded shape), that is one transaction, which also deletes the answered message's
/// journal row: returns true, and the delivery is settled without another write.
pub(super) async fn finish(
    bus: &dyn Bus,
    store: &dyn Store,
    msg: &InboundMessage,
    run_id: &str,
    outcome: &RunOutcome,
    answered_row: Option<i64>,
) -> Result<bool, Giveback> {
    let record = match outcome.reply.as_ref().map(|reply| bus.outbound_record(reply)) {
        Some(Some(Ok(record))) => Some(record),
        // No reply: only the message's row goes with the outcome.
        None if answered_row.is_some() => None,
        // Another bus, or a reply the bus refuses (stored, then the message is dead-lettered).
        _ => return finish_apart(bus, store, msg, run_id, outcome).await.map(|()| false),
    };
    let writes = BusWrites { reply: record.as_ref(), answered_row };
    let row = store.finish_run_journaled(run_id, outcome, &writes).await.map_err(transient)?;
    crate::scheduler::hooks::record_finish(store, msg, outcome).await;
    if let (Some(record), Some(row)) = (record, row)
        && let Err(err) = bus.queue_journaled(record, row).await
    {
        // It is in the journal: the next start delivers it.
        tracing::warn!(%err, "cannot queue the reply now");
    }
    Ok(answered_row.is_some())
}

/// Stores the outcome, then publishes the reply and marks it sent: three transactions.
async fn finish_apart(
    bus: &dyn Bus,
    store: &dyn Store,
    msg: &InboundMessage,
    run_id: &str,
    outcome: &RunOutcome,
) -> Result<(), Giveback> {
    store.finish_run(run_id, outcome).await.map_err(transient)?;
    crate::scheduler::hooks::record_finish(store, msg, outcome).await;
    if let Some(reply) = &outcome.reply {
        deliver(bus, store, run_id, reply).await?;
    }
    Ok(())
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
