//! Settling a message: the reply addressed to it, and the recorded outcome of a message
//! answered without a turn of the model. Commands use it, and so does every path that gives a
//! message no turn of its own (queue full, dropped by `/stop` or `interrupt`, merged into
//! another turn): the outcome is stored under the message's inbound id first, so a
//! redelivery is not run again and a stored answer that never went out is re-sent.

use std::sync::Arc;
use std::time::Duration;

use switchboard_channels::bus::{Bus, BusError, BusExt, DeliveryInfo};
use switchboard_channels::contract::{DeadLetter, InboundMessage, OutboundKind, OutboundMessage, SessionKey, reply};
use switchboard_channels::subject::Flow;
use thiserror::Error;

use super::TurnRunner;
use super::job::Job;
use super::keepalive::{Held, Settle};
use crate::store::{RunClaim, RunKind, RunOutcome, RunStatus, StoreError};

/// Why a command or notice could not be handled now (the message is given back to the bus).
#[derive(Debug, Error)]
pub(super) enum HandleError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// The run's answer to `msg`. Its id is derived from the run, so a redelivery publishes the
/// same message again and the bus's dedupe (or the adapter) drops the copy.
pub(super) fn reply_to(
    msg: &InboundMessage,
    run_id: &str,
    session_key: &SessionKey,
    kind: OutboundKind,
    text: String,
) -> OutboundMessage {
    let mut reply = OutboundMessage::answering(msg, format!("{run_id}:reply"), kind, text);
    reply::set_run(&mut reply, run_id, session_key);
    reply
}

/// Answers a message with `text` instead of running it (queue full), once per inbound id.
pub(super) async fn answer(turns: Arc<TurnRunner>, job: Job, text: String) {
    answer_marked(turns, job, text, |_| {}).await;
}

/// [`answer`], the notice marked as saying its message was not kept, for a client that tells
/// that apart from an answer (the API's 429).
pub(super) async fn answer_not_kept(turns: Arc<TurnRunner>, job: Job, text: String) {
    answer_marked(turns, job, text, reply::set_not_kept).await;
}

async fn answer_marked(turns: Arc<TurnRunner>, job: Job, text: String, mark: fn(&mut OutboundMessage)) {
    let record = NoTurn { kind: RunKind::NoTurn, status: RunStatus::Completed, error: None, note: Some((text, mark)) };
    record_and_ack(&turns, job, record).await;
}

/// Records that a message got no turn of its own (`why`), then acks it; its outcome is
/// stored first, so a redelivery does not run it.
pub(super) async fn settle_unanswered(turns: &TurnRunner, job: Job, why: &str) {
    tracing::info!(id = %job.msg.id, session = %turns.session_key(&job.msg), why, "settling a message without a turn");
    let error = Some(NO_TURN.to_owned());
    record_and_ack(turns, job, NoTurn { kind: RunKind::NoTurn, status: RunStatus::Failed, error, note: None }).await;
}

/// Records that a message waited too long for its turn (`why`, the run's error), answered
/// with `note` when there is one (its reply marked by the function beside it), then acks it.
pub(super) async fn settle_expired(turns: &TurnRunner, job: Job, note: Option<Note>, why: String) {
    let record = NoTurn { kind: RunKind::Expired, status: RunStatus::Failed, error: Some(why), note };
    record_and_ack(turns, job, record).await;
}

/// The stored error of a message settled without a turn, when nothing more is said.
const NO_TURN: &str = "no turn of its own";

/// A notice's text, and how it is marked (see [`reply`]).
pub(super) type Note = (String, fn(&mut OutboundMessage));

/// What is stored for a message given no turn of its own.
struct NoTurn {
    kind: RunKind,
    status: RunStatus,
    error: Option<String>,
    /// Its notice, and how the notice is marked.
    note: Option<Note>,
}

/// Stores `record` as the message's run (unless it was handled already) and delivers its
/// notice, then acks the message; on a store or bus failure it is given back.
async fn record_and_ack(turns: &TurnRunner, job: Job, record: NoTurn) {
    let result = async {
        if let Some(run_id) = claim(turns, &job.msg, record.kind).await? {
            let key = turns.session_key(&job.msg);
            let notice = record.note.map(|(text, mark)| {
                let mut notice = reply_to(&job.msg, &run_id, &key, OutboundKind::Notice, text);
                mark(&mut notice);
                notice
            });
            finish_with(turns, &run_id, record.status, notice, record.error).await?;
        }
        Ok::<_, HandleError>(())
    }
    .await;
    match result {
        Ok(()) => job.held.settle(Settle::Ack).await,
        Err(err) => give_back(job, err).await,
    }
}

