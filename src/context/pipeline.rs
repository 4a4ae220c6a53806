//! The history pipeline: pure functions that choose, from a session's stored messages, what
//! the model sees in a turn.
//!
//! Order matters: whole old turns go first (cheap and loses least), then large tool results
//! are trimmed or cleared (they are most of the bulk in tool-heavy sessions, and the model
//! has usually acted on them already), then the oldest messages are dropped until the budget
//! holds. Tool-call pairing is repaired last, because every cut above can break it and every
//! provider rejects a tool result without its call or a call without its result.

use crate::config::HistoryConfig;
use crate::provider::{ChatMessage, Role, ToolCall};
use crate::tools::truncate_middle;

use crate::tokens::Calibration;

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
}

/// The message that carries a saved summary. A system message: OpenAI-compatible APIs take
/// it anywhere, and the Anthropic wire format moves every system message into its `system`
/// field, so it never breaks the user/assistant alternation.
pub fn summary_message(summary: &str) -> ChatMessage {
    ChatMessage::system(format!("{SUMMARY_PREFIX}{summary}"))
}

/// Runs the whole pipeline. `summary`, when given, is put first.
pub fn prepare(
    history: Vec<ChatMessage>,
    summary: Option<&str>,
    budget: Budget,
    config: &HistoryConfig,
    calibration: &Calibration,
) -> Vec<ChatMessage> {
    let summary = summary.map(summary_message);
    let fixed = budget.fixed + summary.as_ref().map_or(0, |s| calibration.messages(std::slice::from_ref(s)));
    let budget = Budget { fixed, ..budget };
    let mut messages = repair_pairing(keep_user_turns(history, config.keep_user_turns));
    prune_tool_results(&mut messages, budget, config, calibration);
    let messages = fit_budget(messages, budget, calibration);
    let mut messages = repair_alternation(repair_pairing(messages));
    if let Some(summary) = summary {
        messages.insert(0, summary);
    }
    messages
}

/// Keeps the last `turns` user messages and everything after the first of them.
pub fn keep_user_turns(mut history: Vec<ChatMessage>, turns: usize) -> Vec<ChatMessage> {
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
/// past `hard_clear_ratio`; the protected tail is left alone.
pub fn prune_tool_results(messages: &mut [ChatMessage], budget: Budget, config: &HistoryConfig, cal: &Calibration) {
    let protect = protected_start(messages, config.protect_recent_turns);
    let used = |messages: &[ChatMessage]| (budget.fixed + cal.messages(messages)) as f64;
    let limit = budget.input as f64;
    if used(messages) <= config.soft_trim_ratio * limit {
        return;
    }
    for message in messages[..protect].iter_mut().filter(|m| m.role == Role::Tool) {
        if message.content.chars().count() > config.soft_trim_chars {
            message.content = truncate_middle(&message.content, config.soft_trim_chars);
        }
    }
    if used(messages) <= config.hard_clear_ratio * limit {
        return;
    }
    // A result shorter than the marker stays: clearing it would cost more than it saves.
    for message in messages[..protect].iter_mut().filter(|m| m.role == Role::Tool && m.content.len() > CLEARED.len()) {
        CLEARED.clone_into(&mut message.content);
    }
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
