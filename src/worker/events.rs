//! Run events (`run.started`, `chunk`, `tool.call`, …) on their way to the bus, and with
//! `/verbose on`, a short progress message to the chat as each tool starts.

use std::collections::BTreeSet;
use std::sync::Arc;

use switchboard_channels::bus::BusExt;
use switchboard_channels::contract::{
    InboundMessage, OutboundKind, OutboundMessage, RunEvent, RunEventBody, SessionKey,
};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::agent::EventSink;

/// Publishes run events in order from a background task, so emitting never blocks the run.
pub(super) struct BusEvents {
    tx: mpsc::UnboundedSender<RunEventBody>,
}

impl BusEvents {
    pub(super) fn start(
        bus: Arc<dyn switchboard_channels::Bus>,
        msg: &InboundMessage,
        run_id: &str,
        session_key: &SessionKey,
    ) -> Self {
        Self::with_progress(bus, msg, run_id, session_key, false)
    }

    /// [`BusEvents::start`], with progress messages to the chat when `verbose`.
    pub(super) fn with_progress(
        bus: Arc<dyn switchboard_channels::Bus>,
        msg: &InboundMessage,
        run_id: &str,
        session_key: &SessionKey,
        verbose: bool,
    ) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<RunEventBody>();
        let template = RunEvent::answering(msg, run_id, session_key, RunEventBody::Started);
        let mut progress =
            verbose.then(|| Progress { msg: msg.clone(), run_id: run_id.to_owned(), told: BTreeSet::new() });
        tokio::spawn(
            async move {
                while let Some(first) = rx.recv().await {
                    for body in with_queued(first, &mut rx) {
                        if let (Some(progress), RunEventBody::ToolCall { name, .. }) = (progress.as_mut(), &body) {
                            progress.tool_started(bus.as_ref(), name).await;
                        }
                        let event = RunEvent { at: chrono::Utc::now(), body, ..template.clone() };
                        if let Err(err) = bus.publish_event(&event).await {
                            tracing::debug!(%err, "cannot publish a run event");
                        }
                    }
                }
            }
            // Its lines belong to the run that started it.
            .in_current_span(),
        );
        Self { tx }
    }
}

/// `first` and the events queued behind it, with the chunks that follow one another joined
/// into one. A model's stream often brings several chunks in one read (the whole answer, from
/// a fast one); each event is a publish, and on NATS a message to every adapter, so what
/// piled up while the last one went out goes as one. Chunks that come apart in time still go
/// one by one, as they came.
fn with_queued(first: RunEventBody, rx: &mut mpsc::UnboundedReceiver<RunEventBody>) -> Vec<RunEventBody> {
    let mut bodies = vec![first];
    while let Ok(next) = rx.try_recv() {
        match (bodies.last_mut(), next) {
            (Some(RunEventBody::Chunk { text }), RunEventBody::Chunk { text: more }) => text.push_str(&more),
            (_, next) => bodies.push(next),
        }
    }
    bodies
}

impl EventSink for BusEvents {
    fn emit(&self, body: RunEventBody) {
        let _ = self.tx.send(body);
    }
}

/// The progress messages of one run: one per tool, the first time the run calls it.
struct Progress {
    msg: InboundMessage,
    run_id: String,
    told: BTreeSet<String>,
}

impl Progress {
    async fn tool_started(&mut self, bus: &dyn switchboard_channels::Bus, tool: &str) {
        if !self.told.insert(tool.to_owned()) {
            return;
        }
        // Stable per run and tool, so a redelivered run does not repeat itself to the chat.
        let id = format!("{}.progress.{tool}", self.run_id);
        let note = OutboundMessage::answering(&self.msg, id, OutboundKind::Progress, format!("⏳ {}…", describe(tool)));
        if let Err(err) = bus.publish_outbound(&note).await {
            tracing::debug!(%err, "cannot publish a progress message");
        }
    }
}

/// A tool as a person reads it: `web_search` → "searching the web".
fn describe(tool: &str) -> String {
    let known = match tool {
        "web_search" => "searching the web",
        "web_fetch" => "reading a web page",
        "exec" => "running a command",
        "read_file" | "list_dir" => "reading files",
        "write_file" | "edit_file" | "delete_file" => "changing files",
        "memory_search" | "memory_get" => "looking through my notes",
        "skill_get" | "skill_search" => "reading a skill",
        "spawn" => "starting a helper",
        "cron" => "scheduling",
        "message" => "sending a message",
        _ => return format!("using {tool}"),
    };
    known.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> RunEventBody {
        RunEventBody::Chunk { text: text.to_owned() }
    }

    #[test]
    fn chunks_queued_together_go_as_one_and_the_rest_keep_their_order() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for body in [chunk("lo, "), chunk("wor"), chunk("ld"), RunEventBody::Failed { error: "cut".into() }, chunk("!")]
        {
            tx.send(body).unwrap();
        }
        let bodies = with_queued(chunk("Hel"), &mut rx);
        assert_eq!(bodies, [chunk("Hello, world"), RunEventBody::Failed { error: "cut".into() }, chunk("!")]);
    }

    #[test]
    fn an_event_alone_goes_as_it_is() {
        let (_tx, mut rx) = mpsc::unbounded_channel();
        assert_eq!(with_queued(RunEventBody::Started, &mut rx), [RunEventBody::Started]);
    }
}
