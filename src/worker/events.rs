//! Run events (`run.started`, `chunk`, `tool.call`, …) on their way to the bus.

use std::sync::Arc;

use switchboard_channels::bus::BusExt;
use switchboard_channels::contract::{InboundMessage, RunEvent, RunEventBody};
use tokio::sync::mpsc;

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
        session_key: &str,
    ) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<RunEventBody>();
        let template = RunEvent::answering(msg, run_id, session_key, RunEventBody::Started);
        tokio::spawn(async move {
            while let Some(body) = rx.recv().await {
                let event = RunEvent { at: chrono::Utc::now(), body, ..template.clone() };
                if let Err(err) = bus.publish_event(&event).await {
                    tracing::debug!(%err, "cannot publish a run event");
                }
            }
        });
        Self { tx }
    }
}

impl EventSink for BusEvents {
    fn emit(&self, body: RunEventBody) {
        let _ = self.tx.send(body);
    }
}
