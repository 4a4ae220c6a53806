//! Which waiting messages make one turn, when that turn may start, and its text.
//!
//! One rule decides both what the next turn takes and how many turns wait (what
//! `max_queue_depth` counts), so a burst that will be answered as one turn also counts as one.
//! A turn takes the message at the front and, in `collect` mode, everything after it; with
//! debouncing on, the messages of the same person that follow it directly. A merged turn stops
//! before its text would pass the input guard's length limit, so no message is cut away: a
//! burst longer than that becomes several turns.

use std::collections::VecDeque;
use std::time::Duration;

use switchboard_channels::api;
use switchboard_channels::contract::{InboundKind, InboundMessage};
use tokio::time::Instant;

use super::job::Job;
use crate::config::QueueMode;

/// `metadata` key the worker sets on a turn merged from several messages in `collect` mode,
/// whose lines name their authors: the turn as a whole has no single author. Only the
/// worker's own copy carries it; it never goes back on the bus.
const MERGED_WITH_NAMES: &str = "merged_with_names";

/// How long a turn may wait for quiet, in windows, after its first message arrived: a chat
/// that never pauses (a busy group, a sender writing every second) is still answered.
const MAX_WAIT_WINDOWS: u32 = 4;

/// The batching rule of one session at one moment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Batching {
    pub mode: QueueMode,
    /// Quiet time after one sender's messages before their turn starts; zero = no merging.
    pub debounce: Duration,
    /// Quiet time in `collect` mode.
    pub collect_window: Duration,
    /// The longest text a merged turn may have (the guard's `max_message_chars`).
    pub max_chars: usize,
}

impl Batching {
    /// How many jobs from `start` on make one turn (0 when there are none).
    pub fn len_at(&self, queue: &VecDeque<Job>, start: usize) -> usize {
        let Some(first) = queue.get(start) else { return 0 };
        let named = self.mode == QueueMode::Collect;
        let mut chars = line(&first.msg, named).chars().count();
        let mut len = 1;
        for next in queue.iter().skip(start + 1) {
            // The newline joining it, then its line.
            let more = 1 + line(&next.msg, named).chars().count();
            if !self.joins(&first.msg, &next.msg) || chars + more > self.max_chars {
                break;
            }
            chars += more;
            len += 1;
        }
        len
    }

    /// The turns `queue` makes.
    pub fn turns(&self, queue: &VecDeque<Job>) -> usize {
        let (mut start, mut turns) = (0, 0);
        while start < queue.len() {
            start += self.len_at(queue, start).max(1);
            turns += 1;
        }
        turns
    }

    /// When the turn at the front of `queue` may start: `None` = now. It waits while more
    /// messages could still join it, until none arrived for the window, and at most
    /// [`MAX_WAIT_WINDOWS`] windows after its first one.
    pub fn start_at(&self, queue: &VecDeque<Job>) -> Option<Instant> {
        let first = queue.front()?;
        let len = self.len_at(queue, 0);
        // A later message that did not join closes the turn; so does a first message that
        // nothing joins (a cron prompt outside `collect`).
        let open = len == queue.len() && self.can_grow(&first.msg);
        let window = self.window();
        if !open || window.is_zero() {
            return None;
        }
        let last = queue.get(len - 1).map_or(first.arrived, |job| job.arrived);
        Some((last + window).min(first.arrived + window * MAX_WAIT_WINDOWS))
    }

    fn window(&self) -> Duration {
        if self.mode == QueueMode::Collect { self.collect_window } else { self.debounce }
    }

    /// Debouncing merges a person's burst in a chat. Not on the API channel: each of its
    /// requests waits for the answer to its own message, which a merged turn would not give.
    fn can_grow(&self, first: &InboundMessage) -> bool {
        self.mode == QueueMode::Collect
            || (!self.debounce.is_zero() && first.kind == InboundKind::User && first.channel != api::CHANNEL)
    }

    /// Whether `next` joins the turn `first` starts.
    fn joins(&self, first: &InboundMessage, next: &InboundMessage) -> bool {
        match self.mode {
            QueueMode::Collect => true,
            _ => {
                self.can_grow(first)
                    && next.kind == InboundKind::User
                    && next.channel == first.channel
                    && next.sender.id == first.sender.id
            }
        }
    }
}

/// A message's line in a merged turn: with the sender's name when several people may have
/// written (`collect`).
fn line(msg: &InboundMessage, named: bool) -> String {
    if named { format!("{}: {}", msg.sender.name, msg.content) } else { msg.content.clone() }
}

/// Makes one turn of a batch (in arrival order): the newest message carries the joined texts
/// and gets the reply; the others are returned, to be settled after it.
pub(super) fn merge(first: Job, mut rest: Vec<Job>, mode: QueueMode) -> (Job, Vec<Job>) {
    let Some(mut primary) = rest.pop() else { return (first, rest) };
    let mut batch = vec![first];
    batch.extend(rest);
    let named = mode == QueueMode::Collect;
    // A message delivered twice (same id) counts once.
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&InboundMessage> =
        batch.iter().map(|job| &job.msg).chain([&primary.msg]).filter(|msg| seen.insert(msg.id.as_str())).collect();
    let text = unique.iter().map(|msg| line(msg, named)).collect::<Vec<_>>().join("\n");
    // Attachments in arrival order too.
    let media = unique.iter().flat_map(|msg| msg.media.iter().cloned()).collect();
    if named && unique.len() > 1 {
        mark_merged_with_names(&mut primary.msg);
    }
    primary.msg.content = text;
    primary.msg.media = media;
    (primary, batch)
}

fn mark_merged_with_names(msg: &mut InboundMessage) {
    msg.metadata.insert(MERGED_WITH_NAMES.into(), serde_json::Value::Bool(true));
}

/// A turn [`merge`] would make of `messages` in `collect` mode (their texts only), for tests.
#[cfg(test)]
pub(super) fn merged_for_test(messages: &[InboundMessage]) -> InboundMessage {
    let Some(last) = messages.last() else { return InboundMessage::default() };
    let mut merged = last.clone();
    merged.content = messages.iter().map(|msg| line(msg, true)).collect::<Vec<_>>().join("\n");
    mark_merged_with_names(&mut merged);
    merged
}

/// Whether `msg` is a turn [`merge`] made of several people's named lines.
pub(super) fn merged_with_names(msg: &InboundMessage) -> bool {
    msg.metadata.get(MERGED_WITH_NAMES).and_then(serde_json::Value::as_bool) == Some(true)
}
