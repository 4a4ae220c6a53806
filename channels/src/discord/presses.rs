//! Pressed buttons: a gateway `INTERACTION_CREATE` of type 3 (MESSAGE_COMPONENT) is handed to
//! the control desk at once and answered through the interaction's callback, never forwarded
//! to the bus.
//!
//! Discord fails an interaction not answered within 3 s. A desk that takes longer than
//! [`ANSWER_WITHIN`] gets a deferred update (type 6) sent for it; its answer is then applied
//! through the interaction's webhook: the pressed message edited as `@original`, the toast as an
//! ephemeral follow-up.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use serenity::all::ComponentInteraction;
use tokio_util::sync::CancellationToken;

use super::rest::{AnswerPart, Rest};
use super::retry::{RetryPolicy, with_retry};
use super::{CHANNEL, MESSAGE_LIMIT};
use crate::contract::Sender;
use crate::control::{ButtonAction, ControlDesk, Press, PressAnswer};

/// How long the desk may take before the press is acknowledged with a deferred update: well
/// inside Discord's 3 s, leaving time for the callback itself.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Told to whoever presses a button when no desk is configured.
const NO_DESK: &str = "These buttons don't work here.";

/// Interaction response types and the ephemeral flag.
const CHANNEL_MESSAGE: u8 = 4;
const DEFERRED_UPDATE: u8 = 6;
const UPDATE_MESSAGE: u8 = 7;
const EPHEMERAL: u64 = 64;

/// The presses side of the Discord channel.
pub(crate) struct Presses {
    rest: Arc<Rest>,
    desk: Option<Arc<dyn ControlDesk>>,
    shutdown: CancellationToken,
}

impl Presses {
    pub(crate) fn new(rest: Arc<Rest>, desk: Option<Arc<dyn ControlDesk>>, shutdown: CancellationToken) -> Self {
        Self { rest, desk, shutdown }
    }

    /// Asks the desk about a press and answers the interaction; failures are logged.
    pub(crate) async fn handle(&self, interaction: &ComponentInteraction) {
        let press = press_of(interaction);
        log_press(&press);
        let Some(desk) = &self.desk else {
            self.respond(interaction, ephemeral(CHANNEL_MESSAGE, NO_DESK)).await;
            return;
        };
        let asked = desk.press(&press);
        tokio::pin!(asked);
        match tokio::time::timeout(ANSWER_WITHIN, &mut asked).await {
            Ok(answer) => self.answer_at_once(interaction, &answer).await,
            Err(_) => {
                tracing::info!(chat_id = %press.chat_id, "the desk is slow; the press is deferred");
                if self.respond(interaction, json!({ "type": DEFERRED_UPDATE })).await {
                    let answer = asked.await;
                    self.answer_later(interaction, &answer).await;
                }
            }
        }
    }

    /// The answer as the interaction's one response, plus the toast as a follow-up when the
    /// response is the message's edit.
    async fn answer_at_once(&self, interaction: &ComponentInteraction, answer: &PressAnswer) {
        match &answer.outcome {
            Some(line) => {
                let data = settled_message(&interaction.message.content, line);
                if self.respond(interaction, json!({ "type": UPDATE_MESSAGE, "data": data })).await {
                    self.toast_later(interaction, &answer.toast).await;
                }
            }
            None if !answer.toast.is_empty() => {
                self.respond(interaction, ephemeral(CHANNEL_MESSAGE, &answer.toast)).await;
            }
            None => {
                self.respond(interaction, json!({ "type": DEFERRED_UPDATE })).await;
            }
        }
    }

    /// The answer after a deferred update: the pressed message edited through the webhook,
    /// the toast as a follow-up.
    async fn answer_later(&self, interaction: &ComponentInteraction, answer: &PressAnswer) {
        if let Some(line) = &answer.outcome {
            let edit = settled_message(&interaction.message.content, line);
            let part = AnswerPart::EditOriginal(interaction.application_id);
            let call = || self.rest.answer_interaction(part, &interaction.token, &edit);
            if let Err(err) = with_retry(&RetryPolicy::DEFAULT, "edit a pressed message", &self.shutdown, call).await {
                tracing::warn!(%err, "cannot show a press's outcome under its message");
            }
        }
        self.toast_later(interaction, &answer.toast).await;
    }

