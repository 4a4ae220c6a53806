//! The worker's side of cron jobs: reminders answered without the model, and each cron run's
//! outcome written back to the job and its history.

use switchboard_channels::contract::{InboundKind, InboundMessage, OutboundKind};

use crate::provider::ChatMessage;
use crate::scheduler::job::{META_NAME, ORIGIN_KIND};
use crate::store::{RunOutcome, RunStatus, Store};

/// The job id of a message a cron job published; `None` for any other message.
fn cron_job(msg: &InboundMessage) -> Option<&str> {
    let origin = msg.origin.as_ref().filter(|_| msg.kind == InboundKind::System)?;
    (origin.kind == ORIGIN_KIND).then_some(origin.id.as_str())
}

/// A reminder's run: its text is the reply, stored and delivered like any run's (so at most
/// once), and the transcript notes that it went out, so later turns know. `None` for any
/// message that is not a reminder.
pub(super) fn reminder(msg: &InboundMessage, run_id: &str, session_key: &str) -> Option<RunOutcome> {
    let job = cron_job(msg)?;
    if !msg.delivers_verbatim() {
        return None;
    }
    let name = msg.metadata.get(META_NAME).and_then(serde_json::Value::as_str).unwrap_or("");
    let note = format!("[switchboard: reminder \"{name}\" (cron job {job}) was delivered to the chat]");
    let reply = super::settle::reply_to(msg, run_id, session_key, OutboundKind::Reply, msg.content.clone());
    let transcript = vec![ChatMessage::user(note), ChatMessage::assistant(msg.content.clone(), Vec::new())];
    Some(RunOutcome { transcript, ..RunOutcome::answered(reply) })
}

/// Records a finished cron run's status and error on its history row and its job. Never
/// fails the run: a store error is logged.
pub(super) async fn record_finish(store: &dyn Store, msg: &InboundMessage, outcome: &RunOutcome) {
    let Some(job) = cron_job(msg) else { return };
    let failed = outcome.status == RunStatus::Failed;
    let result = store.finish_cron_run(job, &msg.id, failed, outcome.error.as_deref()).await;
    if let Err(err) = result {
        tracing::warn!(%job, inbound = %msg.id, %err, "cannot record the cron run's outcome");
    }
}
