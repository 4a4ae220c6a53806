//! Live feedback in Telegram chats while a run goes on: typing (repeated every 4 s) and
//! edit-in-place streaming, by the delivery core (see [`crate::delivery::live`]).

use std::sync::Arc;

use teloxide::Bot;
use tokio_util::sync::CancellationToken;

use super::TelegramSettings;
use super::platform::TelegramPlatform;
use crate::bus::Events;

/// Runs in progress in Telegram chats, shared by the event follower and the
/// `Courier` that delivers replies.
pub type LiveRuns = crate::delivery::LiveRuns<TelegramPlatform>;

/// Follows the run events of the channel and keeps typing indicators and drafts up to date,
/// until `shutdown` or the end of `events`.
pub async fn run_live(
    bot: Bot,
    settings: Arc<TelegramSettings>,
    events: Events,
    live: Arc<LiveRuns>,
    shutdown: CancellationToken,
) {
    let platform = Arc::new(TelegramPlatform::new(bot, settings));
    crate::delivery::run_live(platform, events, live, shutdown).await;
}
