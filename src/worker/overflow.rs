//! A message not kept, said once and truthfully.
//!
//! A message that would start a turn beyond `max_queue_depth`, or that arrives during a turn in
//! `drop` mode, is not kept: its outcome is stored (no turn) and it is acked. The chat hears about it once per busy spell: the spell's
//! first message not kept is held until the chat has been quiet for a moment, then answered
//! with one notice quoting every message not kept since, so the senders know what to send
//! again. A notice per message would be noise, and "please wait" would promise an answer
//! that never comes.
//!
//! An API request is different: its client waits for the answer to its own message and sees
//! nothing else, so such a message is answered at once, alone, with a notice marked
//! `not_kept` (the API turns it into a 429). Held back for the spell's notice, it would wait
//! for quiet; folded into another's, it would wait for the reply timeout.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use switchboard_channels::contract::{InboundMessage, SessionKey};
use tokio::time::Instant;

use super::Intake;
use super::TurnRunner;
use super::job::Job;
use super::settle;

/// Why a message not kept was settled without a turn (logged and stored with its run).
pub(super) const NOT_KEPT: &str = "not kept: the session was busy (queue full, or drop mode)";

/// Why a message is not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reason {
    /// `max_queue_depth` turns wait already.
    QueueFull,
    /// `drop` mode: nothing is kept while a turn runs.
    Busy,
}

/// Quiet time before the notice goes out, unless debouncing waits longer.
const MIN_QUIET: Duration = Duration::from_secs(1);
/// The notice goes out at the latest this many quiet windows after the first message not kept.
const MAX_WAIT_WINDOWS: u32 = 4;
/// The notice quotes this many messages at most and counts the rest.
const QUOTED: usize = 5;
/// Characters quoted of each message.
const QUOTE_CHARS: usize = 40;

/// A message a full queue did not keep, as the notice quotes it.
pub(super) struct NotKept {
    sender: String,
    is_group: bool,
    text: String,
    reason: Reason,
}

/// Records a message the queue cannot take. True when it is the first since the chat was last
/// told: the caller then hands it to [`notify`]. Called under the sessions lock.
pub(super) fn note(intake: &Intake, key: &SessionKey, msg: &InboundMessage, reason: Reason) -> bool {
    let mut overflow = intake.overflow.lock().unwrap_or_else(PoisonError::into_inner);
    let not_kept = overflow.entry(key.to_owned()).or_default();
    not_kept.push(NotKept::of(msg, reason));
    not_kept.len() == 1
}

impl NotKept {
    fn of(msg: &InboundMessage, reason: Reason) -> Self {
        Self { sender: msg.sender.name.clone(), is_group: msg.is_group, text: quote(&msg.content), reason }
    }
}

/// Answers `job`, which was not kept and whose client waits (see [`InboundMessage::awaits_reply`]), at once.
pub(super) async fn refuse(turns: Arc<TurnRunner>, job: Job, reason: Reason) {
    let not_kept = NotKept::of(&job.msg, reason);
    tracing::info!(id = %job.msg.id, ?reason, "a waiting client's message was not kept; telling it at once");
    settle::answer_not_kept(turns, job, notice(std::slice::from_ref(&not_kept))).await;
}

/// Settles `job`, dropped unanswered by a newer message in `interrupt` mode; a client waiting
/// for its answer (see [`InboundMessage::awaits_reply`]) is told at once instead of waiting for its reply timeout.
pub(super) async fn replaced(turns: Arc<TurnRunner>, job: Job) {
    if job.msg.awaits_reply() {
        settle::answer_not_kept(turns, job, REPLACED.to_owned()).await;
    } else {
        settle::settle_unanswered(&turns, job, "dropped by a newer message (interrupt mode)").await;
    }
}

/// What a waiting client hears when a newer message replaced its own.
const REPLACED: &str = "Not answered: a newer message in this chat replaced it (the chat's queue mode is interrupt).";

