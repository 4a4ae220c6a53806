//! One gateway message in: classify, resolve where it was posted, decide who is answered,
//! answer pairing codes locally, and put the rest on the bus.
//!
//! Discord's gateway has no offset to hold back: a message is retried here while the bus
//! refuses it, and lost if the process dies before the bus took it (serenity does not
//! redeliver a dispatch it already handed over).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Map, Value};
use serenity::all::{Channel, ChannelId, ChannelType, GuildId, Message, MessageId, UserId};
use tokio_util::sync::CancellationToken;

use super::directory::{ChannelKind, Directory};
use super::download::fetch_attachments;
use super::gate::{Place, Verdict, judge};
use super::inbound::{Incoming, classify};
use super::rest::Rest;
use super::send::send_markdown;
use super::target::Target;
use super::{CHANNEL, DiscordSettings};
use crate::bus::{Bus, BusError, BusExt};
use crate::contract::{InboundMessage, Media, Sender};
use crate::control::OwnerLink;
use crate::delivery::group_context::GroupContext;
use crate::delivery::pairing::{PairingCheck, Stranger};
use crate::pairing::PairingAnswer;

/// How long the roles the bot holds in a guild are trusted before they are looked up again.
const BOT_ROLES_TTL: Duration = Duration::from_secs(600);
/// A slash command's answer to a stranger who was given a pairing code a moment ago.
const PAIRING_PENDING: &str = "Your request to talk to me is waiting for the owner's approval.";
/// Backoff while the bus refuses a message: doubles up to the cap.
const BUS_BACKOFF_START: Duration = Duration::from_millis(500);
const BUS_BACKOFF_CAP: Duration = Duration::from_secs(30);

/// The inbound half of the Discord channel.
pub(crate) struct Ingress {
    rest: Arc<Rest>,
    bus: Arc<dyn Bus>,
    settings: Arc<DiscordSettings>,
    pairing: PairingCheck,
    directory: Arc<Directory>,
    downloads: reqwest::Client,
    /// The bot's user id: from `GET /users/@me` at start, else from the gateway's READY
    /// (which always comes before any message). 0 = not known yet.
    bot_id: AtomicU64,
    bot_roles: tokio::sync::Mutex<HashMap<u64, (Instant, Vec<u64>)>>,
    /// Held across a channel lookup (see [`Self::place`]).
    channel_lookup: tokio::sync::Mutex<()>,
    /// Recent guild messages that did not address the bot, for the next one that does.
    context: Mutex<GroupContext>,
    shutdown: CancellationToken,
}

impl Ingress {
    pub fn new(
        rest: Arc<Rest>,
        bus: Arc<dyn Bus>,
        settings: Arc<DiscordSettings>,
        owner: OwnerLink,
        directory: Arc<Directory>,
        shutdown: CancellationToken,
    ) -> Self {
        let pairing = PairingCheck::new(CHANNEL, owner, settings.pairing_ttl, settings.pairing_max_pending);
        let context = Mutex::new(GroupContext::new(settings.group_context_messages));
        Self {
            rest,
            bus,
            settings,
            pairing,
            directory,
            downloads: reqwest::Client::new(),
            bot_id: AtomicU64::new(0),
            bot_roles: tokio::sync::Mutex::new(HashMap::new()),
            channel_lookup: tokio::sync::Mutex::new(()),
            context,
            shutdown,
        }
    }

    pub fn set_bot_id(&self, id: u64) {
        self.bot_id.store(id, Ordering::Relaxed);
    }

    fn bot_id(&self) -> u64 {
        self.bot_id.load(Ordering::Relaxed)
    }

