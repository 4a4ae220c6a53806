//! Where a Telegram message goes: a chat, a forum topic in it, and the message to quote.

use teloxide::types::{ChatId, MessageId, ReplyParameters, ThreadId};

use super::TelegramSettings;
use crate::contract::OutboundMessage;

/// Where a message goes: a chat, a forum topic in it, and the message to quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub chat: ChatId,
    pub thread: Option<ThreadId>,
    /// Quoted by the first message sent (with `allow_sending_without_reply`).
    pub reply_to: Option<MessageId>,
}

#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    #[error("chat id {0:?} is not a Telegram chat id")]
    Chat(String),
}

impl Target {
    /// The target of an outbound message: `reply_to` is kept in groups (negative chat ids)
    /// when `quote_in_groups` is on; private chats are never quoted. A thread or message id
    /// that is not a number is ignored with a log line rather than losing the message.
    /// A message to a person ([`OutboundMessage::to_user`]) goes to their direct chat, whose id
    /// is their user id, with no topic or quote.
    pub fn of(settings: &TelegramSettings, msg: &OutboundMessage) -> Result<Target, AddressError> {
        let chat = msg.chat_id.parse::<i64>().map(ChatId).map_err(|_| AddressError::Chat(msg.chat_id.clone()))?;
        if msg.to_user() {
            return Ok(Target { chat, thread: None, reply_to: None });
        }
        let thread = msg.thread_id.as_deref().and_then(|thread| match thread.parse::<i32>() {
            Ok(id) => Some(ThreadId(MessageId(id))),
            Err(_) => {
                tracing::warn!(thread, chat = chat.0, "thread id is not a Telegram topic id; sending to the chat");
                None
            }
        });
        let quote = chat.0 < 0 && settings.quote_in_groups;
        let reply_to = msg.reply_to.as_deref().filter(|_| quote).and_then(|id| id.parse::<i32>().ok()).map(MessageId);
        Ok(Target { chat, thread, reply_to })
    }

    pub(crate) fn reply_parameters(&self, first: bool) -> Option<ReplyParameters> {
        let message = self.reply_to.filter(|_| first)?;
        Some(ReplyParameters::new(message).allow_sending_without_reply())
    }
}
