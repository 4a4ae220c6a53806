//! Which waiting messages make one turn, when that turn may start, and its text.
//!
//! One rule decides both what the next turn takes and how many turns wait (what
//! `max_queue_depth` counts), so a burst that will be answered as one turn also counts as one.
//! A turn takes the message at the front and, in `collect` mode, everything after it; else the
//! messages of the same person that follow it within a burst's gap ([`BURST_GAP`], or the
//! debounce when that is longer). A merged turn stops before its text would pass the input
//! guard's length limit, so no message is cut away: a burst longer than that becomes several
//! turns.
//!
//! A message in a quiet chat starts its turn at once. What arrives during a turn waits for the
//! next, which takes a burst whole. Only a burst still coming in waits a moment
//! ([`BURST_WINDOW`] of quiet, also after the turn it arrived during) for the rest: several
//! messages waiting together, or one the platform marked as part of a burst (a forward, an
//! album, a text split at the length limit); with `debounce_ms` set, every person's message
//! waits that long for quiet.

use std::collections::VecDeque;
use std::time::Duration;

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

/// Messages of one person that follow each other closer than this are one burst: merged into
/// one turn when they wait together. A platform delivers a forward of many messages, or a text
/// the client split, a few milliseconds apart; a person typing takes seconds.
pub(super) const BURST_GAP: Duration = Duration::from_secs(1);

/// How long a message marked as part of a burst waits for the rest of it (quiet for this long,
/// at most [`MAX_WAIT_WINDOWS`] of it).
pub(super) const BURST_WINDOW: Duration = Duration::from_millis(250);

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
        let mut previous = first;
        for next in queue.iter().skip(start + 1) {
            // The newline joining it, then its line.
            let more = 1 + line(&next.msg, named).chars().count();
            if !self.joins(first, previous, next) || chars + more > self.max_chars {
                break;
            }
            chars += more;
            len += 1;
            previous = next;
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
    /// messages could still join it (see the module docs), until none arrived for the window,
    /// and at most [`MAX_WAIT_WINDOWS`] windows after its first one or after `free_since` (when
    /// the session's previous turn ended: a burst that began during it may still be coming in).
    pub fn start_at(&self, queue: &VecDeque<Job>, free_since: Instant) -> Option<Instant> {
        let first = queue.front()?;
        let len = self.len_at(queue, 0);
        let last = queue.get(len - 1).unwrap_or(first);
        // A later message that did not join closes the turn; so does a first message that
        // nothing joins (a cron prompt outside `collect`).
        let open = len == queue.len() && self.can_grow(&first.msg);
        let window = self.window(&last.msg, len);
        if !open || window.is_zero() {
            return None;
        }
        Some((last.arrived + window).min(first.arrived.max(free_since) + window * MAX_WAIT_WINDOWS))
    }

    /// How long a turn of `len` messages waits for quiet after `last`, its newest one: a lone
    /// message not at all, a burst that is still coming in (several messages already, or one
    /// its channel marked) a moment.
    fn window(&self, last: &InboundMessage, len: usize) -> Duration {
        match self.mode {
            QueueMode::Collect => self.collect_window,
            _ if !self.debounce.is_zero() => self.debounce,
            _ if len > 1 || last.in_burst() => BURST_WINDOW,
            _ => Duration::ZERO,
        }
    }

    /// A person's burst in a chat is merged. Not a message whose sender awaits its own answer
    /// (an API request), which a merged turn would not give.
    fn can_grow(&self, first: &InboundMessage) -> bool {
        self.mode == QueueMode::Collect || (first.kind == InboundKind::User && !first.awaits_reply())
    }

    /// Whether `next`, arriving after `previous`, joins the turn `first` starts.
    fn joins(&self, first: &Job, previous: &Job, next: &Job) -> bool {
        match self.mode {
            QueueMode::Collect => true,
            _ => {
                let gap = next.arrived.saturating_duration_since(previous.arrived);
                self.can_grow(&first.msg)
                    && gap < self.debounce.max(BURST_GAP)
                    && next.msg.kind == InboundKind::User
                    && next.msg.channel == first.msg.channel
                    && next.msg.sender.id == first.msg.sender.id
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
