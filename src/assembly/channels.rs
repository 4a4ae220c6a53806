//! The channel adapters a process runs, as one list of [`RunningChannel`]s.

use std::sync::Arc;

use async_trait::async_trait;
use switchboard_channels::Bus;
use switchboard_channels::api::console::desk::ConsoleDesk;
use switchboard_channels::api::store::ApiStore;
use switchboard_channels::api::{ApiChannel, LiveAccess};
use switchboard_channels::control::{ControlDesk, OwnerLink};
use switchboard_channels::delivery::{DeliveryPolicy, DeliveryRecord};
use switchboard_channels::discord::DiscordChannel;
use switchboard_channels::matrix::MatrixChannel;
use switchboard_channels::pairing::PairingStore;
use switchboard_channels::telegram::TelegramChannel;
use tokio_util::sync::CancellationToken;

use super::{Assembly, AssemblyError, channel_settings, settings};
use crate::config::{BusKind, Config};
use crate::console::{Console, HealthProbe};
use crate::control::{Control, Desk};
use crate::metrics::GaugeSource;
use crate::store::Database;
use crate::store::usage::UsageLedger;

/// A channel adapter by name, as `switchboard channel <name>` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ChannelKind {
    /// The HTTP API (`[channels.api]`).
    Api,
    /// The Telegram bot (`[channels.telegram]`).
    Telegram,
    /// The Discord bot (`[channels.discord]`).
    Discord,
    /// The Matrix account (`[channels.matrix]`).
    Matrix,
}

impl ChannelKind {
    pub const ALL: [ChannelKind; 4] =
        [ChannelKind::Api, ChannelKind::Telegram, ChannelKind::Discord, ChannelKind::Matrix];

    /// Its name in the config (`channels.<name>`) and on the bus.
    pub fn name(self) -> &'static str {
        match self {
            ChannelKind::Api => "api",
            ChannelKind::Telegram => "telegram",
            ChannelKind::Discord => "discord",
            ChannelKind::Matrix => "matrix",
        }
    }

    /// Whether the config enables it (and, for the chat channels, gives it a token).
    pub(super) fn is_active(self, config: &Config) -> bool {
        match self {
            ChannelKind::Api => config.channels.api.enabled,
            ChannelKind::Telegram => config.channels.telegram.is_active(),
            ChannelKind::Discord => config.channels.discord.is_active(),
            ChannelKind::Matrix => config.channels.matrix.is_active(),
        }
    }

    /// What to say when the config enables this chat channel without a token: it is not
    /// running, and what to set.
    pub fn missing_token(self, config: &Config) -> Option<String> {
        let (enabled, token, variable, name) = match self {
            ChannelKind::Api => return None,
            ChannelKind::Matrix => return missing_matrix_login(config),
            ChannelKind::Telegram => {
                let telegram = &config.channels.telegram;
                (telegram.enabled, &telegram.token, "TELEGRAM_BOT_TOKEN", "Telegram")
            }
            ChannelKind::Discord => {
                let discord = &config.channels.discord;
                (discord.enabled, &discord.token, "DISCORD_BOT_TOKEN", "Discord")
            }
        };
        (enabled && token.is_empty()).then(|| {
            let key = self.name();
            format!(
                "{name} is not running: it is enabled but has no token; set {variable} (or channels.{key}.token), \
                 or channels.{key}.enabled = false to silence this"
            )
        })
    }

    /// Why a process asked to run only this channel cannot: disabled, or without a token.
    pub fn refusal(self, config: &Config) -> Option<AssemblyError> {
        let enabled = match self {
            ChannelKind::Api => config.channels.api.enabled,
            ChannelKind::Telegram => config.channels.telegram.enabled,
            ChannelKind::Discord => config.channels.discord.enabled,
            ChannelKind::Matrix => config.channels.matrix.enabled,
        };
        match (self.is_active(config), enabled, self) {
            (true, _, _) => None,
            (false, false, _) => Some(AssemblyError::ChannelDisabled(self.name())),
            (false, true, ChannelKind::Telegram) => Some(AssemblyError::NoTelegramToken),
            (false, true, ChannelKind::Matrix) => Some(AssemblyError::NoMatrixLogin),
            (false, true, _) => Some(AssemblyError::NoDiscordToken),
        }
    }
}

