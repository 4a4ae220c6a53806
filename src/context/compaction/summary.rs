//! The summary call of a compaction, in one of two forms.
//!
//! **After the turn** (the usual one): the request starts as the memory flush's did, and so as
//! the turn's (its system prompt, its tools, the conversation as the model saw it), cut before
//! the messages the compaction keeps, and ends with the instruction to summarise. A provider's
//! prompt cache, or a local server's one slot, then serves all of it but the instruction, and
//! the turn after the compaction still shares the system prompt with it. **Detached** (when
//! that form cannot be used or did not give a summary): a short system prompt of its own and
//! the conversation rendered as text, cut in the middle to what the window holds.

use chrono::{DateTime, Utc};
use switchboard_channels::contract::InboundMessage;

use super::{CompactionError, Deps, record, side_run};
use crate::context::Target;
use crate::provider::pricing::CostTally;
use crate::provider::{ChatMessage, ChatResponse, ProviderError, Role, ToolChoice};
use crate::store::{RunKind, RunStatus, SideRun};
use crate::tools::truncate_middle;

/// The detached summary call's system prompt.
pub const SUMMARY_PROMPT: &str = "You summarise conversations for an assistant that will continue \
     them without seeing the original. Write a concise summary of the conversation below: the \
     decisions made, the facts learnt about the user and their work, and the tasks still open. \
     Fold in the previous summary when there is one. Reply with the summary only.";

/// The instruction that ends the summary request after the turn.
pub const SUMMARY_INSTRUCTION: &str = "The conversation so far is about to be replaced by a summary, \
     which you will see instead of it from now on. Write that summary now: a concise account of the \
     decisions made, the facts learnt about the user and their work, and the tasks still open, \
     folding in the earlier summary if there is one. Do not call any tool. Reply with the summary only.";

/// Characters of one message kept in the text given to the detached summariser.
const MESSAGE_CHARS: usize = 2000;
/// The detached summariser reads at least this much of the conversation, however small the window.
const MIN_SUMMARY_CHARS: usize = 1000;
/// The share of the history's room a summary may take: with what a compaction keeps of recent
/// messages (`keep_recent_share`, a quarter by default), the history after a compaction holds
/// well under half its room, so the turns after it have room before the next one.
const SUMMARY_SHARE: f64 = 0.15;
/// A summary may always be this long, however small the window: shorter says too little.
const MIN_SUMMARY_TOKENS: u64 = 64;

/// What the summary of a compaction is made from.
pub(super) struct Source<'a> {
    /// The request after the turn, when it can be made (see [`after_turn`]).
    pub after_turn: Option<AfterTurn>,
    /// The previous summary and the messages to summarise, as they are stored.
    pub previous: Option<&'a str>,
    pub messages: &'a [ChatMessage],
    /// A group: speakers are named as in the turns.
    pub name_speakers: bool,
}

/// The summary request after the turn: the flush's conversation before the messages the
/// compaction keeps, and what of the messages to summarise it no longer shows (cut from the
/// history to fit the window), rendered as text into the instruction at its end, where it
/// changes nothing of what the cache serves.
pub(super) struct AfterTurn {
    conversation: Vec<ChatMessage>,
    left_out: Vec<ChatMessage>,
    /// Characters of the left-out messages' text that fit beside the conversation.
    left_out_room: usize,
}

/// The summary, bounded as [`summary_max_tokens`] says. Each call is recorded as a side run.
pub(super) async fn summarise(
    deps: Deps<'_>,
    msg: &InboundMessage,
    source: Source<'_>,
) -> Result<String, CompactionError> {
    let max_tokens = summary_max_tokens(deps);
    let mut call = 1;
    let mut summary = None;
    if let Some(request) = source.after_turn {
        summary = after_the_turn(deps, msg, request, source.name_speakers, max_tokens).await?;
        call += 1;
    }
    let summary = match summary {
        Some(summary) => summary,
        None => detached(deps, msg, source.previous, source.messages, max_tokens, call).await?,
    };
    // A server that ignores `max_tokens` must not make every later turn carry a longer one.
    let summary = truncate_middle(summary.trim(), summary_max_chars(max_tokens));
    if summary.is_empty() {
        return Err(CompactionError::EmptySummary);
    }
    Ok(summary)
}

/// The request after the turn from the flush's `conversation`, where `first_kept` is the first
/// message the compaction keeps and `to_summarise` the stored messages before it. `None` when
/// the tool choice would force a tool call, when the conversation does not show the stored
/// messages as they are (it shows a message to summarise, then every later one), or when what
/// it left out does not fit beside it.
pub(super) fn after_turn(
    deps: Deps<'_>,
    conversation: &[ChatMessage],
    first_kept: &ChatMessage,
    to_summarise: &[ChatMessage],
) -> Option<AfterTurn> {
    if matches!(deps.agent.settings().tool_choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return None;
    }
    let before = &conversation[..conversation.iter().rposition(|message| same(message, first_kept))?];
    // The previous summary (a system message) comes first; then the oldest message shown.
    let first_shown = before.iter().find(|message| message.role != Role::System)?;
    let from = to_summarise.iter().position(|message| same(message, first_shown))?;
    let users = |messages: &[ChatMessage]| messages.iter().filter(|message| message.role == Role::User).count();
    if users(before) != users(&to_summarise[from..]) {
        return None;
    }
    let left_out = to_summarise[..from].to_vec();
    let left_out_room = if left_out.is_empty() { 0 } else { left_out_room(deps, before) };
    if !left_out.is_empty() && left_out_room < MIN_SUMMARY_CHARS {
        return None;
    }
    Some(AfterTurn { conversation: before.to_vec(), left_out, left_out_room })
}