/// Claims the message's run, recorded as `kind` (no model is called for it); `None` when it
/// was already handled (its stored answer, if never delivered, is delivered now).
pub(super) async fn claim(
    turns: &TurnRunner,
    msg: &InboundMessage,
    kind: RunKind,
) -> Result<Option<String>, HandleError> {
    match turns.store.claim_run_as(&msg.id, &turns.session_key(msg), kind).await? {
        RunClaim::New { run_id } | RunClaim::Resumed { run_id, .. } => Ok(Some(run_id)),
        RunClaim::Finished { run_id, reply, delivered } => {
            tracing::info!(%run_id, "command already handled; not running it again");
            if let (Some(reply), false) = (reply, delivered) {
                deliver(turns, &run_id, &reply).await?;
            }
            Ok(None)
        }
    }
}

/// Stores the outcome (no transcript: the model never saw the message), then publishes.
pub(super) async fn finish(
    turns: &TurnRunner,
    msg: &InboundMessage,
    run_id: &str,
    status: RunStatus,
    text: Option<String>,
) -> Result<(), HandleError> {
    let key = turns.session_key(msg);
    let reply = text.map(|text| reply_to(msg, run_id, &key, OutboundKind::Notice, text));
    let error = (status == RunStatus::Failed).then(|| NO_TURN.to_owned());
    finish_with(turns, run_id, status, reply, error).await
}

/// [`finish`] with the notice made already.
async fn finish_with(
    turns: &TurnRunner,
    run_id: &str,
    status: RunStatus,
    reply: Option<OutboundMessage>,
    error: Option<String>,
) -> Result<(), HandleError> {
    let outcome = RunOutcome::without_model(status, reply, error);
    turns.store.finish_run(run_id, &outcome).await?;
    if let Some(reply) = &outcome.reply {
        deliver(turns, run_id, reply).await?;
    }
    Ok(())
}

/// Publishes a stored answer (its id comes from the run, so a republish is deduplicated).
pub(super) async fn deliver(turns: &TurnRunner, run_id: &str, reply: &OutboundMessage) -> Result<(), HandleError> {
    turns.bus.publish_outbound(reply).await?;
    Ok(turns.store.mark_reply_delivered(run_id).await?)
}

/// A store or bus failure: the message comes back later and is tried again.
pub(super) async fn give_back(job: Job, err: impl Into<HandleError>) {
    let err = err.into();
    tracing::warn!(%err, id = %job.msg.id, "cannot handle a message now; giving it back to the bus");
    job.held.settle(Settle::Nak(Some(Duration::from_secs(5)))).await;
}

/// Sets a delivery that cannot be decoded or is invalid aside with `reason` (see
/// [`dead_letter_payload`]).
pub(super) async fn dead_letter(bus: &dyn Bus, info: &DeliveryInfo, reason: String, held: Held) {
    let payload = String::from_utf8_lossy(&info.payload).into_owned();
    dead_letter_payload(bus, &info.subject, payload, reason, held).await;
}

/// Sets a message aside with the reason and acks it. When the dead letter cannot be published
/// for a reason that would recur, the message is acked all the same (and the log says it was
/// dropped): going round forever would be worse.
pub(super) async fn dead_letter_payload(bus: &dyn Bus, subject: &str, payload: String, reason: String, held: Held) {
    let letter = DeadLetter { subject: subject.to_owned(), reason, payload, ..DeadLetter::default() };
    match bus.dead_letter(Flow::In, &letter).await {
        Ok(()) => held.settle(Settle::Ack).await,
        Err(err) if err.is_permanent() => {
            tracing::error!(%err, %subject, reason = %letter.reason,
                "cannot dead-letter an inbound message; dropping it");
            held.settle(Settle::Ack).await;
        }
        // Keep the message rather than lose it; it comes back and is tried again.
        Err(err) => {
            tracing::error!(%err, %subject, "cannot publish a dead letter now; the message will come back");
            held.settle(Settle::Nak(Some(Duration::from_secs(5)))).await;
        }
    }
}
