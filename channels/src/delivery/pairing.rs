//! The pairing check of a chat platform's inbound side: a direct message from someone not
//! allowed yet is answered with a pairing code (or silence) until the owner approves them, and
//! the owner is told about each new request.

use std::sync::Arc;
use std::time::Duration;

use crate::contract::Sender;
use crate::control::{ControlDesk, OwnerLink, PairingNotice};
use crate::pairing::{PairingAnswer, PairingDesk, PairingStore};

/// A stranger writing to the bot in a direct message.
#[derive(Debug, Clone, Copy)]
pub struct Stranger<'a> {
    pub sender: &'a Sender,
    /// `@username` on Telegram, the account name on Discord, if any.
    pub username: Option<&'a str>,
    /// Their direct chat with the bot.
    pub chat_id: &'a str,
    /// What they wrote.
    pub text: &'a str,
}

/// One channel's pairing: its store (if any), the owner's desk, and its limits.
pub struct PairingCheck {
    channel: &'static str,
    store: Option<Arc<dyn PairingStore>>,
    owner_desk: Option<Arc<dyn ControlDesk>>,
    desk: PairingDesk,
    ttl: Duration,
    max_pending: usize,
}

impl PairingCheck {
    pub fn new(channel: &'static str, owner: OwnerLink, ttl: Duration, max_pending: usize) -> Self {
        let desk = PairingDesk::new(owner.desk.is_some());
        Self { channel, store: owner.pairing, owner_desk: owner.desk, desk, ttl, max_pending }
    }

    /// What to do with a direct message from `stranger`, who is not otherwise allowed. Without
    /// a store nobody can be approved: the message is ignored, with a log line. A new code is
    /// also announced to the owner.
    pub async fn check(&self, stranger: Stranger<'_>) -> PairingAnswer {
        let sender = stranger.sender;
        let Some(store) = &self.store else {
            tracing::warn!(sender = %sender.id, "direct message from an unknown user and no pairing store; ignored");
            return PairingAnswer::Silent;
        };
        let (answer, new_request) =
            self.desk.answer(store.as_ref(), self.channel, &sender.id, &sender.name, self.ttl, self.max_pending).await;
        if let (Some(request), Some(owner_desk)) = (new_request, &self.owner_desk) {
            let notice = PairingNotice {
                channel: self.channel.to_owned(),
                sender: sender.clone(),
                username: stranger.username.map(str::to_owned),
                chat_id: stranger.chat_id.to_owned(),
                first_message: stranger.text.to_owned(),
                code: request.code,
                expires_at: request.expires_at,
            };
            owner_desk.pairing_requested(&notice).await;
        }
        answer
    }
}
