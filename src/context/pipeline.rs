//! The history pipeline: pure functions that choose, from a session's stored messages, what
//! the model sees in a turn.
//!
//! Order matters: large tool results are trimmed or cleared first (they are most of the bulk
//! in tool-heavy sessions, and the model has usually acted on them already), then whole old
//! turns go until the budget and `keep_user_turns` hold. Tool-call pairing is repaired last,
//! because every cut above can break it and every provider rejects a tool result without its
//! call or a call without its result.
//!
//! Cuts are made in steps, at [`cut_points`] that stay where they are as the conversation
//! grows: a provider's prompt cache serves a request only up to where it differs from the one
//! before, so a history that lost its oldest exchange on every turn would be read again in
//! full on every turn. Between steps the history only grows at its end.

use crate::config::HistoryConfig;
use crate::provider::{ChatMessage, Role, ToolCall};
use crate::tools::truncate_middle;

use crate::tokens::{Calibration, raw_message};

/// What a cleared tool result says instead.
pub const CLEARED: &str = "[tool result cleared to save space]";
/// The result given to a tool call whose result is not in the history any more.
pub const PLACEHOLDER: &str = "[no result: the result was removed from history]";
/// What stands in for the reply to a message that got none (its turn failed), so that user and
/// assistant alternate as chat templates and the Anthropic API require.
pub const UNANSWERED: &str = "[no reply was sent to this message]";
/// How a saved session summary starts.
pub const SUMMARY_PREFIX: &str = "Summary of the earlier conversation: ";

/// The token budget a turn's history must fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The whole input budget: context window − output reserve − tool schemas.
    pub input: u64,
    /// Tokens that are always sent whatever the history: the system prompt, the summary and
    /// the current message.
    pub fixed: u64,
    /// The history is cut in steps of about this many tokens (by the heuristic count, which
    /// stays the same for a message from turn to turn); 0 = at any message.
    pub step: u64,
}

/// The message that carries a saved summary. A system message: OpenAI-compatible APIs take
/// it anywhere, and the Anthropic wire format moves every system message into its `system`
/// field, so it never breaks the user/assistant alternation.
pub fn summary_message(summary: &str) -> ChatMessage {
    ChatMessage::system(format!("{SUMMARY_PREFIX}{summary}"))
}

/// Where a session's history was cut and pruned last time: kept by the caller between turns, so
/// that neither ever moves back (a smaller estimate or a shorter message would otherwise undo
/// a cut for a turn, and every such change is a miss of the provider's prompt cache).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    /// Which history these marks are for: a hash of its first message (a compaction or `/new`
    /// starts another).
    origin: u64,
    /// Messages dropped from the start.
    cut: usize,
    /// Tool results before this message are soft-trimmed (and cleared, with `cleared`).
    pruned_to: usize,
    cleared: bool,
}

/// Runs the whole pipeline. `summary`, when given, is put first. `marks` are those the previous
/// turn of the session returned, if any; the new ones come back with the history.
pub fn prepare(
    history: Vec<ChatMessage>,
    summary: Option<&str>,
    budget: Budget,
    config: &HistoryConfig,
    calibration: &Calibration,
    marks: Option<Marks>,
) -> (Vec<ChatMessage>, Marks) {
    let summary = summary.map(summary_message);
    let fixed = budget.fixed + summary.as_ref().map_or(0, |s| calibration.messages(std::slice::from_ref(s)));
    let budget = Budget { fixed, ..budget };
    let mut messages = repair_pairing(history);
    let origin = messages.first().map_or(0, fingerprint);
    let marks = marks.filter(|marks| marks.origin == origin && marks.cut <= messages.len());
    // Each message counted once here (the steps below read these), not once per step.
    let mut raws: Vec<u64> = messages.iter().map(raw_message).collect();
    let points = cut_points(&messages, &raws, budget.step, config.keep_user_turns.div_ceil(2));
    let pruning = Pruning { budget, config, cal: calibration, marks };
    let (pruned_to, cleared) = prune_tool_results(&mut messages, &mut raws, &points, pruning);
    // Never less than last time: the history starts where it started while it fits.
    let from = marks.map_or(0, |marks| marks.cut);
    let (messages, cut) = cut_in_steps(messages, &raws, &points, from, budget, config.keep_user_turns, calibration);
    let mut messages = repair_alternation(repair_pairing(messages));
    if let Some(summary) = summary {
        messages.insert(0, summary);
    }
    (messages, Marks { origin, cut, pruned_to, cleared })
}

/// A hash of a message's role and text: which history a [`Marks`] belongs to.
fn fingerprint(message: &ChatMessage) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (message.role as u8, &message.content, &message.context).hash(&mut hasher);
    hasher.finish()
}

