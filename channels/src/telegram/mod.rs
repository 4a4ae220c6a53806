//! The Telegram channel: long polling (or a webhook) in, Bot API messages out, on teloxide's
//! request types.
//!
//! Inbound, an update is turned into an [`InboundMessage`](crate::contract::InboundMessage)
//! only after the access rules let it through (DM policy, group policy, mention gating), and
//! Telegram is told it was received (the `getUpdates` offset, or the webhook's 200) only after
//! the bus has durably accepted it. Outbound, replies are rendered from Markdown to Telegram
//! HTML, split to Telegram's limit and sent in order, with typing and optional streaming
//! driven by the run events of the chat.

pub mod format;
pub mod live;
pub mod outbound;
mod retry;
mod split;
mod upload;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The channel name of this adapter on the bus.
pub const CHANNEL: &str = "telegram";

/// How updates reach the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receive {
    /// `getUpdates` long polling, waiting up to this long per call.
    Polling { timeout: Duration },
    /// Telegram posts to `public_url`; this process serves it on `listen` and checks `secret`
    /// in the `X-Telegram-Bot-Api-Secret-Token` header.
    Webhook { public_url: String, listen: SocketAddr, secret: String },
}

/// Who is answered in direct messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmPolicy {
    Pairing,
    Allowlist,
    Open,
    Disabled,
}

/// Which group messages are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPolicy {
    Mention,
    Open,
    Disabled,
}

/// Edit-in-place streaming of replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    pub private: bool,
    pub groups: bool,
    /// Minimum time between two edits of one message.
    pub edit_interval: Duration,
}

/// Everything the Telegram channel needs, resolved from `[channels.telegram]`.
#[derive(Clone)]
pub struct TelegramSettings {
    pub token: String,
    /// Base URL of the Bot API (`https://api.telegram.org` when `None`).
    pub api_url: Option<String>,
    pub receive: Receive,
    pub dm_policy: DmPolicy,
    /// Numeric user ids or usernames (without `@`, compared case-insensitively).
    pub allow_from: Vec<String>,
    /// Sender ids that are always answered in direct messages (`users.owners` on telegram).
    pub owners: Vec<String>,
    pub group_policy: GroupPolicy,
    /// Group chat ids answered in; empty = all.
    pub groups: Vec<String>,
    /// Senders answered in groups; empty = all.
    pub group_allow_from: Vec<String>,
    /// Unaddressed group messages kept per chat as context (0 = none).
    pub group_context_messages: usize,
    pub pairing_ttl: Duration,
    pub pairing_max_pending: usize,
    pub stream: StreamSettings,
    pub typing: bool,
    pub quote_in_groups: bool,
    /// Where inbound media are saved.
    pub media_dir: PathBuf,
    pub media_max_bytes: u64,
}

impl std::fmt::Debug for TelegramSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramSettings")
            .field("token", &"***")
            .field("api_url", &self.api_url)
            .field("dm_policy", &self.dm_policy)
            .field("group_policy", &self.group_policy)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl Default for TelegramSettings {
    fn default() -> Self {
        Self {
            token: String::new(),
            api_url: None,
            receive: Receive::Polling { timeout: Duration::from_secs(10) },
            dm_policy: DmPolicy::Pairing,
            allow_from: Vec::new(),
            owners: Vec::new(),
            group_policy: GroupPolicy::Mention,
            groups: Vec::new(),
            group_allow_from: Vec::new(),
            group_context_messages: 20,
            pairing_ttl: Duration::from_secs(3600),
            pairing_max_pending: 20,
            stream: StreamSettings { private: false, groups: false, edit_interval: Duration::from_millis(1500) },
            typing: true,
            quote_in_groups: true,
            media_dir: PathBuf::from("media/telegram"),
            media_max_bytes: 20 * 1024 * 1024,
        }
    }
}