    /// Hands the message over, retrying while the bus refuses it, until shutdown.
    pub async fn handle_until_accepted(&self, message: &Message) {
        let mut backoff = BUS_BACKOFF_START;
        loop {
            let Err(err) = self.handle(message).await else { return };
            tracing::warn!(message_id = message.id.get(), %err, wait = ?backoff, "the bus did not take a Discord message; retrying");
            let slept = tokio::select! {
                _ = self.shutdown.cancelled() => false,
                _ = tokio::time::sleep(backoff) => true,
            };
            if !slept {
                tracing::error!(
                    message_id = message.id.get(),
                    channel_id = message.channel_id.get(),
                    "shutting down: a Discord message the bus never took is lost"
                );
                return;
            }
            backoff = (backoff * 2).min(BUS_BACKOFF_CAP);
        }
    }

    /// Handles one message. `Err` means the bus did not take it.
    async fn handle(&self, message: &Message) -> Result<(), BusError> {
        let msg = match classify(message, self.bot_id()) {
            Ok(msg) => msg,
            Err(skip) => {
                tracing::debug!(message_id = message.id.get(), ?skip, "discord message skipped");
                return Ok(());
            }
        };
        let place = self.place(&msg).await;
        match judge(&msg, place, &self.settings) {
            Verdict::Forward => self.forward(&msg, place).await,
            Verdict::ForwardIfAddressed if self.addressed(&msg).await => self.forward(&msg, place).await,
            Verdict::ForwardIfAddressed => {
                tracing::debug!(
                    channel_id = msg.channel_id,
                    "discord message does not address the bot; kept as context"
                );
                let at =
                    chrono::DateTime::from_timestamp(message.timestamp.unix_timestamp(), 0).unwrap_or_else(Utc::now);
                self.lock_context().remember(session_place(place), &msg.author.name, &msg.text, at);
                Ok(())
            }
            Verdict::CheckPairing => self.check_pairing(&msg, place).await,
            Verdict::Ignore(reason) => {
                tracing::debug!(channel_id = msg.channel_id, sender = msg.author.id, reason, "discord message ignored");
                Ok(())
            }
        }
    }

    /// Where the message was posted. A guild message does not say whether its channel is a
    /// thread: the channel is looked up once and remembered in the directory.
    async fn place(&self, msg: &Incoming) -> Place {
        let channel_id = msg.channel_id;
        let Some(guild_id) = msg.guild_id else {
            self.directory.insert_direct(msg.author.id, channel_id);
            return Place::Direct { channel_id };
        };
        let kind = match self.directory.get(channel_id) {
            Some(kind) => kind,
            None => {
                // One lookup at a time, in arrival order: messages of a new channel arriving
                // together ask Discord once and go on in the order they came (the chatter
                // before a mention is kept as its context before the mention is forwarded).
                let _lookup = self.channel_lookup.lock().await;
                match self.directory.get(channel_id) {
                    Some(kind) => kind,
                    None => self.look_up_channel(guild_id, channel_id).await,
                }
            }
        };
        match kind {
            ChannelKind::Thread { guild_id, parent_id } => Place::Thread { guild_id, parent_id, thread_id: channel_id },
            _ => Place::Guild { guild_id, channel_id },
        }
    }

    async fn look_up_channel(&self, guild_id: u64, channel_id: u64) -> ChannelKind {
        match self.rest.channel(ChannelId::new(channel_id)).await {
            Ok(Channel::Guild(channel)) => {
                let is_thread = matches!(
                    channel.kind,
                    ChannelType::PublicThread | ChannelType::PrivateThread | ChannelType::NewsThread
                );
                let kind = match channel.parent_id {
                    Some(parent) if is_thread => ChannelKind::Thread { guild_id, parent_id: parent.get() },
                    _ => ChannelKind::Guild { guild_id },
                };
                self.directory.insert(channel_id, kind);
                kind
            }
            Ok(_) => ChannelKind::Guild { guild_id },
            // Not remembered: the next message tries again.
            Err(err) => {
                tracing::debug!(channel_id, %err, "cannot look up a Discord channel; treating it as a plain channel");
                ChannelKind::Guild { guild_id }
            }
        }
    }

    /// A mention of the bot or of a role it holds, or a reply to one of its messages.
    async fn addressed(&self, msg: &Incoming) -> bool {
        if msg.mentions_bot || msg.replies_to_bot {
            return true;
        }
        let Some(guild_id) = msg.guild_id.filter(|_| !msg.mention_roles.is_empty()) else { return false };
        let roles = self.bot_roles(guild_id).await;
        msg.mention_roles.iter().any(|role| roles.contains(role))
    }