/// Where the history may be cut: every user message at which the heuristic token count since
/// the last such point reaches `tokens_step`, or the user turns since it `turns_step` (every
/// user message when `tokens_step` is 0). Counted from the start of the history, which is the
/// last compaction (or `/new`), these points stay where they are as the conversation grows; a
/// cut moves from one to the next, freeing about a step at once.
/// `raws` are the messages' [`raw_message`] estimates.
pub fn cut_points(messages: &[ChatMessage], raws: &[u64], tokens_step: u64, turns_step: usize) -> Vec<usize> {
    let mut points = Vec::new();
    let (mut tokens, mut turns) = (0u64, 0usize);
    for ((at, message), raw) in messages.iter().enumerate().zip(raws) {
        if message.role == Role::User && at > 0 {
            let full = tokens >= tokens_step || (turns_step > 0 && turns >= turns_step);
            if full || tokens_step == 0 {
                points.push(at);
                (tokens, turns) = (0, 0);
            }
        }
        turns += usize::from(message.role == Role::User);
        tokens += raw;
    }
    points
}

/// Drops the oldest messages, from `from` (where the previous turn's history started) on: it
/// stays there while the rest fits the budget and holds at most `keep_user_turns` user turns;
/// past that, the history is cut at the first later cut point after which it fits with a
/// step's room to spare (the turns after it grow into that room), else at the first after which
/// it fits at all. When even the last point leaves too much (a single huge turn), the oldest
/// messages go one by one ([`fit_budget`]). Returns what is left and how many messages went.
pub fn cut_in_steps(
    messages: Vec<ChatMessage>,
    raws: &[u64],
    points: &[usize],
    from: usize,
    budget: Budget,
    keep_user_turns: usize,
    cal: &Calibration,
) -> (Vec<ChatMessage>, usize) {
    let room = budget.input.saturating_sub(budget.fixed);
    // From the end: tokens and user turns from each message on.
    let mut after = vec![(0u64, 0usize); messages.len() + 1];
    let correct = cal.corrector();
    for at in (0..messages.len()).rev() {
        let (tokens, turns) = after[at + 1];
        let user = usize::from(messages[at].role == Role::User);
        after[at] = (tokens + correct(raws[at]), turns + user);
    }
    let fits_in = |at: usize, room: u64| after[at].0 <= room && after[at].1 <= keep_user_turns;
    let from = from.min(messages.len());
    let mut messages = messages;
    if fits_in(from, room) {
        return (messages.split_off(from), from);
    }
    let spare = cal.correct(budget.step).min(room / 2);
    let later = || points.iter().copied().filter(|&at| at > from);
    match later().find(|&at| fits_in(at, room - spare)).or_else(|| later().find(|&at| fits_in(at, room))) {
        Some(cut) => {
            tracing::debug!(dropped = cut, "history over its budget; cut at the next step");
            (messages.split_off(cut), cut)
        }
        None => {
            let len = messages.len();
            let kept = fit_budget(keep_user_turns_only(messages.split_off(from), keep_user_turns), budget, cal);
            let cut = len - kept.len();
            (kept, cut)
        }
    }
}

/// Keeps the last `turns` user messages and everything after the first of them.
pub fn keep_user_turns_only(mut history: Vec<ChatMessage>, turns: usize) -> Vec<ChatMessage> {
    let users: Vec<usize> = history.iter().enumerate().filter(|(_, m)| m.role == Role::User).map(|(i, _)| i).collect();
    if users.len() <= turns {
        return history;
    }
    let start = if turns == 0 { history.len() } else { users[users.len() - turns] };
    history.split_off(start)
}

/// Where the protected tail starts: at the `turns`-th last assistant message, so it and the
/// tool results after it are never pruned. Everything is protected when there are fewer.
pub fn protected_start(messages: &[ChatMessage], turns: usize) -> usize {
    if turns == 0 {
        return messages.len();
    }
    messages.iter().enumerate().rev().filter(|(_, m)| m.role == Role::Assistant).nth(turns - 1).map_or(0, |(i, _)| i)
}