    /// An ephemeral follow-up with the toast, if there is one.
    async fn toast_later(&self, interaction: &ComponentInteraction, toast: &str) {
        if toast.is_empty() {
            return;
        }
        let message = json!({ "content": toast, "flags": EPHEMERAL, "allowed_mentions": { "parse": [] } });
        let part = AnswerPart::FollowUp(interaction.application_id);
        let call = || self.rest.answer_interaction(part, &interaction.token, &message);
        if let Err(err) = with_retry(&RetryPolicy::DEFAULT, "answer a press", &self.shutdown, call).await {
            tracing::warn!(%err, "cannot tell the presser the answer to their press");
        }
    }

    /// The interaction's initial response, sent once: a retry could only meet "already
    /// acknowledged" or the 3 s limit. True if Discord took it.
    async fn respond(&self, interaction: &ComponentInteraction, response: Value) -> bool {
        let part = AnswerPart::Response(interaction.id);
        match self.rest.answer_interaction(part, &interaction.token, &response).await {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(%err, interaction_id = interaction.id.get(), "cannot answer a button press");
                false
            }
        }
    }
}

/// The press as the desk sees it: the chat the message is in, who pressed, the button's data.
/// In a guild Discord names the presser in `member.user`, which serenity copies into `user`.
fn press_of(interaction: &ComponentInteraction) -> Press {
    let user = &interaction.user;
    let name = user.global_name.clone().filter(|name| !name.trim().is_empty()).unwrap_or_else(|| user.name.clone());
    Press {
        channel: CHANNEL.to_owned(),
        chat_id: interaction.channel_id.get().to_string(),
        presser: Sender { id: user.id.get().to_string(), name, is_bot: user.bot },
        data: interaction.data.custom_id.clone(),
    }
}

/// Who pressed what: the verb and its code, or only that the data was not ours.
fn log_press(press: &Press) {
    let (presser, chat_id) = (&press.presser.id, &press.chat_id);
    match ButtonAction::parse(&press.data).and_then(|_| press.data.split_once(':')) {
        Some((verb, code)) => tracing::info!(%presser, %chat_id, verb, code, "Discord button pressed"),
        None => tracing::info!(%presser, %chat_id, len = press.data.len(), "Discord button with unknown data pressed"),
    }
}

/// A response of `kind` only the presser sees, saying `text`.
fn ephemeral(kind: u8, text: &str) -> Value {
    json!({ "type": kind, "data": { "content": text, "flags": EPHEMERAL, "allowed_mentions": { "parse": [] } } })
}

/// The pressed message settled: its text with the outcome under it, its buttons gone. The text
/// is shortened, if need be, so the outcome always fits.
fn settled_message(content: &str, line: &str) -> Value {
    let line_chars = line.chars().count() + 2;
    let room = MESSAGE_LIMIT.saturating_sub(line_chars);
    let mut text: String = content.trim_end().chars().take(room).collect();
    if text.chars().count() < content.trim_end().chars().count() {
        text.pop();
        text.push('…');
    }
    let content = if text.is_empty() { line.to_owned() } else { format!("{text}\n\n{line}") };
    let content: String = content.chars().take(MESSAGE_LIMIT).collect();
    json!({ "content": content, "components": [], "allowed_mentions": { "parse": [] } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settled_message_keeps_its_text_and_loses_its_buttons() {
        let settled = settled_message("Ann asks to pair.", "Approved by Bob.");
        assert_eq!(settled["content"], "Ann asks to pair.\n\nApproved by Bob.");
        assert_eq!(settled["components"], json!([]));
        let long = settled_message(&"x".repeat(MESSAGE_LIMIT), "Denied by Bob.");
        let content = long["content"].as_str().unwrap();
        assert_eq!(content.chars().count(), MESSAGE_LIMIT);
        assert!(content.ends_with("…\n\nDenied by Bob."), "{content}");
    }
}
