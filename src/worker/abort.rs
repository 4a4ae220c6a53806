//! Runs that end before their turn does: stopped by a command, over the time limit, or
//! panicked. Each is recorded as a failed run with nothing added to the transcript (the model's
//! partial work is not history anyone agreed to), live views are told it failed, and the chat
//! gets a short notice unless a command already answered.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use switchboard_channels::bus::{Bus, BusExt};
use switchboard_channels::contract::{InboundMessage, OutboundKind, OutboundMessage, RunEventBody, SessionKey};

use super::events::BusEvents;
use super::settle::reply_to;
use crate::agent::EventSink;
use crate::store::{RunClaim, RunOutcome, Store};

/// The error recorded for a run the time limit ended; `switchboard runs` shows it.
const TIMED_OUT: &str = "timed out";

/// A run cancelled by `/stop`, `/new` or `interrupt`: no reply (the command answers).
pub(super) fn stopped(bus: &Arc<dyn Bus>, msg: &InboundMessage, run_id: &str, session_key: &SessionKey) -> RunOutcome {
    // A chat saw the turn stop; a client waiting for this message's own answer sees nothing
    // else, so it is told instead of waiting for its reply timeout.
    let notice = msg.awaits_reply().then(|| STOPPED.to_owned());
    ended_early(bus, msg, run_id, session_key, "stopped".into(), notice)
}

/// A run taken up again after a restart while one of its calls waited for an approver: the
/// request is closed as expired and the person told to ask again, rather than the model asked
/// a second time behind the owner's back. `None` when the run waited for nobody.
pub(super) async fn approval_gone(
    bus: &Arc<dyn Bus>,
    store: &dyn Store,
    msg: &InboundMessage,
    run_id: &str,
    session_key: &SessionKey,
) -> Result<Option<RunOutcome>, crate::store::StoreError> {
    let reason = crate::store::approvals::RESTART_REASON;
    let closed = crate::store::approvals::ApprovalStore::close_run_approvals(store, run_id, reason).await?;
    let Some(approval) = closed else { return Ok(None) };
    tracing::info!(%run_id, code = %approval.code, "a run that waited for an approver ended with a restart");
    let notice = format!(
        "While this waited for the owner's approval ({}), switchboard restarted, so the request expired. \
         Please ask again.",
        approval.request.tool
    );
    let error = format!("approval {} expired: {reason}", approval.code);
    Ok(Some(ended_early(bus, msg, run_id, session_key, error, Some(notice))))
}

/// What a waiting client hears when its turn was stopped (`/stop`, or a newer message in
/// `interrupt` mode).
const STOPPED: &str = "Stopped before answering: /stop, or a newer message in this chat (interrupt mode).";

/// A run that passed `agent.run_timeout_secs`: the chat is told, and its next message is
/// served.
pub(super) fn timed_out(
    bus: &Arc<dyn Bus>,
    msg: &InboundMessage,
    run_id: &str,
    session_key: &SessionKey,
    limit: Duration,
) -> RunOutcome {
    tracing::warn!(limit_secs = limit.as_secs(), "the run passed its time limit; stopping it");
    let notice = format!(
        "This took too long, so I stopped after {}. Please ask again, perhaps in smaller steps.",
        spoken(limit)
    );
    let error = format!("{TIMED_OUT} after {} s (agent.run_timeout_secs)", limit.as_secs());
    ended_early(bus, msg, run_id, session_key, error, Some(notice))
}

/// Records a run whose task panicked as failed and tells the chat, so the chat is not left
/// waiting and its next message is served. Failures here are logged: the message is acked
/// either way, since running it again would most likely panic again.
pub(super) async fn recover_from_panic(
    bus: &Arc<dyn Bus>,
    store: &dyn Store,
    msg: &InboundMessage,
    session_key: &SessionKey,
    panic: &str,
) {
    tracing::error!(session = %session_key, inbound = %msg.id, %panic,
        "a run panicked; it is recorded as failed and the chat's next message will be served");
    let run_id = match store.claim_run(&msg.id, session_key).await {
        Ok(RunClaim::New { run_id } | RunClaim::Resumed { run_id, .. }) => run_id,
        // The panic came after the outcome was stored: only the delivery may be missing.
        Ok(RunClaim::Finished { run_id, reply: Some(reply), delivered: false }) => {
            return deliver(bus.as_ref(), store, &run_id, &reply).await;
        }
        Ok(RunClaim::Finished { .. }) => return,
        Err(err) => {
            tracing::error!(%err, "cannot record the run that panicked");
            return;
        }
    };
    let notice = "Something went wrong on my side while answering this, and it was logged. Please try again.";
    let error = format!("panicked: {panic}");
    let outcome = ended_early(bus, msg, &run_id, session_key, error, Some(notice.into()));
    if let Err(err) = store.finish_run(&run_id, &outcome).await {
        tracing::error!(%run_id, %err, "cannot record the run that panicked");
        return;
    }
    if let Some(reply) = &outcome.reply {
        deliver(bus.as_ref(), store, &run_id, reply).await;
    }
}

/// Publishes a panicked run's reply and marks it sent; failures are logged (see
/// [`recover_from_panic`]).
async fn deliver(bus: &dyn Bus, store: &dyn Store, run_id: &str, reply: &OutboundMessage) {
    if let Err(err) = bus.publish_outbound(reply).await {
        tracing::error!(%run_id, %err, "cannot tell the chat that its run panicked");
        return;
    }
    if let Err(err) = store.mark_reply_delivered(run_id).await {
        tracing::error!(%run_id, %err, "cannot mark the reply of a run that panicked as sent");
    }
}

/// The text a panic carried (`panic!` with a literal or a formatted message).
pub(super) fn panic_text(panic: &(dyn Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (None, Some(text)) => text.clone(),
        (None, None) => "(no message)".into(),
    }
}

/// A failed run with `error`, and `notice` (if any) as its reply.
fn ended_early(
    bus: &Arc<dyn Bus>,
    msg: &InboundMessage,
    run_id: &str,
    session_key: &SessionKey,
    error: String,
    notice: Option<String>,
) -> RunOutcome {
    let events = BusEvents::start(Arc::clone(bus), msg, run_id, session_key);
    events.emit(RunEventBody::Failed { error: error.clone() });
    let notice = notice.map(|text| reply_to(msg, run_id, session_key, OutboundKind::Notice, text));
    RunOutcome::failed(error, notice)
}

/// "5 minutes", "90 seconds": a limit as the chat reads it.
fn spoken(limit: Duration) -> String {
    match limit.as_secs() {
        1 => "1 second".into(),
        secs if secs % 60 == 0 && secs >= 60 => match secs / 60 {
            1 => "1 minute".into(),
            minutes => format!("{minutes} minutes"),
        },
        secs => format!("{secs} seconds"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_spoken_in_the_largest_whole_unit() {
        assert_eq!(spoken(Duration::from_secs(300)), "5 minutes");
        assert_eq!(spoken(Duration::from_secs(60)), "1 minute");
        assert_eq!(spoken(Duration::from_secs(90)), "90 seconds");
        assert_eq!(spoken(Duration::from_secs(1)), "1 second");
    }

    #[test]
    fn panic_messages_are_read_from_either_payload() {
        let literal = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_text(literal.as_ref()), "plain");
        let formatted = std::panic::catch_unwind(|| panic!("index {}", 7)).unwrap_err();
        assert_eq!(panic_text(formatted.as_ref()), "index 7");
    }
}