/// Soft-trims long tool results past `soft_trim_ratio` of the budget, and clears old ones
/// past `hard_clear_ratio`; the protected tail is left alone, and so is everything after the
/// last cut point before it, so what is pruned changes in steps too (see [`cut_points`]), and
/// never less than the previous turn pruned (`marks`). Returns how far it pruned and whether
/// it cleared.
pub fn prune_tool_results(
    messages: &mut [ChatMessage],
    raws: &mut [u64],
    points: &[usize],
    pruning: Pruning<'_>,
) -> (usize, bool) {
    let Pruning { budget, config, cal, marks } = pruning;
    let (before_to, before_cleared) = marks.map_or((0, false), |marks| (marks.pruned_to, marks.cleared));
    let tail = protected_start(messages, config.protect_recent_turns);
    let step = points.iter().copied().take_while(|&at| at <= tail).last().unwrap_or(0);
    let used = |raws: &[u64]| (budget.fixed + cal.correct(raws.iter().sum())) as f64;
    let limit = budget.input as f64;
    if before_to == 0 && used(raws) <= config.soft_trim_ratio * limit {
        return (0, false);
    }
    let protect = step.max(before_to).min(messages.len());
    change_tool_results(&mut messages[..protect], raws, |message| {
        if message.content.chars().count() > config.soft_trim_chars {
            message.content = truncate_middle(&message.content, config.soft_trim_chars);
        }
    });
    if !before_cleared && used(raws) <= config.hard_clear_ratio * limit {
        return (protect, false);
    }
    // A result shorter than the marker stays: clearing it would cost more than it saves.
    change_tool_results(&mut messages[..protect], raws, |message| {
        if message.content.len() > CLEARED.len() {
            CLEARED.clone_into(&mut message.content);
        }
    });
    (protect, true)
}

/// Applies `change` to the tool results among `messages`, and counts each again in `raws`.
fn change_tool_results(messages: &mut [ChatMessage], raws: &mut [u64], change: impl Fn(&mut ChatMessage)) {
    for (message, raw) in messages.iter_mut().zip(raws).filter(|(message, _)| message.role == Role::Tool) {
        change(message);
        *raw = raw_message(message);
    }
}

/// What [`prune_tool_results`] goes by: the budget, the settings, the calibration and the
/// previous turn's marks.
#[derive(Clone, Copy)]
pub struct Pruning<'a> {
    pub budget: Budget,
    pub config: &'a HistoryConfig,
    pub cal: &'a Calibration,
    pub marks: Option<Marks>,
}

/// Drops the oldest messages until the history fits what the budget leaves after the fixed
/// part. The history then starts at a user message (Anthropic requires the first message to
/// be the user's, and half a turn means little to the model anyway).
pub fn fit_budget(mut messages: Vec<ChatMessage>, budget: Budget, cal: &Calibration) -> Vec<ChatMessage> {
    let room = budget.input.saturating_sub(budget.fixed);
    let mut total = cal.messages(&messages);
    let mut cut = 0;
    while cut < messages.len() && (total > room || messages[cut].role != Role::User) {
        total = total.saturating_sub(cal.messages(std::slice::from_ref(&messages[cut])));
        cut += 1;
    }
    if cut > 0 {
        tracing::debug!(dropped = cut, "history over the token budget; dropped the oldest messages");
    }
    messages.split_off(cut)
}

/// Makes tool calls and results pair up: a result must follow the assistant message that
/// made its call (orphans are dropped), and each call gets a result (a placeholder when its
/// result is gone).
pub fn repair_pairing(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len());
    // The calls of the latest assistant message that have no result yet.
    let mut pending: Vec<ToolCall> = Vec::new();
    for message in messages {
        if message.role == Role::Tool {
            let answered = pending.iter().position(|c| message.tool_call_id.as_deref() == Some(c.id.as_str()));
            match answered {
                Some(pos) => {
                    pending.remove(pos);
                    out.push(message);
                }
                None => tracing::debug!(call = ?message.tool_call_id, "dropping a tool result without its call"),
            }
            continue;
        }
        close_calls(&mut out, &mut pending);
        if message.role == Role::Assistant {
            pending.clone_from(&message.tool_calls);
        }
        out.push(message);
    }
    close_calls(&mut out, &mut pending);
    out
}

/// Makes the history one that every provider accepts before the next user message: it starts
/// with a user message, and a user message that got no reply (a failed turn stores only its
/// input) is followed by [`UNANSWERED`] instead of by the next user message. Strict chat
/// templates (Mistral, Gemma) and Anthropic refuse a conversation that starts with the
/// assistant or has two user messages in a row.
pub fn repair_alternation(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let start = messages.iter().position(|m| m.role == Role::User).unwrap_or(messages.len());
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    for message in messages.into_iter().skip(start) {
        if message.role == Role::User && out.last().is_some_and(|last| last.role == Role::User) {
            out.push(ChatMessage::assistant(UNANSWERED, Vec::new()));
        }
        out.push(message);
    }
    // The turn's own input comes next.
    if out.last().is_some_and(|last| last.role == Role::User) {
        out.push(ChatMessage::assistant(UNANSWERED, Vec::new()));
    }
    out
}

fn close_calls(out: &mut Vec<ChatMessage>, pending: &mut Vec<ToolCall>) {
    for call in pending.drain(..) {
        out.push(ChatMessage::tool_result(&call, PLACEHOLDER));
    }
}

#[cfg(test)]
mod tests;
