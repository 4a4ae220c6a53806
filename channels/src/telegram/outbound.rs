//! Delivering outbound messages to Telegram: Markdown rendered to Telegram HTML, split to the
//! message limit and sent in order, files after the text, each delivery acked once it is in
//! the chat. The queues, redelivery bookkeeping and drafts are the delivery core's (see
//! [`crate::delivery::outbound`]); the Bot API calls are [`TelegramPlatform`]'s.

use std::sync::Arc;

use teloxide::Bot;
use tokio_util::sync::CancellationToken;

use super::TelegramSettings;
use super::live::LiveRuns;
use super::platform::TelegramPlatform;
use crate::bus::Deliveries;

pub use super::send::send_markdown;
pub use super::target::{AddressError, Target};

/// Takes the channel's outbound messages off the bus and delivers them until `shutdown` or the
/// end of `replies`. Replies to runs followed by [`run_live`](super::live::run_live) stop
/// their typing and take over their streamed drafts.
pub async fn run_outbound(
    bot: Bot,
    settings: Arc<TelegramSettings>,
    replies: Deliveries,
    live: Arc<LiveRuns>,
    policy: crate::delivery::DeliveryPolicy,
    shutdown: CancellationToken,
) {
    let platform = Arc::new(TelegramPlatform::new(bot, settings));
    crate::delivery::run_outbound(platform, replies, live, policy, shutdown).await;
}
