//! What the worker asks of cron while it runs a turn: a reminder is answered without the
//! model, and each cron run's outcome is written back to its job and history. Here, beside
//! the scheduler that publishes the jobs' messages, so cron's runtime reads in one module.

use switchboard_channels::contract::{InboundKind, InboundMessage};

use super::job::{META_NAME, ORIGIN_KIND};
use crate::provider::ChatMessage;
use crate::store::cron::CronStore;
use crate::store::{RunOutcome, RunStatus};

/// A reminder's answer: its text is the reply, and the transcript notes that it went out, so
/// later turns know.
pub struct Reminder {
    pub text: String,
    pub transcript: Vec<ChatMessage>,
}

/// The job id of a message a cron job published; `None` for any other message.
fn cron_job(msg: &InboundMessage) -> Option<&str> {
    let origin = msg.origin.as_ref().filter(|_| msg.kind == InboundKind::System)?;
    (origin.kind == ORIGIN_KIND).then_some(origin.id.as_str())
}

/// The answer to a reminder's message (delivered verbatim, stored like any run's reply so it
/// goes out at most once); `None` for any message that is not a reminder.
pub fn reminder(msg: &InboundMessage) -> Option<Reminder> {
    let job = cron_job(msg)?;
    if !msg.delivers_verbatim() {
        return None;
    }
    let name = msg.metadata.get(META_NAME).and_then(serde_json::Value::as_str).unwrap_or("");
    let note = format!("[switchboard: reminder \"{name}\" (cron job {job}) was delivered to the chat]");
    let transcript = vec![ChatMessage::user(note), ChatMessage::assistant(msg.content.clone(), Vec::new())];
    Some(Reminder { text: msg.content.clone(), transcript })
}

/// Records a finished cron run's status and error on its history row and its job. Never
/// fails the run: a store error is logged.
pub async fn record_finish(store: &dyn CronStore, msg: &InboundMessage, outcome: &RunOutcome) {
    let Some(job) = cron_job(msg) else { return };
    let failed = outcome.status == RunStatus::Failed;
    let result = store.finish_cron_run(job, &msg.id, failed, outcome.error.as_deref()).await;
    if let Err(err) = result {
        tracing::warn!(%job, inbound = %msg.id, %err, "cannot record the cron run's outcome");
    }
}
