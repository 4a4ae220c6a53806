//! The daemon's [`ControlDesk`]: the chat adapters hand it button presses and new pairing
//! requests. Presses are decided by the owner's operations ([`Control`]) after checking that
//! the presser may; new requests are announced to the owner with Approve and Deny buttons.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use serde_json::{Map, Value};
use switchboard_channels::contract::{OutboundKind, OutboundMessage, TO_USER};
use switchboard_channels::control::{ControlDesk, PairingNotice, Press, PressAnswer};
use switchboard_channels::{Bus, BusExt};

use super::Control;
use super::pairing_notice::{local_time, notice_buttons, notice_text};
use crate::config::Config;
use crate::store::StoreError;
use crate::zone::Tz;

/// Said when a press could not be decided because the store failed.
const FAILED: &str = "That did not work; please try again in a moment.";

/// Where a pairing notice goes: an owner's identity and the chat (or user) to post to.
struct Recipient {
    identity: String,
    chat_id: String,
    /// `chat_id` is the owner's user id (a configured owner who may never have written).
    to_user: bool,
}

/// The buttons' and pairing notices' side of the owner's operations.
pub struct Desk {
    pub(super) control: Arc<Control>,
    bus: Arc<dyn Bus>,
    /// Every agent's name: owners' direct chats are on record per agent.
    agents: Vec<String>,
    /// The owner's time zone (`agent.timezone`), for when a code runs out.
    zone: Tz,
}

impl Desk {
    pub fn new(control: Arc<Control>, bus: Arc<dyn Bus>, config: &Config) -> Self {
        let zone = config.agent.time_zone().unwrap_or(Tz::UTC);
        Self { control, bus, agents: config.agent_names(), zone }
    }

    /// `at` in the owner's time zone.
    pub(super) fn local_time(&self, at: chrono::DateTime<Utc>) -> String {
        local_time(at, &self.zone, Utc::now())
    }

    /// The first owner named in `users.owners` on `channel`; else every owner with a direct chat
    /// on record there.
    async fn owners_to_tell(&self, channel: &str) -> Result<Vec<Recipient>, StoreError> {
        if let Some(owner) = self.control.deciders().named_owners_on(channel).into_iter().next() {
            let identity = owner.to_string();
            return Ok(vec![Recipient { identity, chat_id: owner.sender_id, to_user: true }]);
        }
        let mut recipients: Vec<Recipient> = Vec::new();
        for agent in &self.agents {
            for chat in self.control.store().owner_chats(agent).await? {
                let known = recipients.iter().any(|known| known.identity == chat.identity);
                if chat.chat.channel == channel && !chat.chat.is_group && !known {
                    recipients.push(Recipient { identity: chat.identity, chat_id: chat.chat.chat_id, to_user: false });
                }
            }
        }
        Ok(recipients)
    }

    async fn tell(&self, recipient: Recipient, notice: &PairingNotice, text: &str) {
        let mut metadata = Map::new();
        if recipient.to_user {
            metadata.insert(TO_USER.to_owned(), Value::Bool(true));
        }
        let msg = OutboundMessage {
            // Stable, so a repeated announcement of the same request is delivered once.
            id: format!("pairing:{}:{}:to:{}", notice.channel, notice.code, recipient.identity),
            channel: notice.channel.clone(),
            chat_id: recipient.chat_id,
            content: text.to_owned(),
            kind: OutboundKind::Notice,
            buttons: notice_buttons(&notice.code),
            metadata,
            ..OutboundMessage::default()
        };
        if let Err(err) = self.bus.publish_outbound(&msg).await {
            tracing::warn!(%err, owner = %recipient.identity, "cannot tell the owner about a pairing request");
        }
    }
}

#[async_trait]
impl ControlDesk for Desk {
    async fn press(&self, press: &Press) -> PressAnswer {
        match self.decide(press).await {
            Ok(answer) => answer,
            Err(err) => {
                tracing::error!(%err, channel = %press.channel, presser = %press.presser.id, "a button press failed");
                PressAnswer::toast(FAILED)
            }
        }
    }

    async fn pairing_requested(&self, notice: &PairingNotice) {
        let recipients = match self.owners_to_tell(&notice.channel).await {
            Ok(recipients) => recipients,
            Err(err) => return tracing::warn!(%err, "cannot find the owner to tell about a pairing request"),
        };
        if recipients.is_empty() {
            tracing::warn!(
                channel = %notice.channel,
                "no owner to tell about a pairing request: name one in users.owners (e.g. \"{}:<your id>\"), or write \
                 to the bot once as the owner; the code works with `switchboard pairing approve`",
                notice.channel
            );
            return;
        }
        let text = notice_text(notice, &self.zone, Utc::now());
        for recipient in recipients {
            self.tell(recipient, notice, &text).await;
        }
    }
}
