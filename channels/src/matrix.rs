//! The Matrix channel: matrix-sdk's client (end-to-end encryption included) in and out.
//!
//! Inbound, `/sync` long polling; each room message, decrypted, becomes an
//! [`InboundMessage`](crate::contract::InboundMessage) after the access rules let it through
//! (DM policy with pairing, room and sender allowlists, mention gating), and the sync position
//! moves on only once the bus took it. Invitations are accepted from those the bot would
//! answer. Outbound, replies go as `m.text` with Markdown rendered to HTML, split under the
//! event size limit, answering the message they reply to (`m.in_reply_to`, in its thread), each
//! with a stable transaction id; typing shows while a run is active, and replies may stream
//! by edits (`m.replace`).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use thiserror::Error;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::ingress::Ingress;
use self::platform::{Directory, MatrixPlatform};
use crate::bus::{Bus, BusError};
use crate::control::OwnerLink;
use crate::delivery::{DeliveryPolicy, LiveRuns, Sending};

mod buttons;
mod download;
mod format;
mod gap;
mod gate;
mod inbound;
mod ingress;
mod members;
mod platform;
mod presses;
mod session;
mod state;
mod sync;

pub use self::session::LoginError;

pub use crate::policy::{DmPolicy, GroupPolicy, StreamSettings};

/// The channel name of this adapter on the bus.
pub const CHANNEL: &str = "matrix";

/// How the bot logs in.
#[derive(Clone, PartialEq, Eq)]
pub enum Login {
    /// With the account's password, once: the session (and its device) is kept in `store_dir`.
    Password(String),
    /// With an access token (and the device it belongs to).
    AccessToken(String),
}

/// What happens to an invitation from someone the bot would not answer there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtherInvites {
    Decline,
    /// Left pending.
    Ignore,
}

/// Everything the Matrix channel needs, resolved from `[channels.matrix]`.
#[derive(Clone)]
pub struct MatrixSettings {
    /// The homeserver's client API URL.
    pub homeserver: String,
    /// The bot's user id (`@bot:example.org`).
    pub user: String,
    pub login: Login,
    /// The name of the bot's device, as members' clients list it.
    pub device_name: String,
    /// Where the session, the sync position and the crypto and state stores are kept.
    pub store_dir: PathBuf,
    /// Encrypts the stores at rest.
    pub store_passphrase: Option<String>,
    pub dm_policy: DmPolicy,
    /// User ids answered in direct rooms without pairing (and the only ones under `allowlist`).
    pub allow_from: Vec<String>,
    /// User ids always answered in direct rooms (`users.owners` on matrix).
    pub owners: Vec<String>,
    pub group_policy: GroupPolicy,
    /// Room ids answered in; empty = every room the bot is in.
    pub groups: Vec<String>,
    /// User ids answered in rooms; empty = every member of an allowed room.
    pub group_allow_from: Vec<String>,
    /// Room messages that do not address the bot, kept per room or thread as context for the
    /// next one that does; 0 = none.
    pub group_context_messages: usize,
    pub other_invites: OtherInvites,
    pub pairing_ttl: Duration,
    pub pairing_max_pending: usize,
    pub stream: StreamSettings,
    pub typing: bool,
    /// Where inbound media are saved.
    pub media_dir: PathBuf,
    pub media_max_bytes: u64,
}

impl std::fmt::Debug for MatrixSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let login = match self.login {
            Login::Password(_) => "password",
            Login::AccessToken(_) => "access token",
        };
        f.debug_struct("MatrixSettings")
            .field("homeserver", &self.homeserver)
            .field("user", &self.user)
            .field("login", &login)
            .field("store_dir", &self.store_dir)
            .field("dm_policy", &self.dm_policy)
            .field("group_policy", &self.group_policy)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl Default for MatrixSettings {
    fn default() -> Self {
        Self {
            homeserver: String::new(),
            user: String::new(),
            login: Login::Password(String::new()),
            device_name: "switchboard".to_owned(),
            store_dir: PathBuf::from("matrix"),
            store_passphrase: None,
            dm_policy: DmPolicy::Pairing,
            allow_from: Vec::new(),
            owners: Vec::new(),
            group_policy: GroupPolicy::Mention,
            groups: Vec::new(),
            group_allow_from: Vec::new(),
            group_context_messages: 20,
            other_invites: OtherInvites::Decline,
            pairing_ttl: Duration::from_secs(3600),
            pairing_max_pending: 20,
            stream: StreamSettings { private: true, groups: false, edit_interval: Duration::from_millis(1500) },
            typing: true,
            media_dir: PathBuf::from("media/matrix"),
            media_max_bytes: 20 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Error)]
pub enum MatrixError {
    #[error(
        "{0}: check channels.matrix.user and its password or access token (MATRIX_USER, MATRIX_PASSWORD, MATRIX_ACCESS_TOKEN)"
    )]
    Login(LoginError),
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// A running Matrix channel.
pub struct MatrixChannel {
    sync: JoinHandle<()>,
    sending: Sending,
}

impl MatrixChannel {
    /// Logs in (or restores the saved session), syncs and delivers replies, until `shutdown`
    /// (receiving) and [`Self::stop`] (sending). A homeserver that cannot be reached does not
    /// stop the start: the login is tried again in the background (1 s, doubling to 60 s).
    /// Fails only for a refused login or stores that cannot be opened.
    pub async fn start(
        bus: Arc<dyn Bus>,
        settings: MatrixSettings,
        owner: OwnerLink,
        delivery: DeliveryPolicy,
        shutdown: CancellationToken,
    ) -> Result<MatrixChannel, MatrixError> {
        let settings = Arc::new(settings);
        let logged_in = match session::connect(&settings).await {
            Ok(client) => Some(client),
            Err(err) if err.is_transient() => {
                tracing::warn!(%err, "cannot reach the Matrix homeserver; will keep trying (1 s, doubling to 60 s)");
                None
            }
            Err(err) => return Err(MatrixError::Login(err)),
        };
        let slot = Arc::new(OnceLock::new());
        let directory = Arc::new(Directory::default());
        let platform = Arc::new(MatrixPlatform::new(Arc::clone(&slot), Arc::clone(&directory), Arc::clone(&settings)));
        let sending = Sending::start(&bus, platform, LiveRuns::new(), delivery).await?;
        let ingress = Arc::new(Ingress::new(bus, Arc::clone(&settings), owner, directory, shutdown.clone()));
        let sync = tokio::spawn(sync::run_sync(settings, ingress, slot, logged_in, shutdown));
        Ok(MatrixChannel { sync, sending })
    }

    /// Waits for the sync loop to end (after the shutdown token was cancelled), then stops
    /// sending. Call it after the worker drained.
    pub async fn stop(self) {
        self.sending.stop_after(self.sync, CHANNEL).await;
    }
}
