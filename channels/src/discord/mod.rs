//! The Discord channel: serenity's gateway client in, its REST client out.
//!
//! Inbound, a gateway `MESSAGE_CREATE` becomes an [`InboundMessage`](crate::contract::InboundMessage)
//! after the access rules let it through (DM policy, guild and channel allowlists, mention
//! gating). Outbound, replies keep their Markdown (Discord renders it), are split at 2000
//! characters without breaking code blocks, reference the message they answer in guild
//! channels (without pinging its author), go to the thread they were asked in, and show typing
//! (and optionally stream by editing) while a run is active.

use std::path::PathBuf;
use std::time::Duration;

mod directory;

pub use crate::policy::{DmPolicy, StreamSettings};

/// The channel name of this adapter on the bus.
pub const CHANNEL: &str = "discord";

/// Discord's limit on a message's content, in characters.
pub const MESSAGE_LIMIT: usize = 2000;

/// Everything the Discord channel needs, resolved from `[channels.discord]`.
#[derive(Clone)]
pub struct DiscordSettings {
    pub token: String,
    /// Where REST calls go instead of discord.com (an HTTP proxy such as twilight-http-proxy,
    /// or a test's fake). With a proxy, serenity's own rate limiter is off and the proxy owns
    /// the limits; 429s are then waited out by the adapter.
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
    pub pairing_ttl: Duration,
    pub pairing_max_pending: usize,
    pub stream: StreamSettings,
    pub typing: bool,
    /// Where inbound attachments are saved.
    pub media_dir: PathBuf,
    pub media_max_bytes: u64,
}

impl std::fmt::Debug for DiscordSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordSettings")
            .field("token", &"***")
            .field("proxy_url", &self.proxy_url)
            .field("dm_policy", &self.dm_policy)
            .field("require_mention", &self.require_mention)
            .field("stream", &self.stream)
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
            pairing_ttl: Duration::from_secs(3600),
            pairing_max_pending: 20,
            stream: StreamSettings { private: false, groups: false, edit_interval: Duration::from_millis(1500) },
            typing: true,
            media_dir: PathBuf::from("media/discord"),
            media_max_bytes: 25 * 1024 * 1024,
        }
    }
}
