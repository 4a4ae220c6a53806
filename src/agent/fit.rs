//! Compaction inside a run. A run that reads files or pages grows with every step; before a
//! model call whose request would not fit the model's context window ([`super::Turn::budget`]),
//! the run's older tool results are shortened: each keeps its head and a note saying how much
//! is not shown (the call that asked for it stays as it was), oldest first, and only as many as
//! it takes. The system prompt, the history before the turn and the message being answered are
//! never touched, nor the latest results unless the older ones are not enough.
//!
//! A provider's prompt cache serves a request up to the first byte that differs from the one
//! before, so shortening the oldest result that frees enough changes the prompt as late as
//! anything can; a result shortened stays so for the rest of the run (and in the transcript),
//! so later calls share the new prefix. What this cannot fit is left to the provider's overflow
//! refusal, which drops history (see [`super::run`]).
//!
//! The model chain uses the same shortening when it fails over to a model whose window is
//! smaller (the context engine's refit, `context/refit.rs`), on that one request only.

use crate::provider::{ChatMessage, Role};
use crate::tokens::raw_message;
use crate::tools::untrusted::CLOSING;

/// Characters a shortened tool result keeps from its start.
pub(super) const KEPT_CHARS: usize = 1_000;
/// A result is shortened only when that saves at least this many characters (a shortened
/// result is never shortened again).
const WORTH_CHARS: usize = 256;
/// How the note that stands for the rest of a shortened result starts.
pub(super) const SHORTENED_NOTE: &str = "[shortened to fit the context window:";

/// What fitting one request did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Shortened {
    /// Tool results shortened.
    pub results: usize,
    /// Heuristic tokens the request lost.
    pub freed: u64,
    /// Heuristic tokens of what was cut that earlier calls of the run sent (each result's cut
    /// part once per call it went with).
    pub sent_before: u64,
}

/// Shortens the tool results of this run (`messages[first_new..]`), oldest first, until the
/// request, with tool schemas of `tool_tokens`, fits `budget` (both heuristic tokens); `None`
/// when it fits already or nothing could be shortened.
pub fn shorten_to_fit(
    messages: &mut [ChatMessage],
    first_new: usize,
    tool_tokens: u64,
    budget: u64,
) -> Option<Shortened> {
    let over = (crate::tokens::raw_messages(messages) + tool_tokens).checked_sub(budget).filter(|&n| n > 0)?;
    let run = messages.get_mut(first_new..)?;
    let mut done = Shortened::default();
    for at in 0..run.len() {
        if done.freed >= over {
            break;
        }
        if run[at].role != Role::Tool {
            continue;
        }
        let Some(short) = shortened(&run[at].content) else { continue };
        let before = raw_message(&run[at]);
        run[at].content = short;
        let freed = before.saturating_sub(raw_message(&run[at]));
        // The calls made since the result came back each sent it whole.
        let calls_since = run[at..].iter().filter(|message| message.role == Role::Assistant).count();
        done.results += 1;
        done.freed += freed;
        done.sent_before += freed * u64::try_from(calls_since).unwrap_or(u64::MAX);
    }
    (done.results > 0).then_some(done)
}

/// `content` cut to its first [`KEPT_CHARS`] characters and a note, when that saves enough. A
/// result marked as untrusted content keeps its closing marker, so the note reads as
/// switchboard's, outside the block.
fn shortened(content: &str) -> Option<String> {
    let total = content.chars().count();
    if total < KEPT_CHARS + WORTH_CHARS {
        return None;
    }
    let closing = content.trim_end().ends_with(CLOSING);
    let head_end = content.char_indices().nth(KEPT_CHARS).map_or(content.len(), |(at, _)| at);
    let mut short = content[..head_end].to_owned();
    let mut not_shown = total - KEPT_CHARS;
    if closing {
        short.push('\n');
        short.push_str(CLOSING);
        not_shown = not_shown.saturating_sub(CLOSING.len() + 1);
    }
    short.push_str(&format!("\n{SHORTENED_NOTE} {not_shown} more characters not shown]"));
    Some(short)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::provider::ToolCall;
    use crate::tokens::raw_messages;

    fn read(n: usize) -> ToolCall {
        ToolCall { id: format!("c{n}"), name: "read_file".into(), arguments: json!({"path": format!("{n}.txt")}) }
    }

    /// System prompt, one old exchange with a big result, then this run: the question and
    /// three reads of 8,000 characters each.
    fn conversation() -> (Vec<ChatMessage>, usize) {
        let old = read(0);
        let mut messages = vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("earlier"),
            ChatMessage::assistant("", vec![old.clone()]),
            ChatMessage::tool_result(&old, "o".repeat(8_000)),
            ChatMessage::assistant("ok", vec![]),
        ];
        let first_new = messages.len();
        messages.push(ChatMessage::user("read them all"));
        for n in 1..=3 {
            messages.push(ChatMessage::assistant("", vec![read(n)]));
            messages.push(ChatMessage::tool_result(&read(n), format!("{n}").repeat(8_000)));
        }
        (messages, first_new)
    }

    #[test]
    fn a_request_that_fits_is_left_alone() {
        let (mut messages, first_new) = conversation();
        let before = messages.clone();
        assert_eq!(shorten_to_fit(&mut messages, first_new, 100, raw_messages(&before) + 100), None);
        assert_eq!(messages, before);
    }

    #[test]
    fn the_oldest_results_of_the_run_go_first_and_only_as_many_as_needed() {
        let (mut messages, first_new) = conversation();
        let before = messages.clone();
        // About one result (2,000 tokens) too many.
        let budget = raw_messages(&before) - 1_500;
        let done = shorten_to_fit(&mut messages, first_new, 0, budget).unwrap();
        assert_eq!(done.results, 1);
        assert!(raw_messages(&messages) <= budget);
        assert_eq!(messages[..first_new], before[..first_new], "the history before the turn is not touched");
        let first = &messages[first_new + 2].content;
        assert!(first.starts_with(&"1".repeat(KEPT_CHARS)), "{first}");
        assert!(first.ends_with("[shortened to fit the context window: 7000 more characters not shown]"), "{first}");
        assert_eq!(messages[first_new + 4..], before[first_new + 4..], "the later results stay whole");
        // Sent whole by the two calls made since it came back.
        assert_eq!(done.sent_before, 2 * done.freed);
    }

    #[test]
    fn the_latest_results_go_too_when_the_older_are_not_enough_and_a_short_result_never_twice() {
        let (mut messages, first_new) = conversation();
        let done = shorten_to_fit(&mut messages, first_new, 0, 1_000).unwrap();
        assert_eq!(done.results, 3, "every result of the run");
        let after = messages.clone();
        assert_eq!(shorten_to_fit(&mut messages, first_new, 0, 1_000), None, "nothing more to shorten");
        assert_eq!(messages, after);
    }

    #[test]
    fn untrusted_content_keeps_its_closing_marker_before_the_note() {
        let wrapped = format!("<<<UNTRUSTED_CONTENT source=\"read_file a\">>>\n{}\n{CLOSING}", "x".repeat(5_000));
        let short = shortened(&wrapped).unwrap();
        let (kept, note) = short.rsplit_once('\n').unwrap();
        assert!(kept.ends_with(&format!("\n{CLOSING}")), "{short}");
        assert!(note.starts_with(SHORTENED_NOTE), "{note}");
        assert_eq!(shortened(&"y".repeat(KEPT_CHARS + 10)), None, "too little to gain");
    }
}
