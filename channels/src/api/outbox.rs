//! Messages for API chats that no request was waiting for: a cron reminder, a heartbeat
//! finding, a `message` sent from another chat, a sub-agent's announcement, a reply whose client
//! gave up. Each is kept in the store (read back with the session's messages), announced as a
//! `message` event so every API process shows it on its WebSockets, and, with a webhook
//! configured, posted to it (see [`super::webhook`]).

use std::sync::Arc;

use crate::bus::Bus;
use crate::contract::{OutboundMessage, RunEvent, RunEventBody, reply, session_key};

use super::CHANNEL;
use super::store::{ApiStore, ApiStoreError, OutboxEntry};

pub(super) struct Outbox {
    pub(super) store: Arc<dyn ApiStore>,
    pub(super) bus: Arc<dyn Bus>,
    /// Post kept messages to the webhook.
    pub(super) webhook: bool,
    /// Wakes the webhook poster when a message was kept.
    pub(super) kept: Arc<tokio::sync::Notify>,
}

impl Outbox {
    /// Keeps `message`; an error when it could not be kept (the caller leaves it on the bus, to
    /// come again).
    pub(super) async fn keep(&self, message: &OutboundMessage) -> Result<(), ApiStoreError> {
        let entry = entry_for(message, self.webhook);
        if !self.store.keep_outbound(&entry).await? {
            // Kept before (a redelivery): announced then.
            return Ok(());
        }
        tracing::info!(outbound_id = %message.id, session_key = %entry.session_key,
            "API message with nobody waiting kept in the outbox");
        if self.webhook {
            self.kept.notify_one();
        }
        let event = RunEvent {
            v: crate::contract::CONTRACT_VERSION,
            run_id: reply::run_id(message).unwrap_or_default().to_owned(),
            session_key: entry.session_key,
            channel: CHANNEL.to_owned(),
            chat_id: message.chat_id.clone(),
            inbound_id: message.in_reply_to.clone(),
            thread_id: None,
            reply_to: None,
            at: message.created_at,
            body: RunEventBody::Message {
                id: message.id.clone(),
                content: message.content.clone(),
                media: message.media.clone(),
            },
        };
        // Best effort like every event: the store has the message either way.
        if let Err(err) = self.bus.publish_event(&event).await {
            tracing::warn!(%err, outbound_id = %message.id, "cannot announce an outbox message");
        }
        Ok(())
    }
}

/// Where `message` belongs: the session its run wrote it in, when that is its chat's (a reply
/// nobody waited for, already in the transcript); else the chat's own session.
fn entry_for(message: &OutboundMessage, webhook: bool) -> OutboxEntry {
    let chat_session = session_key(CHANNEL, &message.chat_id, None);
    let run_session = message.metadata.get(reply::SESSION_KEY).and_then(serde_json::Value::as_str);
    let own = run_session.filter(|key| *key == chat_session || key.ends_with(&format!("/{chat_session}")));
    OutboxEntry {
        message: message.clone(),
        session_key: own.map_or(chat_session, str::to_owned),
        in_transcript: own.is_some(),
        webhook,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(session: Option<&str>) -> OutboundMessage {
        let mut message =
            OutboundMessage { id: "o1".into(), channel: "api".into(), chat_id: "kitchen".into(), ..Default::default() };
        if let Some(session) = session {
            reply::set_run(&mut message, "r1", session);
        }
        message
    }

    #[test]
    fn a_message_belongs_to_its_runs_session_only_when_that_is_its_chats() {
        let unanswered = entry_for(&message(Some("helper/api:kitchen")), false);
        assert_eq!((unanswered.session_key.as_str(), unanswered.in_transcript), ("helper/api:kitchen", true));
        let reminder = entry_for(&message(Some("cron:daily")), true);
        assert_eq!(
            (reminder.session_key.as_str(), reminder.in_transcript, reminder.webhook),
            ("api:kitchen", false, true)
        );
        let sent = entry_for(&message(None), false);
        assert_eq!((sent.session_key.as_str(), sent.in_transcript), ("api:kitchen", false));
    }
}
