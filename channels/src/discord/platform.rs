//! Discord's side of the delivery core: REST calls for replies, drafts and typing, and the
//! decisions only Discord can make (channel ids, threads, references, nonces, which errors are
//! final).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serenity::all::{ChannelId, EditMessage, MessageId, UserId};
use tokio_util::sync::CancellationToken;

use super::directory::{ChannelKind, Directory};
use super::rest::Rest;
use super::retry::{RetryPolicy, SendError, once, with_retry};
use super::send::{Step, edit_into_step, plan_steps, send_part};
use super::slash::{Answers, answered_interaction};
use super::target::{AddressError, Target, allowed_mentions, nonce, parse_id};
use super::{CHANNEL, DiscordSettings, MESSAGE_LIMIT, components, upload};
use crate::contract::{OutboundMessage, RunEvent};
use crate::delivery::{DraftLimits, Platform, Unreachable};

/// The REST client, the channel directory, the open slash commands and the settings, as the
/// delivery core uses them.
pub(crate) struct DiscordPlatform {
    rest: Arc<Rest>,
    directory: Arc<Directory>,
    answers: Arc<Answers>,
    settings: Arc<DiscordSettings>,
    retry: RetryPolicy,
    limits: upload::ServerLimits,
}

impl DiscordPlatform {
    pub(crate) fn new(
        rest: Arc<Rest>,
        directory: Arc<Directory>,
        answers: Arc<Answers>,
        settings: Arc<DiscordSettings>,
    ) -> Self {
        Self { rest, directory, answers, settings, retry: RetryPolicy::DEFAULT, limits: Default::default() }
    }

    #[cfg(test)]
    fn with_retry(self, retry: RetryPolicy) -> Self {
        Self { retry, ..self }
    }
}

impl DiscordPlatform {
    /// The server of the channel (or thread) `msg` goes to, when the channel is known.
    fn guild_of(&self, msg: &OutboundMessage) -> Option<u64> {
        let channel = msg.thread_id.as_deref().and_then(parse_id).or_else(|| parse_id(&msg.chat_id))?;
        match self.directory.get(channel)? {
            ChannelKind::Guild { guild_id } | ChannelKind::Thread { guild_id, .. } => Some(guild_id),
            ChannelKind::Direct => None,
        }
    }
}

#[async_trait]
impl Platform for DiscordPlatform {
    const NAME: &'static str = "Discord";
    const CHANNEL: &'static str = CHANNEL;
    /// Discord shows typing for about 10 s.
    const TYPING_INTERVAL: Duration = Duration::from_secs(8);
    /// Enough for the visible 2000 characters.
    const DRAFT: DraftLimits = DraftLimits { kept_bytes: 4 * MESSAGE_LIMIT };
    type Target = Target;
    type MessageId = MessageId;
    type Step = Step;
    type Error = SendError;
    type AddressError = AddressError;

    /// A reply to a slash command goes through its interaction while that is open.
    fn target_of(&self, msg: &OutboundMessage) -> Result<Target, AddressError> {
        let interaction = answered_interaction(msg.in_reply_to.as_deref(), &self.answers);
        Ok(Target { interaction, ..Target::of(msg, &self.directory)? })
    }

    /// The person's DM channel: known from a message they sent or an earlier opening, else
    /// opened now (Discord returns the same channel every time) and remembered.
    async fn person_target(
        &self,
        msg: &OutboundMessage,
        shutdown: &CancellationToken,
    ) -> Result<Target, Unreachable<AddressError, SendError>> {
        let user =
            parse_id(&msg.chat_id).ok_or_else(|| Unreachable::Address(AddressError::Person(msg.chat_id.clone())))?;
        let channel = match self.directory.direct_channel_of(user) {
            Some(channel) => ChannelId::new(channel),
            None => {
                let open = || self.rest.open_direct(UserId::new(user));
                let channel =
                    with_retry(&self.retry, "open a DM", shutdown, open).await.map_err(Unreachable::Failed)?;
                tracing::debug!(user, channel = channel.get(), "opened a Discord DM channel");
                self.directory.insert_direct(user, channel.get());
                channel
            }
        };
        Ok(Target { channel, reply_to: None, interaction: None })
    }

