//! Telegram's side of the delivery core: Bot API calls for replies, drafts and typing, and the
//! decisions only Telegram can make (chat ids, topics, quoting, which errors are final).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use teloxide::prelude::*;
use teloxide::types::{ChatAction, InlineKeyboardMarkup, MessageId, ReplyParameters, ThreadId};
use teloxide::{ApiError, RequestError};
use tokio_util::sync::CancellationToken;

use super::buttons::keyboard_of;
use super::format::{MESSAGE_LIMIT, Part, render_parts};
use super::retry::{Verdict, classify, describe};
use super::send::{edit_part, send_part};
use super::target::{AddressError, Target};
use super::upload::send_media;
use super::{CHANNEL, TelegramSettings};
use crate::contract::{Media, OutboundMessage, RunEvent};
use crate::delivery::{DraftLimits, Platform};

/// A streamed draft shows at most this much text (UTF-16 units, as Telegram counts), a bit
/// under the message limit; the final reply shows everything.
const DRAFT_VISIBLE_UNITS: usize = 4000;

/// The bot and its settings, as the delivery core uses them.
pub struct TelegramPlatform {
    bot: Bot,
    settings: Arc<TelegramSettings>,
}

impl TelegramPlatform {
    pub fn new(bot: Bot, settings: Arc<TelegramSettings>) -> Self {
        Self { bot, settings }
    }
}

/// One message of a delivery: the text goes first, in rendered parts (the last one with the
/// message's buttons under it), then each file.
pub enum Step {
    Part(Part, Option<InlineKeyboardMarkup>),
    File(Media),
}

#[async_trait]
impl Platform for TelegramPlatform {
    const NAME: &'static str = "Telegram";
    const CHANNEL: &'static str = CHANNEL;
    /// Telegram shows typing for about 5 s.
    const TYPING_INTERVAL: Duration = Duration::from_secs(4);
    /// 4000 UTF-16 units take at most 12 KB.
    const DRAFT: DraftLimits = DraftLimits { kept_bytes: 16 * 1024 };
    type Target = Target;
    type MessageId = MessageId;
    type Step = Step;
    type Error = RequestError;
    type AddressError = AddressError;

    fn target_of(&self, msg: &OutboundMessage) -> Result<Target, AddressError> {
        Target::of(&self.settings, msg)
    }

    async fn plan(&self, msg: &OutboundMessage) -> Vec<Step> {
        let parts = if msg.content.trim().is_empty() { Vec::new() } else { render_parts(&msg.content, MESSAGE_LIMIT) };
        let mut keyboard = keyboard_of(&msg.buttons);
        if keyboard.is_some() && parts.is_empty() {
            tracing::warn!(id = %msg.id, "buttons without text cannot be shown on Telegram; sent without them");
        }
        let last = parts.len().saturating_sub(1);
        let parts = parts.into_iter().enumerate().map(|(index, part)| {
            let keyboard = if index == last { keyboard.take() } else { None };
            Step::Part(part, keyboard)
        });
        parts.chain(msg.media.iter().cloned().map(Step::File)).collect()
    }

    async fn send_step(
        &self,
        target: &Target,
        _id: &str,
        index: usize,
        step: &Step,
        shutdown: &CancellationToken,
    ) -> Result<(), RequestError> {
        match step {
            Step::Part(part, keyboard) => {
                send_part(&self.bot, target, part, keyboard.as_ref(), index == 0, shutdown).await.map(drop)
            }
            Step::File(media) => send_media(&self.bot, target, media, index == 0, shutdown).await,
        }
    }

    /// The group became a supergroup: the rest goes there.
    fn redirect(&self, target: &mut Target, err: &RequestError) -> bool {
        let RequestError::MigrateToChatId(to) = err else { return false };
        tracing::info!(from = target.chat.0, to = to.0, "group moved to a supergroup; sending there");
        target.chat = *to;
        true
    }

    fn can_edit_into(&self, step: &Step) -> bool {
        matches!(step, Step::Part(..))
    }

    async fn edit_into(
        &self,
        target: &Target,
        message: &MessageId,
        step: &Step,
        shutdown: &CancellationToken,
    ) -> Result<(), RequestError> {
        match step {
            Step::Part(part, keyboard) => {
                edit_part(&self.bot, target.chat, *message, part, keyboard.as_ref(), shutdown).await
            }
            Step::File(_) => Ok(()),
        }
    }

    async fn delete(&self, target: &Target, message: &MessageId) -> Result<(), RequestError> {
        self.bot.delete_message(target.chat, *message).send().await.map(drop)
    }

    fn is_final(&self, err: &RequestError) -> bool {
        classify(err) == Verdict::Final
    }

    fn describe(&self, err: &RequestError) -> String {
        describe(err)
    }

    /// The run's chat and topic, quoting the triggering message as the reply would.
    fn live_target(&self, event: &RunEvent) -> Option<Target> {
        let chat = event.chat_id.parse::<i64>().ok().map(ChatId)?;
        let thread = event.thread_id.as_deref().and_then(|topic| topic.parse::<i32>().ok());
        let trigger = event.reply_to.as_deref().and_then(|message| message.parse::<i32>().ok()).map(MessageId);
        let reply_to = trigger.filter(|_| chat.0 < 0 && self.settings.quote_in_groups);
        Some(Target { chat, thread: thread.map(|id| ThreadId(MessageId(id))), reply_to })
    }

