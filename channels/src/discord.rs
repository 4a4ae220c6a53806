//! The Discord channel: serenity's gateway client in, its REST client out.
//!
//! Inbound, a gateway `MESSAGE_CREATE` becomes an [`InboundMessage`](crate::contract::InboundMessage)
//! after the access rules let it through (DM policy, guild and channel allowlists, mention
//! gating). Outbound, replies keep their Markdown (Discord renders it), are split at 2000
//! characters without breaking code blocks, reference the message they answer in guild
//! channels (without pinging its author), go to the thread they were asked in, and show typing
//! (and optionally stream by editing) while a run is active.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serenity::all::{Http, HttpBuilder};
use thiserror::Error;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::directory::Directory;
use self::gateway::Inbound;
use self::ingress::Ingress;
use self::platform::DiscordPlatform;
use self::presses::Presses;
use self::rest::{Rest, RestError};
use self::slash::{Answers, SlashCommands};
use crate::bus::{Bus, BusError};
use crate::control::OwnerLink;
use crate::delivery::{DeliveryPolicy, LiveRuns, Sending};

mod components;
mod directory;
mod download;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gate;
mod gateway;
mod inbound;
mod ingress;
mod platform;
mod presses;
mod rest;
mod retry;
mod send;
mod slash;
mod target;
mod upload;

pub use crate::policy::{DmPolicy, StreamSettings};

/// The channel name of this adapter on the bus.
pub const CHANNEL: &str = "discord";

/// Discord's limit on a message's content, in characters.
pub const MESSAGE_LIMIT: usize = 2000;

/// Everything the Discord channel needs, resolved from `[channels.discord]`.
#[derive(Clone)]
pub struct DiscordSettings {
    pub token: String,
    /// Where REST calls go instead of `https://discord.com` (an HTTP proxy such as
    /// twilight-http-proxy, or a test's fake): it replaces the whole REST base, and the gateway
    /// URL is asked from it too. With a proxy, serenity's own rate limiter is off and the proxy
    /// owns the limits; 429s are then waited out by the adapter as long as they say.
    pub proxy_url: Option<String>,
    pub dm_policy: DmPolicy,
    /// User ids or usernames answered in DMs without pairing (and the only ones under `allowlist`).
    pub allow_from: Vec<String>,
    /// User ids always answered in DMs (`users.owners` on discord).
    pub owners: Vec<String>,
    /// Guild ids answered in; empty = every guild the bot is in.
    pub guilds: Vec<String>,
    /// Channel ids answered in; empty = every channel of an allowed guild. A thread inherits
    /// its parent channel's permission.
    pub channels: Vec<String>,
    /// Channels (or their threads) where every message is answered, mention or not.
    pub answer_all_in: Vec<String>,
    /// Whether a mention is needed in guild channels (default true).
    pub require_mention: bool,
    /// Whether messages from other bots are answered.
    pub allow_bots: bool,
    /// Guild messages that do not address the bot (where a mention is required), kept per
    /// channel or thread as context for the next one that does; 0 = none.
    pub group_context_messages: usize,
    pub pairing_ttl: Duration,
    pub pairing_max_pending: usize,
    pub stream: StreamSettings,
    pub typing: bool,
    /// Where inbound attachments are saved.
    pub media_dir: PathBuf,
    pub media_max_bytes: u64,
    /// Largest upload of one message outside boosted servers (see `upload`).
    pub upload_max_bytes: u64,
    /// Where the chat commands are registered as slash commands.
    pub slash_commands: SlashScope,
}

/// Where the chat commands are registered as Discord application (slash) commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlashScope {
    /// One global table: every server the bot is in, and its DMs.
    Global,
    /// In each server of `guilds`, plus a global table for DMs only.
    Guilds,
    /// None; those registered before are removed.
    Off,
}

impl std::fmt::Debug for DiscordSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordSettings")
            .field("token", &"***")
            .field("proxy_url", &self.proxy_url)
            .field("dm_policy", &self.dm_policy)
            .field("require_mention", &self.require_mention)
            .field("stream", &self.stream)
            .field("slash_commands", &self.slash_commands)
            .finish_non_exhaustive()
    }
}

