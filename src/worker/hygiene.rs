//! The input guard and the reply sanitizer around a turn (see `crate::hygiene`). Kept out of
//! `run.rs` so a turn reads as: admit, screen, run, clean, store, deliver.

use std::borrow::Cow;

use switchboard_channels::contract::{InboundKind, InboundMessage, OutboundMessage, RepliedTo};

use super::access::Access;
use crate::agent::{AgentSettings, TurnResult};
use crate::hygiene::{Guard, Verdict, sanitize_reply};
use crate::provider::Role;
use crate::scheduler::heartbeat::{self, HeartbeatAck, ack};

/// What the transcript keeps of a suppressed final answer. Not an empty string: some
/// providers refuse an empty assistant message, and the model should see next turn that it
/// chose to stay silent.
const SUPPRESSED_IN_TRANSCRIPT: &str = "NO_REPLY";

/// Screens an admitted user message: the message the model will see (nulls removed, cut to
/// size, maybe with a note) and the access, turned into a refusal in `block` mode.
///
/// System messages (cron, heartbeats, sub-agent results) are made by switchboard from jobs a
/// permitted user set up, so they are cleaned and cut but never judged: a blocked heartbeat
/// would just be a silent failure.
pub(super) fn screen_input<'m>(
    guard: Option<&Guard>,
    msg: &'m InboundMessage,
    access: Access,
) -> (Cow<'m, InboundMessage>, Access) {
    let Some(guard) = guard else { return (Cow::Borrowed(msg), access) };
    if matches!(access, Access::OverBudget { .. }) {
        return (Cow::Borrowed(msg), access);
    }
    let content = if msg.kind == InboundKind::System {
        guard.clean(&msg.content)
    } else {
        match guard.screen(&msg.content).verdict {
            Verdict::Pass(content) => content,
            Verdict::Block(notice) => return (Cow::Borrowed(msg), Access::Blocked { notice }),
        }
    };
    let replied_to = msg.replied_to.as_ref().map(|replied| screen_replied(guard, replied));
    if content == msg.content && replied_to == msg.replied_to {
        return (Cow::Borrowed(msg), access);
    }
    (Cow::Owned(InboundMessage { content, replied_to, ..msg.clone() }), access)
}

/// The message a person replied to reaches the model beside theirs, so it is screened like
/// theirs: it may be a stranger's text the bot was never addressed with. A replied-to text
/// the guard would block is withheld rather than refusing the person who quoted it.
fn screen_replied(guard: &Guard, replied: &RepliedTo) -> RepliedTo {
    let screen = |text: &str| match guard.screen(text).verdict {
        Verdict::Pass(text) => Some(text),
        Verdict::Block(_) => None,
    };
    // The quote is a part of the text: withheld with it.
    let (text, quote) = match screen(&replied.text) {
        Some(text) => (text, replied.quote.as_deref().map(|quote| screen(quote).unwrap_or_else(withheld))),
        None => (withheld(), replied.quote.as_ref().map(|_| withheld())),
    };
    RepliedTo { text, quote, ..replied.clone() }
}

fn withheld() -> String {
    WITHHELD.to_owned()
}

/// What the model reads instead of a replied-to text the guard blocks.
const WITHHELD: &str = "[withheld: it looked like an attempt to give you instructions]";

/// Cleans the model's answer of a successful turn (a failed turn's reply is switchboard's
/// own apology and stays). Returns whether the answer is suppressed: nothing to deliver.
///
/// The transcript keeps the cleaned text too, not what the model wrote: leaked tool-call
/// syntax or reasoning fed back as history teaches the model to write more of it.
pub(super) fn clean_reply(result: &mut TurnResult, heartbeat_ack_max_chars: Option<usize>) -> bool {
    if result.error.is_some() {
        return false;
    }
    let mut sanitized = sanitize_reply(&result.reply);
    // A heartbeat that found nothing to do says HEARTBEAT_OK: silence, like NO_REPLY.
    if let Some(max) = heartbeat_ack_max_chars.filter(|_| !sanitized.suppressed) {
        match ack::judge(&sanitized.text, max) {
            HeartbeatAck::NotAck => {}
            HeartbeatAck::Suppress => {
                sanitized.text.clear();
                sanitized.suppressed = true;
                sanitized.removed.push("heartbeat_ok");
            }
            HeartbeatAck::Deliver(report) => {
                sanitized.text = report;
                sanitized.removed.push("heartbeat_ok");
            }
        }
    }
    if !sanitized.removed.is_empty() {
        tracing::info!(removed = ?sanitized.removed, suppressed = sanitized.suppressed, "reply sanitized");
    }
    if sanitized.suppressed && heartbeat_ack_max_chars.is_some() {
        // A heartbeat that found nothing to report leaves no trace in the session: every
        // interval's prompt and silence would otherwise fill the history (and bring its
        // compaction closer). The run itself is still recorded, so a redelivery is not run again.
        result.transcript.clear();
        result.reply = sanitized.text;
        return true;
    }
    let last = result.transcript.len().saturating_sub(1);
    for (i, message) in result.transcript.iter_mut().enumerate() {
        if message.role != Role::Assistant {
            continue;
        }
        let cleaned = sanitize_reply(&message.content);
        message.content = match (cleaned.suppressed, i == last && message.tool_calls.is_empty()) {
            (true, true) => SUPPRESSED_IN_TRANSCRIPT.to_owned(),
            _ => cleaned.text,
        };
    }
    result.reply = sanitized.text;
    sanitized.suppressed
}

/// The `HEARTBEAT_OK` allowance for `agent`'s reply to `msg`: `Some` only for a heartbeat (a
/// system message of origin `heartbeat`), so a person's message is never suppressed this way.
pub(super) fn heartbeat_ack_limit(agent: &AgentSettings, msg: &InboundMessage) -> Option<usize> {
    let is_heartbeat = msg.kind == InboundKind::System
        && msg.origin.as_ref().is_some_and(|origin| origin.kind == heartbeat::HEARTBEAT_ORIGIN);
    is_heartbeat.then_some(agent.heartbeat_ack_max_chars)
}

/// Marks a suppressed reply so the API channel can say so; its content is already empty,
/// which adapters deliver as nothing.
pub(super) fn mark_suppressed(reply: &mut OutboundMessage, suppressed: bool) {
    if suppressed {
        switchboard_channels::contract::reply::set_suppressed(reply);
    }
}
