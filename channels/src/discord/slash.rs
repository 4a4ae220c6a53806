//! Slash commands: the chat commands registered as Discord application commands, and their
//! invocations answered.
//!
//! At the first READY (which names the application) the table is registered aside, never
//! delaying the gateway (see [`register`]). An invocation, a gateway `INTERACTION_CREATE` of
//! type 2, becomes the message its typed form would be (`/level Ann user`), from that person in
//! that channel, through the ingress's rules (DM policy and pairing, server and channel
//! allowlists; no mention needed): the worker answers it as it answers a typed command, with the
//! same access checks, and the reply is delivered through the interaction (see [`answers`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serenity::all::{ApplicationId, CommandDataOptionValue, CommandInteraction};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::DiscordSettings;
use super::inbound::{Incoming, author};
use super::ingress::{Ingress, Taken};
use super::rest::Rest;
use super::target::parse_id;

pub(crate) mod answers;
mod register;
mod table;

pub(crate) use self::answers::Answers;

/// Told, to the person alone, when a command is not answered where it was used (the reason is
/// logged); nothing reaches the bus.
const REFUSED: &str = "I don't take commands here.";
/// Told when the bus did not take a command.
const NOT_TAKEN: &str = "Something went wrong on my side; please try again.";

/// The slash-command side of the Discord channel.
pub(crate) struct SlashCommands {
    rest: Arc<Rest>,
    ingress: Arc<Ingress>,
    answers: Arc<Answers>,
    settings: Arc<DiscordSettings>,
    /// Set while a registration runs or after one succeeded: later READYs (reconnections)
    /// register again only after a failure.
    registering: Arc<AtomicBool>,
    shutdown: CancellationToken,
}

impl SlashCommands {
    pub(crate) fn new(
        rest: Arc<Rest>,
        ingress: Arc<Ingress>,
        answers: Arc<Answers>,
        settings: Arc<DiscordSettings>,
        shutdown: CancellationToken,
    ) -> Self {
        Self { rest, ingress, answers, settings, registering: Arc::new(AtomicBool::new(false)), shutdown }
    }

    /// Registers the command table on a task of its own, unless done (or under way) already.
    pub(crate) fn on_ready(&self, application: ApplicationId) {
        if self.registering.swap(true, Ordering::SeqCst) {
            return;
        }
        let (rest, registering, shutdown) =
            (Arc::clone(&self.rest), Arc::clone(&self.registering), self.shutdown.clone());
        let scope = self.settings.slash_commands;
        let guilds: Vec<u64> = self.settings.guilds.iter().filter_map(|id| parse_id(id.trim())).collect();
        tokio::spawn(async move {
            if !register::register(&rest, application, scope, &guilds, &shutdown).await {
                registering.store(false, Ordering::SeqCst);
            }
        });
    }

    /// Takes an invocation on and answers it in time (see the module docs).
    pub(crate) async fn handle(&self, interaction: &CommandInteraction) {
        let received = Instant::now();
        let name = interaction.data.name.as_str();
        let (user, channel_id) = (interaction.user.id.get(), interaction.channel_id.get());
        tracing::info!(command = name, user, channel_id, "Discord slash command");
        let personal = interaction.guild_id.is_some() && table::is_personal(name);
        if !self.answers.open(interaction, personal, received) {
            tracing::debug!(interaction_id = interaction.id.get(), "slash command seen before; ignored");
            return;
        }
        let id = interaction.id.get();
        let Some(text) = table::typed_text(name, &given(interaction)) else {
            tracing::info!(command = name, "a slash command switchboard does not have (any more)");
            self.say(id, &format!("I have no /{name} command. /help lists mine.")).await;
            return;
        };
        // Judged before any deferral, so that a refusal can still be shown to the person alone.
        match self.ingress.take_command(&incoming(interaction, text)).await {
            Ok(Taken::Forwarded) if table::is_slow(name) => self.answers.defer(id).await,
            Ok(Taken::Forwarded) => self.answers.defer_unless_answered(id),
            Ok(Taken::Answered(text)) => self.say(id, &text).await,
            Ok(Taken::Refused(reason)) => {
                tracing::debug!(command = name, user, channel_id, reason, "slash command not answered here");
                if !self.answers.say_privately(id, REFUSED).await {
                    tracing::warn!(interaction_id = id, "a slash command went unanswered");
                }
            }
            Err(err) => {
                tracing::warn!(%err, command = name, "the bus did not take a slash command");
                self.say(id, NOT_TAKEN).await;
            }
        }
    }

    /// Answers `id` with a short text of the channel's own.
    async fn say(&self, id: u64, text: &str) {
        if !self.answers.say(id, text, &[]).await {
            tracing::warn!(interaction_id = id, "a slash command went unanswered");
        }
    }
}

/// The options given, as (name, value) text.
fn given(interaction: &CommandInteraction) -> Vec<(String, String)> {
    let text = |value: &CommandDataOptionValue| match value {
        CommandDataOptionValue::String(text) => Some(text.clone()),
        CommandDataOptionValue::Integer(number) => Some(number.to_string()),
        CommandDataOptionValue::Boolean(flag) => Some(flag.to_string()),
        _ => None,
    };
    interaction.data.options.iter().filter_map(|option| Some((option.name.clone(), text(&option.value)?))).collect()
}

/// The invocation as the message its typed form would be; its id is the interaction's. It
/// addresses the bot by being its command.
fn incoming(interaction: &CommandInteraction, text: String) -> Incoming {
    let (channel_id, guild_id) = (interaction.channel_id.get(), interaction.guild_id.map(|id| id.get()));
    let typed = Incoming::text(channel_id, interaction.id.get(), guild_id, author(&interaction.user), text);
    Incoming { mentions_bot: true, ..typed }
}

/// The interaction a reply answers, when its inbound message was a slash command still open:
/// the inbound id is `discord:<channel>:<interaction id>` (interaction ids never collide with
/// message ids: both are Discord snowflakes).
pub(crate) fn answered_interaction(in_reply_to: Option<&str>, answers: &Answers) -> Option<u64> {
    let (_, id) = in_reply_to?.rsplit_once(':')?;
    parse_id(id).filter(|id| answers.is_open(*id))
}