/// Holds `carrier` (the spell's first message not kept) until the chat is quiet, then answers
/// it with the notice naming every message not kept meanwhile.
pub(super) async fn notify(intake: Arc<Intake>, key: SessionKey, carrier: Job) {
    wait_for_quiet(&intake, &key, carrier.arrived).await;
    let not_kept = {
        let mut overflow = intake.overflow.lock().unwrap_or_else(PoisonError::into_inner);
        overflow.remove(&key).unwrap_or_default()
    };
    tracing::info!(session = %key, not_kept = not_kept.len(), "the queue was full; telling the chat what it did not keep");
    settle::answer(Arc::clone(&intake.turns), carrier, notice(&not_kept)).await;
}

/// Until no message arrived for the session for a window (at most [`MAX_WAIT_WINDOWS`]
/// windows after `since`), or shutdown starts.
async fn wait_for_quiet(intake: &Intake, key: &SessionKey, since: Instant) {
    let window = intake.settings.queue.debounce.max(MIN_QUIET);
    let latest = since + window * MAX_WAIT_WINDOWS;
    loop {
        let quiet_at = {
            let sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            sessions.get(key).map_or(Instant::now(), |session| session.last_arrival + window).min(latest)
        };
        if Instant::now() >= quiet_at || intake.turns.stopping.is_cancelled() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(quiet_at) => {}
            _ = intake.turns.stopping.cancelled() => {}
        }
    }
}

/// "Too many messages were waiting, so I did not keep 2 of them: "…", "…". Send again what
/// you still need answered." Senders are named in groups.
fn notice(not_kept: &[NotKept]) -> String {
    let quoted: Vec<String> = not_kept
        .iter()
        .take(QUOTED)
        .map(|msg| if msg.is_group { format!("{}: \"{}\"", msg.sender, msg.text) } else { format!("\"{}\"", msg.text) })
        .collect();
    let mut list = quoted.join(", ");
    let more = not_kept.len().saturating_sub(QUOTED);
    if more > 0 {
        list.push_str(&format!(" and {more} more"));
    }
    let why = if not_kept.iter().all(|msg| msg.reason == Reason::Busy) {
        "I was busy answering (this chat drops messages meanwhile: /queue)"
    } else {
        "Too many messages were waiting"
    };
    format!("{why}, so I did not keep {} of them: {list}. Send again what you still need answered.", not_kept.len())
}

/// The start of a message's text on one line, marked when cut.
pub(super) fn quote(content: &str) -> String {
    let line = content.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return "(no text)".to_owned();
    }
    let mut quoted: String = line.chars().take(QUOTE_CHARS).collect();
    if line.chars().count() > QUOTE_CHARS {
        quoted.push('…');
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_kept(sender: &str, is_group: bool, text: &str) -> NotKept {
        NotKept { sender: sender.into(), is_group, text: quote(text), reason: Reason::QueueFull }
    }

    #[test]
    fn the_notice_quotes_what_was_not_kept_and_counts_the_rest() {
        let one = [not_kept("Ann", false, "where   is\nthe report?")];
        assert_eq!(
            notice(&one),
            "Too many messages were waiting, so I did not keep 1 of them: \"where is the report?\". \
             Send again what you still need answered."
        );
        let many: Vec<NotKept> = (1..=7).map(|i| not_kept("Bob", true, &format!("question {i}"))).collect();
        let text = notice(&many);
        assert!(text.contains("did not keep 7 of them: Bob: \"question 1\", "), "{text}");
        assert!(text.contains("Bob: \"question 5\" and 2 more."), "{text}");
        assert!(!text.contains("question 6"), "{text}");
    }

    #[test]
    fn in_drop_mode_the_notice_says_the_chat_was_busy() {
        let busy = [NotKept { reason: Reason::Busy, ..not_kept("Ann", false, "and another thing") }];
        assert!(notice(&busy).starts_with("I was busy answering (this chat drops messages meanwhile: /queue), so I did not keep 1 of them: \"and another thing\"."));
    }

    #[test]
    fn quotes_are_cut_on_one_line() {
        assert_eq!(quote(&"x".repeat(41)), format!("{}…", "x".repeat(40)));
        assert_eq!(quote(&"é".repeat(40)), "é".repeat(40));
        assert_eq!(quote(" \n "), "(no text)");
    }
}
