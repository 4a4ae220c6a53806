//! The Telegram channel: long polling (or a webhook) in, Bot API messages out, on teloxide's
//! request types.
//!
//! Inbound, an update is turned into an [`InboundMessage`](crate::contract::InboundMessage)
//! only after the access rules let it through (DM policy, group policy, mention gating), and
//! Telegram is told it was received (the `getUpdates` offset, or the webhook's 200) only after
//! the bus has durably accepted it. Outbound, replies are rendered from Markdown to Telegram
//! HTML, split to Telegram's limit and sent in order, with typing and optional streaming
//! driven by the run events of the chat.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use teloxide::payloads::SetMyCommandsSetters;
use teloxide::prelude::Requester;
use teloxide::types::{AllowedUpdate, BotCommand, BotCommandScope, ChatId, Recipient};
use teloxide::{ApiError, Bot, RequestError};
use thiserror::Error;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::inbound::{BotIdentity, START};
use self::ingress::Ingress;
use self::poll::sleep_or_cancel;
use self::retry::describe;
use crate::bus::{Bus, BusError};
use crate::contract::commands;
use crate::control::OwnerLink;
use crate::delivery::{DeliveryPolicy, Sending};

pub use crate::policy::{DmPolicy, GroupPolicy, StreamSettings};

/// The channel name of this adapter on the bus.
pub const CHANNEL: &str = "telegram";

/// How long a button press waits for the control desk before it is answered "Working on it…"
/// (Telegram refuses answers after about 15 s; the outcome is still shown when it comes).
pub const PRESS_ANSWER_WITHIN: Duration = Duration::from_secs(8);

/// The updates asked for, polling or by webhook: new messages and button presses. Edits,
/// reactions and the rest are not answered.
const ALLOWED_UPDATES: [AllowedUpdate; 2] = [AllowedUpdate::Message, AllowedUpdate::CallbackQuery];

/// How updates reach the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receive {
    /// `getUpdates` long polling, waiting up to this long per call.
    Polling { timeout: Duration },
    /// Telegram posts to `public_url`; this process serves it on `listen` and checks `secret`
    /// in the `X-Telegram-Bot-Api-Secret-Token` header.
    Webhook { public_url: String, listen: SocketAddr, secret: String },
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
    /// See [`PRESS_ANSWER_WITHIN`], the default.
    pub press_answer_within: Duration,
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
            press_answer_within: PRESS_ANSWER_WITHIN,
        }
    }
}
mod buttons;
mod download;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gate;
mod inbound;
mod ingress;
mod platform;
mod poll;
mod press;
mod replied;
mod retry;
mod send;
mod split;
mod target;
mod upload;
mod webhook;

pub mod format;
pub mod live;
pub mod outbound;

#[derive(Debug, Error)]
pub enum TelegramError {
    #[error("Telegram rejects the bot token: check channels.telegram.token or TELEGRAM_BOT_TOKEN (from @BotFather)")]
    InvalidToken,
    #[error("{0:?} is not a URL")]
    BadUrl(String),
    #[error("cannot listen for the Telegram webhook on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// A running Telegram channel.
pub struct TelegramChannel {
    /// Where the webhook server listens, in webhook mode.
    pub webhook_addr: Option<SocketAddr>,
    receiving: JoinHandle<()>,
    sending: Sending,
}

impl TelegramChannel {
    /// Checks the token, then receives updates until `shutdown` is cancelled and delivers
    /// replies until [`TelegramChannel::stop`].
    pub async fn start(
        bus: Arc<dyn Bus>,
        settings: TelegramSettings,
        owner: OwnerLink,
        delivery: DeliveryPolicy,
        shutdown: CancellationToken,
    ) -> Result<TelegramChannel, TelegramError> {
        let settings = Arc::new(settings);
        let bot = build_bot(&settings)?;
        let me = first_identity(&bot).await?;
        let platform = Arc::new(platform::TelegramPlatform::new(bot.clone(), Arc::clone(&settings)));
        let sending = Sending::start(&bus, platform, live::LiveRuns::new(), delivery).await?;
        let pending = PendingIngress { bot, bus, settings: Arc::clone(&settings), owner, me };
        let (webhook_addr, receiving) = match settings.receive.clone() {
            Receive::Polling { timeout } => (None, tokio::spawn(receive_by_polling(pending, timeout, shutdown))),
            Receive::Webhook { public_url, listen, secret } => {
                let (addr, serve) = webhook::start_webhook(pending, public_url, listen, secret, shutdown).await?;
                (Some(addr), tokio::spawn(serve))
            }
        };
        Ok(TelegramChannel { webhook_addr, receiving, sending })
    }