impl Default for DiscordSettings {
    fn default() -> Self {
        Self {
            token: String::new(),
            proxy_url: None,
            dm_policy: DmPolicy::Pairing,
            allow_from: Vec::new(),
            owners: Vec::new(),
            guilds: Vec::new(),
            channels: Vec::new(),
            answer_all_in: Vec::new(),
            require_mention: true,
            allow_bots: false,
            group_context_messages: 20,
            pairing_ttl: Duration::from_secs(3600),
            pairing_max_pending: 20,
            stream: StreamSettings { private: false, groups: false, edit_interval: Duration::from_millis(1500) },
            typing: true,
            media_dir: PathBuf::from("media/discord"),
            media_max_bytes: 25 * 1024 * 1024,
            upload_max_bytes: upload::DEFAULT_MAX_BYTES,
            slash_commands: SlashScope::Global,
        }
    }
}

#[derive(Debug, Error)]
pub enum DiscordError {
    #[error(
        "Discord rejects the bot token: check channels.discord.token or DISCORD_BOT_TOKEN (the Bot page of your application in the developer portal)"
    )]
    InvalidToken,
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// A running Discord channel.
pub struct DiscordChannel {
    gateway: JoinHandle<()>,
    sending: Sending,
}

impl DiscordChannel {
    /// Checks the token, connects to the gateway (checking the token and asking for the gateway
    /// URL again in the background while Discord is unreachable) and delivers replies, until
    /// `shutdown` (receiving) and [`Self::stop`] (sending). Fails only for a rejected token.
    pub async fn start(
        bus: Arc<dyn Bus>,
        settings: DiscordSettings,
        owner: OwnerLink,
        delivery: DeliveryPolicy,
        shutdown: CancellationToken,
    ) -> Result<DiscordChannel, DiscordError> {
        let settings = Arc::new(settings);
        let rest = Arc::new(Rest::new(Arc::new(build_http(&settings))));
        let bot_id = check_token(&rest).await?;
        let directory = Arc::new(Directory::default());
        let answers = Arc::new(Answers::new(Arc::clone(&rest), shutdown.clone()));
        let platform = Arc::new(DiscordPlatform::new(
            Arc::clone(&rest),
            Arc::clone(&directory),
            Arc::clone(&answers),
            Arc::clone(&settings),
        ));
        let sending = Sending::start(&bus, platform, LiveRuns::new(), delivery).await?;
        let presses = Arc::new(Presses::new(Arc::clone(&rest), owner.desk.clone(), shutdown.clone()));
        let ingress = Ingress::new(Arc::clone(&rest), bus, Arc::clone(&settings), owner, directory, shutdown.clone());
        if let Some(id) = bot_id {
            ingress.set_bot_id(id);
        }
        let ingress = Arc::new(ingress);
        let slash = SlashCommands::new(
            Arc::clone(&rest),
            Arc::clone(&ingress),
            answers,
            Arc::clone(&settings),
            shutdown.clone(),
        );
        let inbound = Inbound { ingress, presses, slash: Arc::new(slash) };
        let gateway = tokio::spawn(gateway::run_gateway(settings, rest, inbound, bot_id.is_some(), shutdown));
        Ok(DiscordChannel { gateway, sending })
    }

    /// Waits for the gateway to close (after the shutdown token was cancelled), then stops
    /// sending. Call it after the worker drained.
    pub async fn stop(self) {
        self.sending.stop_after(self.gateway, CHANNEL).await;
    }
}

/// serenity's REST client. Through a proxy, serenity's rate limiter must be off (it would
/// ignore the proxy); the proxy owns the limits then.
pub(crate) fn build_http(settings: &DiscordSettings) -> Http {
    let builder = HttpBuilder::new(&settings.token);
    match &settings.proxy_url {
        Some(url) => builder.proxy(url.trim_end_matches('/')).ratelimiter_disabled(true).build(),
        None => builder.build(),
    }
}