/// Whether two messages are one message of the transcript: the history may shorten tool
/// results, never a user's or an answer's text.
fn same(one: &ChatMessage, other: &ChatMessage) -> bool {
    one.role == other.role && one.content == other.content && one.author == other.author
}

/// Characters of left-out messages the request after the turn has room for beside `before`, as
/// [`summary_room`] counts them.
fn left_out_room(deps: Deps<'_>, before: &[ChatMessage]) -> usize {
    let target = Target::primary(deps.agent);
    let head = deps.flush_head;
    let budget = deps.engine.input_budget(target, deps.agent.tool_tokens(&head.tools));
    let system = ChatMessage::system(head.system_prompt.as_str());
    let instruction = ChatMessage::user(SUMMARY_INSTRUCTION);
    let calibration = deps.engine.calibration();
    let sent = calibration.messages(std::slice::from_ref(&system))
        + calibration.messages(before)
        + calibration.messages(std::slice::from_ref(&instruction));
    chars_for(deps, budget.saturating_sub(sent))
}

/// The summary request after the turn: `None` when the model called a tool, answered nothing,
/// or the request did not fit its window (the detached form is asked next).
async fn after_the_turn(
    deps: Deps<'_>,
    msg: &InboundMessage,
    request: AfterTurn,
    name_speakers: bool,
    max_tokens: u32,
) -> Result<Option<String>, ProviderError> {
    let head = deps.flush_head;
    let mut messages = Vec::with_capacity(request.conversation.len() + 2);
    messages.push(ChatMessage::system(head.system_prompt.as_str()));
    messages.extend(request.conversation);
    let mut instruction = SUMMARY_INSTRUCTION.to_owned();
    if !request.left_out.is_empty() {
        let text = render(None, &request.left_out);
        instruction.push_str(&format!(
            " Include these earlier messages, which are no longer shown above:\n\n{}\n",
            truncate_middle(&text, request.left_out_room)
        ));
    }
    messages.push(ChatMessage::user(format!("{instruction} {}", length_note(max_tokens))));
    let cache_key = crate::provider::cache_key(&deps.agent.settings().name, deps.session_key);
    let started_at = crate::clock::now();
    let answer =
        deps.agent.call_as_turn(&messages, &head.tools, name_speakers, max_tokens, Some(cache_key.as_str())).await;
    record(deps, msg, summary_run(deps, started_at, &answer), 1).await;
    match answer {
        Ok(response) if response.tool_calls.is_empty() && !response.content.trim().is_empty() => {
            Ok(Some(response.content))
        }
        Ok(_) => {
            tracing::info!("the summary request after the turn got a tool call or nothing; asking the detached form");
            Ok(None)
        }
        Err(ProviderError::ContextOverflow(_)) => {
            tracing::info!("the summary request after the turn was too long for the window; asking the detached form");
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

/// The detached summary request, the `call`th summary call of this compaction.
async fn detached(
    deps: Deps<'_>,
    msg: &InboundMessage,
    previous: Option<&str>,
    messages: &[ChatMessage],
    max_tokens: u32,
    mut call: u32,
) -> Result<String, ProviderError> {
    let old = render(previous, messages);
    // Characters, as `truncate_middle` counts them.
    let mut room = summary_room(deps).min(old.chars().count());
    loop {
        let text = format!("{}\n\n{}", truncate_middle(&old, room), length_note(max_tokens));
        let request = vec![ChatMessage::system(SUMMARY_PROMPT), ChatMessage::user(text)];
        let started_at = crate::clock::now();
        let answer = deps.agent.complete(request, max_tokens).await;
        record(deps, msg, summary_run(deps, started_at, &answer), call).await;
        call += 1;
        // The provider's tokenizer may count more than the calibration has seen (tool output,
        // JSON, other scripts): once refused as too long, the summariser reads half as much.
        match answer {
            Err(ProviderError::ContextOverflow(_)) if room > MIN_SUMMARY_CHARS => {
                tracing::info!(chars = room, "the summary call was too long for the window; asking again with half");
                room /= 2;
            }
            answer => return answer.map(|response| response.content),
        }
    }
}

/// The summary's bound: the configured one, within the agent's output reserve and within
/// [`SUMMARY_SHARE`] of the history's room. Every later turn carries the summary: in a small
/// local model's window, one as long as the answer limit would leave the turns after it no
/// room, and the next compaction would be due at once.
fn summary_max_tokens(deps: Deps<'_>) -> u32 {
    // At least 1: the config refuses 0, and settings built in code get the same floor.
    let configured = deps.engine.settings().compaction.summary_max_tokens.max(1);
    let target = Target::primary(deps.agent);
    let reserve = crate::config::output_reserve(deps.engine.window(target), deps.agent.settings().max_tokens);
    let share = SUMMARY_SHARE * deps.engine.history_room(target) as f64;
    let bound = reserve.min((share as u64).max(MIN_SUMMARY_TOKENS));
    u32::try_from(bound).map_or(configured, |bound| configured.min(bound.max(1)))
}

/// Characters of the conversation the detached summariser reads at most: what the window holds
/// beside the instruction and the summary, at the ratio of tokens to characters the provider's
/// counts have shown (a small model's tokenizer may count twice the heuristic), with a margin.
fn summary_room(deps: Deps<'_>) -> usize {
    let instruction = deps.engine.calibration().messages(&[ChatMessage::system(SUMMARY_PROMPT)]);
    let tokens = deps.engine.input_budget(Target::primary(deps.agent), 0).saturating_sub(instruction);
    chars_for(deps, tokens).max(MIN_SUMMARY_CHARS)
}

/// The characters of conversation text that `tokens` hold at the calibration's ratio.
fn chars_for(deps: Deps<'_>, tokens: u64) -> usize {
    // The heuristic counts four characters a token; three leaves a quarter for text that
    // tokenizes worse than what the calibration learnt from.
    (tokens as f64 * 3.0 / deps.engine.calibration().ratio()) as usize
}

/// What the summariser is told of its bound, in words (about three quarters of a token each
/// in English): a model that knows it writes a shorter summary, rather than one cut off at
/// `max_tokens` in mid-sentence.
fn length_note(max_tokens: u32) -> String {
    format!("Write at most {} words.", (u64::from(max_tokens) * 3 / 4).max(1))
}

/// About four characters a token, as the usage estimate counts.
fn summary_max_chars(max_tokens: u32) -> usize {
    usize::try_from(max_tokens).unwrap_or(usize::MAX).saturating_mul(4)
}

/// A summary call as a side run: what it used and cost, or why it failed.
fn summary_run(deps: Deps<'_>, started_at: DateTime<Utc>, answer: &Result<ChatResponse, ProviderError>) -> SideRun {
    let run = SideRun { started_at, iterations: 1, ..side_run(deps, RunKind::Summary) };
    match answer {
        Ok(response) => {
            let prices = &deps.agent.settings().prices;
            let mut cost = CostTally::new(prices);
            cost.add(prices, &response.model, response.usage);
            let model = if response.model.is_empty() { run.model.clone() } else { response.model.clone() };
            SideRun { model, usage: response.usage, cost_usd: cost.total(), ..run }
        }
        Err(err) => SideRun { status: RunStatus::Failed, error: Some(err.to_string()), ..run },
    }
}

/// The conversation as plain text for the detached summariser; long messages cut in the middle.
pub fn render(previous: Option<&str>, messages: &[ChatMessage]) -> String {
    let mut text = String::new();
    if let Some(previous) = previous {
        text.push_str(&format!("Previous summary:\n{previous}\n\n"));
    }
    text.push_str("Conversation:\n");
    for message in messages {
        let who = match message.role {
            Role::System => "system".to_owned(),
            // Named, so the summary can keep who said what in a group.
            Role::User => match &message.author {
                Some(author) => format!("user {}", author.label()),
                None => "user".to_owned(),
            },
            Role::Assistant => "assistant".to_owned(),
            Role::Tool => format!("tool {}", message.name.as_deref().unwrap_or("result")),
        };
        text.push_str(&format!("{who}: {}\n", truncate_middle(&message.content, MESSAGE_CHARS)));
        for call in &message.tool_calls {
            let arguments = truncate_middle(&call.arguments.to_string(), MESSAGE_CHARS);
            text.push_str(&format!("assistant called {}({arguments})\n", call.name));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rendered_conversation_names_speakers_and_tools() {
        let call = crate::provider::ToolCall {
            id: "c".into(),
            name: "read_file".into(),
            arguments: serde_json::json!({"path": "a"}),
        };
        let text = render(
            Some("old facts"),
            &[
                ChatMessage::user("hi"),
                ChatMessage::user_by(crate::provider::Author { id: "222".into(), name: "Bob".into() }, "me too"),
                ChatMessage::assistant("", vec![call.clone()]),
                ChatMessage::tool_result(&call, "x".repeat(5000)),
            ],
        );
        assert!(text.starts_with("Previous summary:\nold facts\n"), "{text}");
        assert!(text.contains("user: hi\nuser Bob (id 222): me too\n"), "{text}");
        assert!(text.contains("user: hi\n") && text.contains("assistant called read_file({\"path\":\"a\"})"), "{text}");
        assert!(text.contains("tool read_file: ") && text.len() < 2500, "{}", text.len());
    }
}
