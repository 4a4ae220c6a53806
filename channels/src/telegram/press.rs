//! Button presses: a `callback_query` on one of the bot's messages goes to the control desk,
//! never to the bus, and is always answered with `answerCallbackQuery`.
//!
//! Each press runs on its own task, so a slow desk holds up neither the update loop nor other
//! presses. Telegram shows the presser a spinner until the answer and refuses answers after
//! about 15 s, so a desk that takes longer than [`super::PRESS_ANSWER_WITHIN`] (the
//! settings' `press_answer_within`) gets the press answered first; the message still shows the
//! outcome when it comes.

use std::sync::Arc;
use std::time::Duration;

use teloxide::prelude::*;
use teloxide::types::{CallbackQuery, MaybeInaccessibleMessage, MessageId};
use teloxide::utils::render::RenderMessageTextHelper;
use teloxide::{ApiError, RequestError};
use tokio_util::sync::CancellationToken;

use super::CHANNEL;
use super::buttons::with_outcome;
use super::inbound::BotIdentity;
use super::retry::describe;
use super::send::edit_part;
use crate::contract::Sender;
use crate::control::{ControlDesk, Press, PressAnswer};

/// Shown when the desk took longer than the press waits.
const STILL_WORKING: &str = "Working on it…";
/// Shown for presses nothing here can act on (no desk, or not one of the bot's messages).
const NOT_HERE: &str = "These buttons don't work here.";

/// What a press needs: the bot to answer and edit with, and the desk that decides.
pub(crate) struct Presses {
    bot: Bot,
    me: UserId,
    desk: Option<Arc<dyn ControlDesk>>,
    /// The desk's answer is awaited this long before the press is answered without it.
    answer_within: Duration,
    shutdown: CancellationToken,
}

/// The message a press came from.
struct Pressed {
    chat: ChatId,
    message: MessageId,
    /// The message's text as HTML (from its entities) and as plain text, when it has text.
    text: Option<(String, String)>,
}

impl Presses {
    pub fn new(
        bot: Bot,
        me: &BotIdentity,
        desk: Option<Arc<dyn ControlDesk>>,
        answer_within: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        Self { bot, me: me.id, desk, answer_within, shutdown }
    }

    /// Handles `query` on a task of its own.
    pub fn spawn(self: &Arc<Self>, query: CallbackQuery) {
        let presses = Arc::clone(self);
        tokio::spawn(async move { presses.handle(query).await });
    }

    async fn handle(&self, query: CallbackQuery) {
        let presser =
            Sender { id: query.from.id.0.to_string(), name: query.from.full_name(), is_bot: query.from.is_bot };
        let data = query.data.clone().unwrap_or_default();
        // The verb alone: the argument may be a pairing code.
        let verb = data.split_once(':').map_or("", |(verb, _)| verb).to_owned();
        tracing::info!(presser = %presser.id, presser_name = %presser.name, %verb, "telegram button pressed");
        let (Some(desk), Some(pressed)) = (&self.desk, self.pressed(&query)) else {
            self.answer(&query, NOT_HERE).await;
            return;
        };
        let press = Press { channel: CHANNEL.to_owned(), chat_id: pressed.chat.0.to_string(), presser, data };
        let deciding = desk.press(&press);
        tokio::pin!(deciding);
        let answer = tokio::select! {
            answer = &mut deciding => answer,
            _ = tokio::time::sleep(self.answer_within) => {
                tracing::warn!(%verb, "the control desk is slow; answering the press before it decided");
                self.answer(&query, STILL_WORKING).await;
                let answer = deciding.await;
                self.show_outcome(&pressed, &answer).await;
                return;
            }
        };
        self.answer(&query, &answer.toast).await;
        self.show_outcome(&pressed, &answer).await;
    }

    /// The bot's message the press came from; `None` for presses on anything else (inline
    /// messages, which the bot never sends).
    fn pressed(&self, query: &CallbackQuery) -> Option<Pressed> {
        let message = query.message.as_ref()?;
        let text = match message {
            MaybeInaccessibleMessage::Regular(message) => {
                if message.from.as_ref().is_some_and(|from| from.id != self.me) {
                    return None;
                }
                message.text().map(|plain| (message.html_text().unwrap_or_default(), plain.to_owned()))
            }
            // Too old to read (48 h): it can still lose its buttons.
            MaybeInaccessibleMessage::Inaccessible(_) => None,
        };
        Some(Pressed { chat: message.chat().id, message: message.id(), text })
    }

    /// `answerCallbackQuery`, with `toast` shown to the presser (nothing when empty). A failure
    /// is logged: the presser's spinner stops by itself.
    async fn answer(&self, query: &CallbackQuery, toast: &str) {
        let mut request = self.bot.answer_callback_query(query.id.clone());
        if !toast.is_empty() {
            request = request.text(toast);
        }
        match request.await {
            Ok(_) => {}
            Err(RequestError::Api(ApiError::Unknown(description))) if description.contains("query is too old") => {
                tracing::warn!("a button press was answered too late; Telegram no longer takes the answer");
            }
            Err(err) => tracing::warn!(err = %describe(&err), "cannot answer a button press"),
        }
    }

    /// Adds the outcome under the message and removes its buttons, if the answer settled it.
    async fn show_outcome(&self, pressed: &Pressed, answer: &PressAnswer) {
        let Some(outcome) = &answer.outcome else { return };
        if let Some((html, plain)) = &pressed.text {
            let part = with_outcome(html, plain, outcome);
            match edit_part(&self.bot, pressed.chat, pressed.message, &part, None, &self.shutdown).await {
                Ok(()) => return,
                // Not a text message after all, or one that cannot take the text: the buttons
                // still go.
                Err(RequestError::Api(err)) => {
                    tracing::debug!(%err, "cannot add the outcome to the message; removing its buttons only");
                }
                Err(err) => {
                    tracing::warn!(err = %describe(&err), "cannot show a press's outcome");
                    return;
                }
            }
        }
        let removed = self.bot.edit_message_reply_markup(pressed.chat, pressed.message).await;
        if let Err(err) = removed {
            tracing::warn!(err = %describe(&err), "cannot remove the buttons of a settled message");
        }
    }
}
