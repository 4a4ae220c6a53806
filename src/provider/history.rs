//! Shortening a conversation that does not fit a model's window: what the agent loop does after
//! an overflow, and what the failover chain does before it calls a model with a smaller window
//! than the one the request was fitted to. Both cut it the same way, here.

use super::{ChatMessage, Role};

/// Drops the oldest half of the history, `messages[1..first_new]` (after the system prompt,
/// before this turn), and on up to the next user message, so the history left starts as every
/// provider accepts (Anthropic refuses one that starts with the assistant, and a tool result
/// without its call is refused everywhere). Returns how many messages went.
pub fn drop_oldest_history(messages: &mut Vec<ChatMessage>, first_new: usize) -> usize {
    let history = first_new.saturating_sub(1);
    let mut cut = 1 + history.div_ceil(2);
    while cut < first_new && messages[cut].role != Role::User {
        cut += 1;
    }
    messages.drain(1..cut);
    cut - 1
}

/// Where the turn a request is made for starts, as far as the request shows it: the first user
/// message after the last answer in words (an assistant message without tool calls), which
/// ended the turn before. What lies between the system prompt and there is history, which
/// [`drop_oldest_history`] may drop. 0 when the request does not start with a system prompt:
/// then there is no history to tell apart, and nothing is dropped.
pub fn turn_start(messages: &[ChatMessage]) -> usize {
    if messages.first().is_none_or(|first| first.role != Role::System) {
        return 0;
    }
    let after_answer = messages
        .iter()
        .rposition(|message| message.role == Role::Assistant && message.tool_calls.is_empty())
        .map_or(1, |at| at + 1);
    messages[after_answer..]
        .iter()
        .position(|message| message.role == Role::User)
        .map_or(messages.len(), |at| after_answer + at)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::provider::ToolCall;

    #[test]
    fn the_turn_starts_after_the_last_answer_in_words() {
        let call = ToolCall { id: "c".into(), name: "t".into(), arguments: json!({}) };
        let messages = vec![
            ChatMessage::system("s"),
            ChatMessage::user("old"),
            ChatMessage::assistant("old answer", vec![]),
            ChatMessage::user("now"),
            ChatMessage::assistant("", vec![call.clone()]),
            ChatMessage::tool_result(&call, "r"),
            // A message the user sent while the turn ran: still this turn.
            ChatMessage::user("and also"),
        ];
        assert_eq!(turn_start(&messages), 3);
        assert_eq!(turn_start(&messages[..2]), 1, "no answer yet: all of it is this turn");
        assert_eq!(turn_start(&messages[1..]), 0, "no system prompt: nothing is history");
    }
}