    /// The roles the bot holds in a guild, cached for [`BOT_ROLES_TTL`]. The async lock is held
    /// across the lookup, so messages handled at the same time ask Discord once.
    async fn bot_roles(&self, guild_id: u64) -> Vec<u64> {
        let mut cache = self.bot_roles.lock().await;
        if let Some((at, roles)) = cache.get(&guild_id)
            && at.elapsed() < BOT_ROLES_TTL
        {
            return roles.clone();
        }
        match self.rest.member(GuildId::new(guild_id), UserId::new(self.bot_id().max(1))).await {
            Ok(member) => {
                let roles: Vec<u64> = member.roles.iter().map(|role| role.get()).collect();
                cache.insert(guild_id, (Instant::now(), roles.clone()));
                roles
            }
            Err(err) => {
                tracing::warn!(guild_id, %err, "cannot look up the bot's roles; role mentions are not seen");
                Vec::new()
            }
        }
    }

    async fn forward(&self, msg: &Incoming, place: Place) -> Result<(), BusError> {
        let mentioned = msg.is_direct() || self.addressed(msg).await;
        let inbound = self.to_inbound(msg, place, mentioned).await;
        self.bus.publish_inbound(&inbound).await?;
        // Only now: a message the bus did not take keeps its context for the retry.
        if takes_context(msg) {
            self.lock_context().clear(&session_place(place));
        }
        tracing::debug!(id = %inbound.id, "discord message accepted");
        Ok(())
    }

    async fn to_inbound(&self, msg: &Incoming, place: Place, mentioned: bool) -> InboundMessage {
        let (media, markers) =
            fetch_attachments(&self.downloads, msg, &self.settings.media_dir, self.settings.media_max_bytes).await;
        let mut content = msg.text.clone();
        for marker in markers {
            if !content.is_empty() {
                content.push('\n');
            }
            content.push_str(&marker);
        }
        if takes_context(msg) {
            content = self.lock_context().before(&session_place(place), content, Utc::now());
        }
        inbound_message(msg, place, mentioned, content, media)
    }

    async fn check_pairing(&self, msg: &Incoming, place: Place) -> Result<(), BusError> {
        match self.pairing_of(msg).await {
            PairingAnswer::Approved => return self.forward(msg, place).await,
            PairingAnswer::Reply(text) => self.answer_locally(msg, &text).await,
            PairingAnswer::Silent => {}
        }
        Ok(())
    }

    /// Asks the pairing store about the author of a DM under the pairing policy.
    async fn pairing_of(&self, msg: &Incoming) -> PairingAnswer {
        let sender = Sender { id: msg.author.id.to_string(), name: msg.author.name.clone(), is_bot: false };
        let chat_id = msg.channel_id.to_string();
        let username = Some(msg.author.username.as_str()).filter(|name| !name.is_empty());
        let stranger = Stranger { sender: &sender, username, chat_id: &chat_id, text: &msg.text };
        self.pairing.check(stranger).await
    }

    /// A slash command, given as the message its typed form would be (its id the
    /// interaction's), under the same rules as a message: on the bus, answered here, or refused.
    /// A command addresses the bot by itself, so no mention is needed.
    pub(crate) async fn take_command(&self, msg: &Incoming) -> Result<Taken, BusError> {
        let place = self.place(msg).await;
        match judge(msg, place, &self.settings) {
            Verdict::Forward | Verdict::ForwardIfAddressed => {}
            Verdict::CheckPairing => match self.pairing_of(msg).await {
                PairingAnswer::Approved => {}
                PairingAnswer::Reply(text) => return Ok(Taken::Answered(text)),
                // The code was given a moment ago; it is not repeated.
                PairingAnswer::Silent => return Ok(Taken::Answered(PAIRING_PENDING.to_owned())),
            },
            Verdict::Ignore(reason) => return Ok(Taken::Refused(reason)),
        }
        let mut inbound = self.to_inbound(msg, place, true).await;
        // No message of that id exists for the reply to reference.
        inbound.metadata.remove(crate::contract::MESSAGE_ID);
        self.bus.publish_inbound(&inbound).await?;
        tracing::debug!(id = %inbound.id, "discord slash command accepted");
        Ok(Taken::Forwarded)
    }