    /// Waits for receiving to end, then stops delivering. Call it after the shutdown token was
    /// cancelled and, in one process, after the worker drained, so finished turns are sent.
    pub async fn stop(self) {
        self.sending.stop_after(self.receiving, CHANNEL).await;
    }
}

fn build_bot(settings: &TelegramSettings) -> Result<Bot, TelegramError> {
    let bot = Bot::new(&settings.token);
    match &settings.api_url {
        Some(url) => {
            let parsed = reqwest::Url::parse(url).map_err(|_| TelegramError::BadUrl(url.clone()))?;
            Ok(bot.set_api_url(parsed))
        }
        None => Ok(bot),
    }
}

/// One `getMe` at start: a rejected token stops the start with a clear error; an unreachable
/// Telegram does not (the receiver keeps trying), so an outage never keeps the daemon down.
async fn first_identity(bot: &Bot) -> Result<Option<BotIdentity>, TelegramError> {
    match bot.get_me().await {
        Ok(me) => {
            let identity = BotIdentity { id: me.user.id, username: me.user.username.clone().unwrap_or_default() };
            tracing::info!(username = %identity.username, "Telegram bot identified");
            Ok(Some(identity))
        }
        Err(RequestError::Api(ApiError::InvalidToken)) => Err(TelegramError::InvalidToken),
        Err(err) => {
            tracing::warn!(err = %describe(&err), "cannot reach Telegram; will keep trying");
            Ok(None)
        }
    }
}

/// `getMe` until it works; `None` when shut down first.
async fn identity_until_known(bot: &Bot, shutdown: &CancellationToken) -> Option<BotIdentity> {
    let mut wait = Duration::from_secs(1);
    loop {
        if !sleep_or_cancel(wait, shutdown).await {
            return None;
        }
        if let Ok(Some(me)) = first_identity(bot).await {
            return Some(me);
        }
        wait = (wait * 2).min(Duration::from_secs(60));
    }
}

/// What the inbound side needs before it can run: the bot's identity may still be unknown
/// when Telegram was unreachable at start.
pub(crate) struct PendingIngress {
    bot: Bot,
    bus: Arc<dyn Bus>,
    settings: Arc<TelegramSettings>,
    owner: OwnerLink,
    me: Option<BotIdentity>,
}

impl PendingIngress {
    /// Learns the identity (retrying until Telegram answers), registers the command menu and
    /// returns the ingress; `None` when shut down first.
    pub(crate) async fn ready(self, shutdown: &CancellationToken) -> Option<Arc<Ingress>> {
        let me = match self.me {
            Some(me) => me,
            None => identity_until_known(&self.bot, shutdown).await?,
        };
        // Best effort and aside: the first poll does not wait for the menu.
        tokio::spawn(register_commands(self.bot.clone(), self.settings.owners.clone()));
        Some(Arc::new(Ingress::new(self.bot, self.bus, self.settings, me, self.owner, shutdown.clone())))
    }
}

async fn receive_by_polling(pending: PendingIngress, timeout: Duration, shutdown: CancellationToken) {
    if let Some(ingress) = pending.ready(&shutdown).await {
        poll::run_polling(ingress, timeout, shutdown).await;
    }
}

/// The command menu Telegram shows, and in each configured owner's direct chat the owner's
/// commands after it (nobody else sees those); best effort.
async fn register_commands(bot: Bot, owners: Vec<String>) {
    let start = BotCommand::new(START, "say hello and see what I can do");
    let menu = |table: &'static [commands::ChatCommand]| {
        table.iter().map(|command| BotCommand::new(command.name, command.description))
    };
    let everyone: Vec<BotCommand> = std::iter::once(start).chain(menu(commands::COMMANDS)).collect();
    if let Err(err) = bot.set_my_commands(everyone.clone()).await {
        tracing::warn!(err = %describe(&err), "cannot register the command menu");
    }
    let owners_menu: Vec<BotCommand> = everyone.into_iter().chain(menu(commands::OWNER_COMMANDS)).collect();
    for id in owners.iter().filter_map(|owner| owner.parse::<i64>().ok()) {
        let scope = BotCommandScope::Chat { chat_id: Recipient::Id(ChatId(id)) };
        if let Err(err) = bot.set_my_commands(owners_menu.clone()).scope(scope).await {
            // Telegram knows no chat with an owner who never started the bot.
            tracing::warn!(err = %describe(&err), owner = id, "cannot register the owner's command menu");
        }
    }
}