/// One `GET /users/@me` at start: a rejected token stops the start with a clear error; an
/// unreachable Discord does not (the gateway task checks again, with a backoff), so an outage
/// never keeps the daemon down. Returns the bot's user id when known.
async fn check_token(rest: &Rest) -> Result<Option<u64>, DiscordError> {
    match identify_bot(rest).await {
        Ok(id) => Ok(Some(id)),
        Err(err) if err.status() == Some(401) => Err(DiscordError::InvalidToken),
        Err(err) => {
            tracing::warn!(%err, "cannot reach Discord to check the token; will keep trying (1 s, doubling to 60 s)");
            Ok(None)
        }
    }
}

/// `GET /users/@me`: the bot's user id.
async fn identify_bot(rest: &Rest) -> Result<u64, RestError> {
    let me = rest.current_user().await?;
    tracing::info!(bot = %me.name, "Discord bot identified");
    Ok(me.id.get())
}

/// Test entry points: the outbound side alone (the wiring `DiscordChannel::start` does),
/// so that its integration tests can drive it against the fake Discord. Not part of the API.
#[doc(hidden)]
pub mod testing {
    use std::sync::Arc;
    use std::time::Duration;

    use serenity::all::{ChannelId, MessageId};
    use serenity::http::Http;
    use tokio_util::sync::CancellationToken;

    use super::directory::{ChannelKind, Directory};
    use super::platform::DiscordPlatform;
    use super::rest::Rest;
    use super::slash::Answers;
    use super::target::Target;
    use super::{DiscordSettings, send};
    use crate::bus::{Deliveries, Events};
    use crate::delivery::LiveRuns;

    /// A channel the directory knows, as the inbound side would have recorded it.
    #[derive(Debug, Clone, Copy)]
    pub enum KnownChannel {
        Direct { channel: u64 },
        Guild { channel: u64, guild: u64 },
        Thread { channel: u64, parent: u64, guild: u64 },
    }

    /// Spawns `run_outbound` and `run_live` sharing one `LiveRuns` whose directory knows
    /// `channels`; typing repeats every `typing_interval`.
    pub fn spawn_outbound(
        http: Arc<Http>,
        settings: DiscordSettings,
        replies: Deliveries,
        events: Events,
        channels: &[KnownChannel],
        typing_interval: Duration,
        shutdown: CancellationToken,
    ) {
        let directory = Arc::new(Directory::default());
        for known in channels {
            let (channel, kind) = match *known {
                KnownChannel::Direct { channel } => (channel, ChannelKind::Direct),
                KnownChannel::Guild { channel, guild } => (channel, ChannelKind::Guild { guild_id: guild }),
                KnownChannel::Thread { channel, parent, guild } => {
                    (channel, ChannelKind::Thread { guild_id: guild, parent_id: parent })
                }
            };
            directory.insert(channel, kind);
        }
        let rest = Arc::new(Rest::new(http));
        let answers = Arc::new(Answers::new(Arc::clone(&rest), shutdown.clone()));
        let platform = Arc::new(DiscordPlatform::new(rest, directory, answers, Arc::new(settings)));
        let live = LiveRuns::new().with_typing_interval(typing_interval);
        let policy = super::DeliveryPolicy::default();
        // Runs until `shutdown`; the test does not wait for it to stop.
        drop(super::Sending::spawn(platform, live, replies, events, policy, shutdown));
    }

    /// `send_markdown` (the inbound side's way to say things, e.g. pairing codes) to `channel`,
    /// referencing `reply_to`, with nonces made from `key`; the ids of the messages sent, or the
    /// error's description.
    pub async fn send_markdown(
        http: Arc<Http>,
        channel: u64,
        reply_to: Option<u64>,
        key: &str,
        markdown: &str,
    ) -> Result<Vec<u64>, String> {
        let target =
            Target { channel: ChannelId::new(channel), reply_to: reply_to.map(MessageId::new), interaction: None };
        let rest = Rest::new(http);
        let sent = send::send_markdown(&rest, &target, key, markdown, &CancellationToken::new()).await;
        sent.map(|ids| ids.into_iter().map(MessageId::get).collect()).map_err(|err| err.to_string())
    }
}