/// What to say when `[channels.matrix]` is partly filled in: which part of the login is missing.
/// Nothing when none of it is set (a config that does not use Matrix).
fn missing_matrix_login(config: &Config) -> Option<String> {
    let matrix = &config.channels.matrix;
    let parts = [
        ("homeserver (MATRIX_HOMESERVER)", !matrix.homeserver.is_empty()),
        ("user (MATRIX_USER)", !matrix.user.is_empty()),
        (
            "password or access_token (MATRIX_PASSWORD, MATRIX_ACCESS_TOKEN)",
            !(matrix.password.is_empty() && matrix.access_token.is_empty()),
        ),
    ];
    let missing: Vec<&str> = parts.iter().filter(|(_, set)| !set).map(|(name, _)| *name).collect();
    (matrix.enabled && !missing.is_empty() && missing.len() < parts.len()).then(|| {
        format!(
            "Matrix is not running: channels.matrix lacks its {}; or set channels.matrix.enabled = false to silence this",
            missing.join(" and ")
        )
    })
}

/// What the channels share for the owner (see `Assembly::owner_parts`).
struct OwnerParts {
    link: OwnerLink,
    control: Arc<Control>,
    health: Option<Arc<dyn HealthProbe>>,
}

/// A started channel adapter.
#[async_trait]
pub trait RunningChannel: Send {
    fn kind(&self) -> ChannelKind;

    /// What the metrics endpoint reads of it, if it reports anything.
    fn gauges(&self) -> Option<GaugeSource> {
        None
    }

    /// The API's tokens, which a config reload replaces at once; `None` for the chat channels.
    fn api_access(&self) -> Option<LiveAccess> {
        None
    }

    /// Stops it; in-flight deliveries end first.
    async fn stop(self: Box<Self>) -> Result<(), AssemblyError>;
}

#[async_trait]
impl RunningChannel for ApiChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Api
    }

    fn gauges(&self) -> Option<GaugeSource> {
        let gauges = ApiChannel::gauges(self);
        Some(Box::new(move || gauges.read()))
    }

    fn api_access(&self) -> Option<LiveAccess> {
        Some(self.access())
    }

    async fn stop(self: Box<Self>) -> Result<(), AssemblyError> {
        Ok(ApiChannel::stop(*self).await?)
    }
}

#[async_trait]
impl RunningChannel for TelegramChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Telegram
    }

    async fn stop(self: Box<Self>) -> Result<(), AssemblyError> {
        TelegramChannel::stop(*self).await;
        Ok(())
    }
}

#[async_trait]
impl RunningChannel for MatrixChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Matrix
    }

    async fn stop(self: Box<Self>) -> Result<(), AssemblyError> {
        MatrixChannel::stop(*self).await;
        Ok(())
    }
}

#[async_trait]
impl RunningChannel for DiscordChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Discord
    }

    async fn stop(self: Box<Self>) -> Result<(), AssemblyError> {
        DiscordChannel::stop(*self).await;
        Ok(())
    }
}

impl Assembly {
    /// Starts those of `kinds` the config enables. The API keeps its sessions, runs and outbox
    /// in `store`, the chat channels their DM pairings; the API's owner console reads `health`.
    pub async fn start_channels(
        &self,
        kinds: &[ChannelKind],
        bus: &Arc<dyn Bus>,
        store: &Arc<dyn Database>,
        health: Option<Arc<dyn HealthProbe>>,
        shutdown: &CancellationToken,
    ) -> Result<Vec<Box<dyn RunningChannel>>, AssemblyError> {
        let mut channels = Vec::new();
        for &kind in kinds {
            if let Some(missing) = kind.missing_token(&self.config) {
                tracing::warn!("{missing}");
            }
        }
        let owner = self.owner_parts(bus, store, health);
        for &kind in kinds.iter().filter(|kind| kind.is_active(&self.config)) {
            channels.push(self.start_channel(kind, Arc::clone(bus), store, &owner, shutdown.clone()).await?);
        }
        Ok(channels)
    }