    /// Sends a short answer that needs no agent. Best effort: a failure is logged.
    async fn answer_locally(&self, msg: &Incoming, text: &str) {
        let reply_to = (!msg.is_direct()).then(|| MessageId::new(msg.message_id));
        let target = Target { channel: ChannelId::new(msg.channel_id), reply_to, interaction: None };
        let key = format!("{CHANNEL}:{}:{}", msg.channel_id, msg.message_id);
        if let Err(err) = send_markdown(&self.rest, &target, &key, text, &self.shutdown).await {
            tracing::warn!(channel_id = msg.channel_id, %err, "cannot send a local answer");
        }
    }

    fn lock_context(&self) -> std::sync::MutexGuard<'_, GroupContext> {
        self.context.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What became of a slash command at the ingress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Taken {
    /// On the bus: the worker answers it.
    Forwarded,
    /// Answered without the worker (pairing).
    Answered(String),
    /// Not answered here, for this reason (logged, not shown).
    Refused(&'static str),
}

/// Whether recent unaddressed messages go before this one: in guild channels, unless it is a
/// command (which must stay first in the text, where the worker looks for it).
fn takes_context(msg: &Incoming) -> bool {
    !msg.is_direct() && !msg.text.trim_start().starts_with('/')
}

/// The conversation a message belongs to, as its session key (the group context's key).
fn session_place(place: Place) -> String {
    let (chat_id, thread_id) = chat_and_thread(place);
    crate::contract::session_key(CHANNEL, &chat_id.to_string(), thread_id.map(|id| id.to_string()).as_deref())
}

/// The bus's chat id and thread id of a place: a thread is a thread of its parent channel.
fn chat_and_thread(place: Place) -> (u64, Option<u64>) {
    match place {
        Place::Thread { parent_id, thread_id, .. } => (parent_id, Some(thread_id)),
        Place::Direct { channel_id } | Place::Guild { channel_id, .. } => (channel_id, None),
    }
}

/// The bus message for a classified message posted at `place`, with its content (text and
/// attachment markers) and downloaded media already put together.
pub(crate) fn inbound_message(
    msg: &Incoming,
    place: Place,
    mentioned: bool,
    content: String,
    media: Vec<Media>,
) -> InboundMessage {
    let (chat_id, thread_id) = chat_and_thread(place);
    InboundMessage {
        id: format!("{CHANNEL}:{}:{}", msg.channel_id, msg.message_id),
        channel: CHANNEL.to_owned(),
        chat_id: chat_id.to_string(),
        sender: Sender { id: msg.author.id.to_string(), name: msg.author.name.clone(), is_bot: msg.author.is_bot },
        content,
        media,
        reply_to: msg.reply_to.map(|id| id.to_string()),
        replied_to: msg.replied_to.clone(),
        thread_id: thread_id.map(|id| id.to_string()),
        is_group: !msg.is_direct(),
        mentioned,
        received_at: Utc::now(),
        metadata: metadata(msg),
        ..InboundMessage::default()
    }
}

fn metadata(msg: &Incoming) -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert(crate::contract::MESSAGE_ID.into(), Value::String(msg.message_id.to_string()));
    metadata.insert("channel_id".into(), Value::String(msg.channel_id.to_string()));
    if let Some(guild_id) = msg.guild_id {
        metadata.insert("guild_id".into(), Value::String(guild_id.to_string()));
    }
    metadata.insert("username".into(), Value::String(msg.author.username.clone()));
    if msg.burst {
        metadata.insert(crate::contract::BURST.into(), Value::Bool(true));
    }
    metadata
}
