//! What a command answers: its reply, and for a list with buttons (`/cron`), one notice per
//! item before it.
//!
//! The reply is stored with the command's run and re-sent if it never went out (see
//! [`super::settle`]). The items go out first, each with an id made from the run's, so a
//! command given back to the bus before its run finished publishes the same ids again and the
//! bus drops the copies; once the run is finished nothing is sent again but its reply.

use switchboard_channels::bus::{Bus, BusExt};
use switchboard_channels::contract::{Button, InboundMessage, OutboundKind, OutboundMessage};

use super::settle::HandleError;

/// A command's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Answer {
    /// Sent first, in order.
    pub items: Vec<Item>,
    /// Sent last, and stored with the run.
    pub text: String,
}

/// A notice of its own, with buttons under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Item {
    pub text: String,
    pub buttons: Vec<Vec<Button>>,
}

impl From<String> for Answer {
    fn from(text: String) -> Self {
        Self { items: Vec::new(), text }
    }
}

/// Publishes `items` to the chat `msg` came from. They answer no message and belong to no
/// run's transcript: the API hands a waiting request the reply, and keeps these in the chat's
/// outbox.
pub(super) async fn publish_items(
    bus: &dyn Bus,
    msg: &InboundMessage,
    run_id: &str,
    items: Vec<Item>,
) -> Result<(), HandleError> {
    for (n, item) in items.into_iter().enumerate() {
        let mut notice = OutboundMessage::answering(msg, format!("{run_id}:item:{n}"), OutboundKind::Notice, item.text);
        notice.in_reply_to = None;
        notice.reply_to = None;
        notice.buttons = item.buttons;
        bus.publish_outbound(&notice).await?;
    }
    Ok(())
}