    /// What the channels share for the owner: the chat channels' link (the pairing store they
    /// ask about strangers, the control desk their button presses go to), and the operations
    /// and health checks of the API's owner console.
    fn owner_parts(
        &self,
        bus: &Arc<dyn Bus>,
        store: &Arc<dyn Database>,
        health: Option<Arc<dyn HealthProbe>>,
    ) -> OwnerParts {
        let control = self.control(bus, store);
        let desk = Desk::new(Arc::clone(&control), Arc::clone(bus), &self.config);
        let link = OwnerLink {
            pairing: Some(Arc::clone(store) as Arc<dyn PairingStore>),
            desk: Some(Arc::new(desk) as Arc<dyn ControlDesk>),
        };
        OwnerParts { link, control, health }
    }

    async fn start_channel(
        &self,
        kind: ChannelKind,
        bus: Arc<dyn Bus>,
        store: &Arc<dyn Database>,
        owner: &OwnerParts,
        shutdown: CancellationToken,
    ) -> Result<Box<dyn RunningChannel>, AssemblyError> {
        let config = &self.config;
        let delivery = self.delivery_policy(store);
        Ok(match kind {
            ChannelKind::Api => {
                if config.channels.api.unguarded_beyond_loopback() {
                    return Err(AssemblyError::ApiUnguarded(config.channels.api.listen));
                }
                super::descriptors::warn_if_short(config.channels.api.max_connections);
                let usage = Arc::clone(store) as Arc<dyn UsageLedger>;
                let console = Console::new(Arc::clone(&owner.control), usage, config.clone(), owner.health.clone());
                let console = Some(Arc::new(console) as Arc<dyn ConsoleDesk>);
                let store = Arc::clone(store) as Arc<dyn ApiStore>;
                let mut api = settings::api(config);
                // An admin's socket may watch every session, the chat channels' too.
                let chats = [ChannelKind::Telegram, ChannelKind::Discord, ChannelKind::Matrix]
                    .into_iter()
                    .filter(|kind| kind.is_active(config));
                api.live_channels = chats.map(|kind| kind.name().to_owned()).collect();
                Box::new(ApiChannel::start(bus, api, store, console, shutdown).await?)
            }
            ChannelKind::Telegram => {
                let settings = channel_settings::telegram(config);
                Box::new(TelegramChannel::start(bus, settings, owner.link.clone(), delivery, shutdown).await?)
            }
            ChannelKind::Discord => {
                let settings = channel_settings::discord(config);
                Box::new(DiscordChannel::start(bus, settings, owner.link.clone(), delivery, shutdown).await?)
            }
            ChannelKind::Matrix => {
                let settings = channel_settings::matrix(config);
                Box::new(MatrixChannel::start(bus, settings, owner.link.clone(), delivery, shutdown).await?)
            }
        })
    }
}

impl Assembly {
    /// How the chat channels treat their deliveries: replies older than
    /// `bus_options.outbound_max_age_secs` are dropped; on NATS each delivery is recorded in
    /// the store, so a restarted adapter (on any host) does not send a reply twice. The
    /// in-process bus records only the progress of replies sent in several steps (text, then
    /// files): a reply's journal row goes the moment it is delivered, but a restart in the
    /// middle of one must not send its text again.
    fn delivery_policy(&self, store: &Arc<dyn Database>) -> DeliveryPolicy {
        let partial_only = matches!(self.config.bus_kind(), BusKind::InProcess);
        DeliveryPolicy {
            max_age: self.config.bus_options.outbound_max_age(),
            record: Some(Arc::clone(store) as Arc<dyn DeliveryRecord>),
            partial_only,
        }
    }
}

/// Stops `channels`, the last started first (the API, started first, goes last), after the
/// worker has drained, so finished turns are still delivered.
pub async fn stop_all(channels: Vec<Box<dyn RunningChannel>>) -> Result<(), AssemblyError> {
    for channel in channels.into_iter().rev() {
        channel.stop().await?;
    }
    Ok(())
}