    /// Ordered per Discord channel: a thread is its own channel.
    fn queue_key(&self, msg: &OutboundMessage) -> String {
        msg.thread_id.clone().unwrap_or_else(|| msg.chat_id.clone())
    }

    async fn plan(&self, msg: &OutboundMessage) -> Vec<Step> {
        let largest = msg.media.iter().filter_map(|media| media.size).max().unwrap_or(0);
        let base = self.settings.upload_max_bytes;
        let limit = self.limits.limit(&self.rest, self.guild_of(msg), base, largest).await;
        plan_steps(&msg.content, upload::prepare(&msg.media, limit).await, components::action_rows(&msg.buttons))
    }

    /// Retries carry the same nonce, made from the message id and the step, so a create whose
    /// answer was lost is not posted twice, not even by a redelivery. An answer to a slash
    /// command goes through its interaction (files excepted), else into the channel.
    async fn send_step(
        &self,
        target: &Target,
        id: &str,
        index: usize,
        step: &Step,
        shutdown: &CancellationToken,
    ) -> Result<(), SendError> {
        if let Some(interaction) = target.interaction.filter(|_| step.files.is_empty())
            && self.answers.say(interaction, &step.text, &step.buttons).await
        {
            return Ok(());
        }
        send_part(&self.rest, &self.retry, target, step, &nonce(id, index), index == 0, shutdown).await.map(drop)
    }

    /// Files are not added by editing.
    fn can_edit_into(&self, step: &Step) -> bool {
        step.files.is_empty()
    }

    async fn edit_into(
        &self,
        target: &Target,
        message: &MessageId,
        step: &Step,
        shutdown: &CancellationToken,
    ) -> Result<(), SendError> {
        edit_into_step(&self.rest, &self.retry, target.channel, *message, step, shutdown).await
    }

    async fn delete(&self, target: &Target, message: &MessageId) -> Result<(), SendError> {
        once("delete message", self.rest.delete_message(target.channel, *message)).await
    }

    fn is_final(&self, err: &SendError) -> bool {
        err.is_final()
    }

    fn describe(&self, err: &SendError) -> String {
        err.to_string()
    }

    /// The run's thread if it is in one, else the chat, referencing the triggering message as
    /// the reply would (in guild channels).
    fn live_target(&self, event: &RunEvent) -> Option<Target> {
        let channel = event.thread_id.as_deref().and_then(parse_id).or_else(|| parse_id(&event.chat_id))?;
        let trigger = event.reply_to.as_deref().and_then(parse_id).filter(|_| !self.directory.is_direct(channel));
        Some(Target { channel: ChannelId::new(channel), reply_to: trigger.map(MessageId::new), interaction: None })
    }

    fn typing_enabled(&self) -> bool {
        self.settings.typing
    }

    fn streams_in(&self, target: &Target) -> bool {
        let stream = &self.settings.stream;
        if self.directory.is_direct(target.channel.get()) { stream.private } else { stream.groups }
    }

    fn edit_interval(&self) -> Duration {
        self.settings.stream.edit_interval
    }

    async fn typing(&self, target: &Target) -> Result<(), SendError> {
        once("typing", self.rest.typing(target.channel)).await
    }

    /// The draft stops growing at the message limit; the final reply shows everything.
    fn visible_draft(&self, text: &str) -> String {
        text.chars().take(MESSAGE_LIMIT).collect()
    }

    async fn post_draft(&self, target: &Target, text: &str) -> Result<MessageId, SendError> {
        once("create message", self.rest.create_message(target.channel, &target.message(text, true), &[])).await
    }

    /// A 429 stops streaming too: more edits would only deepen the rate limit.
    async fn edit_draft(&self, target: &Target, message: &MessageId, text: &str) -> Result<(), SendError> {
        let edit = EditMessage::new().content(text).allowed_mentions(allowed_mentions());
        once("edit message", self.rest.edit_message(target.channel, *message, &edit)).await
    }
}

#[cfg(test)]
mod tests;
