//! STUB of the outbound side (branch `dc-out`: `outbound.rs`, `live.rs`), with the signatures
//! agreed in the contract, so that the inbound side compiles and runs before it is merged.
//! Replies are not delivered; `send_markdown` sends plain content (no splitting, no retry),
//! enough for pairing codes. Delete this file when `dc-out` lands.

use std::sync::Arc;

use serenity::all::{ChannelId, CreateAllowedMentions, CreateMessage, Http, MessageId};
use tokio_util::sync::CancellationToken;

use super::DiscordSettings;
use super::directory::Directory;
use crate::bus::{Deliveries, Events};

/// Run state shared by the outbound and live sides (stub).
pub(crate) struct LiveRuns;

impl LiveRuns {
    pub(crate) fn new(directory: Arc<Directory>) -> Self {
        // The real one keeps the directory to know DMs; the stub only touches it.
        let _ = directory.is_direct(0);
        LiveRuns
    }
}

/// Stub: holds the event stream until shutdown.
pub(crate) async fn run_live(
    _http: Arc<Http>,
    _settings: Arc<DiscordSettings>,
    _events: Events,
    _live: Arc<LiveRuns>,
    shutdown: CancellationToken,
) {
    shutdown.cancelled().await;
}

/// Stub: holds the reply stream until shutdown; nothing is delivered.
pub(crate) async fn run_outbound(
    _http: Arc<Http>,
    _settings: Arc<DiscordSettings>,
    _replies: Deliveries,
    _live: Arc<LiveRuns>,
    shutdown: CancellationToken,
) {
    tracing::warn!("the Discord outbound side is a stub in this build: replies are not delivered");
    shutdown.cancelled().await;
}

/// Where a message goes.
pub(crate) struct Target {
    pub channel: ChannelId,
    pub reply_to: Option<MessageId>,
}

/// Why a message was not sent.
#[derive(Debug, thiserror::Error)]
#[error("cannot send to Discord: {0}")]
pub(crate) struct SendError(String);

/// Stub: one plain message, replying without pinging.
pub(crate) async fn send_markdown(
    http: &Http,
    target: &Target,
    markdown: &str,
    _shutdown: &CancellationToken,
) -> Result<Vec<MessageId>, SendError> {
    let mut message = CreateMessage::new().content(markdown).allowed_mentions(CreateAllowedMentions::new());
    if let Some(reply_to) = target.reply_to {
        message = message.reference_message((target.channel, reply_to));
    }
    let sent = target.channel.send_message(http, message).await.map_err(|err| SendError(err.to_string()))?;
    Ok(vec![sent.id])
}