    fn typing_enabled(&self) -> bool {
        self.settings.typing
    }

    fn streams_in(&self, target: &Target) -> bool {
        if target.chat.0 > 0 { self.settings.stream.private } else { self.settings.stream.groups }
    }

    fn edit_interval(&self) -> Duration {
        self.settings.stream.edit_interval
    }

    async fn typing(&self, target: &Target) -> Result<(), RequestError> {
        let mut action = self.bot.send_chat_action(target.chat, ChatAction::Typing);
        if let Some(thread) = target.thread {
            action = action.message_thread_id(thread);
        }
        action.send().await.map(drop)
    }

    fn visible_draft(&self, text: &str) -> String {
        let mut units = 0;
        text.chars()
            .take_while(|c| {
                units += c.len_utf16();
                units <= DRAFT_VISIBLE_UNITS
            })
            .collect()
    }

    async fn post_draft(&self, target: &Target, text: &str) -> Result<MessageId, RequestError> {
        let mut request = self.bot.send_message(target.chat, text);
        if let Some(thread) = target.thread {
            request = request.message_thread_id(thread);
        }
        if let Some(message) = target.reply_to {
            request = request.reply_parameters(ReplyParameters::new(message).allow_sending_without_reply());
        }
        Ok(request.send().await?.id)
    }

    async fn edit_draft(&self, target: &Target, message: &MessageId, text: &str) -> Result<(), RequestError> {
        match self.bot.edit_message_text(target.chat, *message, text).send().await {
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Flood control: nothing more for this long.
    fn draft_pause(&self, err: &RequestError) -> Option<Duration> {
        match err {
            RequestError::RetryAfter(wait) => {
                crate::meters::meters().told_to_wait("telegram");
                Some(wait.duration())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::RunEventBody;

    fn platform() -> TelegramPlatform {
        TelegramPlatform::new(Bot::new("0:x"), Arc::new(TelegramSettings::default()))
    }

    #[test]
    fn drafts_quote_the_trigger_in_groups_only() {
        let event = |chat: &str| RunEvent {
            v: 1,
            run_id: "r".into(),
            session_key: format!("telegram:{chat}:topic:3"),
            channel: "telegram".into(),
            chat_id: chat.into(),
            inbound_id: Some(format!("telegram:{chat}:42")),
            thread_id: Some("3".into()),
            reply_to: Some("42".into()),
            at: chrono::Utc::now(),
            body: RunEventBody::Started,
        };
        let platform = platform();
        let group = platform.live_target(&event("-100")).unwrap();
        assert_eq!(group.reply_to, Some(MessageId(42)));
        assert_eq!(group.thread, Some(ThreadId(MessageId(3))));
        assert_eq!(platform.live_target(&event("5")).unwrap().reply_to, None);
        let no_topic = RunEvent { thread_id: None, ..event("-100") };
        assert_eq!(platform.live_target(&no_topic).unwrap().thread, None);
        let not_a_topic = RunEvent { thread_id: Some("x".into()), ..event("-100") };
        assert_eq!(platform.live_target(&not_a_topic).unwrap().thread, None);
        assert!(platform.live_target(&RunEvent { chat_id: "x".into(), ..event("-100") }).is_none());
    }

    #[tokio::test]
    async fn buttons_go_under_the_last_part_of_the_text() {
        let msg = OutboundMessage {
            id: "o1".into(),
            channel: "telegram".into(),
            chat_id: "42".into(),
            content: format!("{}\n\n{}", "a".repeat(4000), "b".repeat(100)),
            media: vec![Media { url: Some("https://example.com/a.png".into()), ..Media::default() }],
            buttons: vec![vec![crate::contract::Button::new("Approve", "pa:ABCD2345")]],
            ..OutboundMessage::default()
        };
        let keyboards: Vec<Option<usize>> = platform()
            .plan(&msg)
            .await
            .iter()
            .map(|step| match step {
                Step::Part(_, keyboard) => keyboard.as_ref().map(|keyboard| keyboard.inline_keyboard.len()),
                Step::File(_) => None,
            })
            .collect();
        assert_eq!(keyboards, [None, Some(1), None]);
    }

    #[test]
    fn a_message_to_a_person_goes_to_their_direct_chat_unquoted() {
        let mut msg = OutboundMessage {
            chat_id: "42".into(),
            thread_id: Some("7".into()),
            reply_to: Some("9".into()),
            ..OutboundMessage::default()
        };
        msg.metadata.insert(crate::contract::TO_USER.into(), true.into());
        let target = platform().target_of(&msg).unwrap();
        assert_eq!((target.chat, target.thread, target.reply_to), (ChatId(42), None, None));
    }

    #[test]
    fn a_draft_shows_at_most_the_visible_limit() {
        let text = "ab😀".repeat(3000);
        let visible = platform().visible_draft(&text);
        assert!(visible.encode_utf16().count() <= DRAFT_VISIBLE_UNITS);
        assert!(visible.encode_utf16().count() > DRAFT_VISIBLE_UNITS - 4);
    }
}
