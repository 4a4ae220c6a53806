//! Deciding a stranger's pairing request, and telling them.

use chrono::Utc;
use serde_json::{Map, Value};
use switchboard_channels::BusExt;
use switchboard_channels::contract::{OutboundKind, OutboundMessage, TO_USER};

use super::Control;
use crate::store::StoreError;
use crate::store::pairing::{ApprovedPairing, DeniedPairing, PairingEntry, PairingState, normalize_code};

const WELCOME: &str = "Good news: my owner approved you. Write me anything.";
const DECLINED: &str = "Sorry, my owner declined your request to talk to me.";

impl Control {
    /// Approves the request `code` on `channel` (the sender's user gets at least
    /// `users.approved_level`) and tells the sender.
    pub async fn approve_pairing(
        &self,
        channel: &str,
        code: &str,
        decided_by: &str,
    ) -> Result<ApprovedPairing, StoreError> {
        let approved = self.store.approve_pairing(channel, code, self.approved_level, decided_by).await?;
        tracing::info!(%channel, sender = %approved.sender_id, %decided_by, "pairing approved");
        self.tell_stranger(channel, &approved.sender_id, code, "approved", WELCOME).await;
        Ok(approved)
    }

    /// Denies the request `code` on `channel` and tells the sender.
    pub async fn deny_pairing(&self, channel: &str, code: &str, decided_by: &str) -> Result<DeniedPairing, StoreError> {
        let denied = self.store.deny_pairing(channel, code, decided_by).await?;
        tracing::info!(%channel, sender = %denied.sender_id, %decided_by, "pairing denied");
        self.tell_stranger(channel, &denied.sender_id, code, "denied", DECLINED).await;
        Ok(denied)
    }

    /// The open request with `code` on any channel (codes are typed without their channel in
    /// the owner's chat).
    pub async fn open_pairing(&self, code: &str) -> Result<Option<PairingEntry>, StoreError> {
        let code = normalize_code(code);
        let entries = self.store.list_pairings(None).await?;
        Ok(entries
            .into_iter()
            .find(|entry| matches!(&entry.state, PairingState::Pending { code: open, .. } if *open == code)))
    }

    /// A direct message to the sender; a failure is logged (the decision stands either way).
    async fn tell_stranger(&self, channel: &str, sender_id: &str, code: &str, decision: &str, text: &str) {
        let mut metadata = Map::new();
        metadata.insert(TO_USER.to_owned(), Value::Bool(true));
        let msg = OutboundMessage {
            // Stable per decision, so a retried publish is delivered once.
            id: format!("pairing:{channel}:{}:{decision}", normalize_code(code)),
            channel: channel.to_owned(),
            chat_id: sender_id.to_owned(),
            content: text.to_owned(),
            kind: OutboundKind::Notice,
            created_at: Utc::now(),
            metadata,
            ..OutboundMessage::default()
        };
        if let Err(err) = self.bus.publish_outbound(&msg).await {
            tracing::warn!(%channel, sender = sender_id, %err, "cannot tell a stranger the owner's decision");
        }
    }
}
