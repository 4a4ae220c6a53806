//! Compaction: when a session's history grows long, old messages are folded into a summary.
//!
//! Runs after a turn's reply is delivered and acked, still inside the session's task, so the
//! session's next turn waits for it and always sees either the old history or the new summary,
//! never half of each; other sessions are unaffected. Across processes, the store's
//! compaction mark ([`Store::begin_compaction`]) keeps two compactions of one session apart.
//!
//! Steps: (1) a memory flush, a turn that may call only the file tools (offered the tools of the
//! turn before it, whose request it repeats for the provider's cache: [`Head`]), asked to write lasting
//! facts to the memory file of the session's scope (`MEMORY.md` in the owner's direct chats,
//! the chat's own file elsewhere, and only that file there), bounded by a timeout, its reply
//! never delivered and its messages never stored; (2) one model call that summarises all but the most recent messages (with
//! the previous summary); (3) the summary is saved and the covered transcript rows hidden
//! from history. A failure before (3) leaves summary and transcript as they were.
//!
//! Its calls go to the agent's chain in order (no session's `/model` pick), so it is measured
//! against and fitted to the window of the chain's first model ([`Target::primary`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use switchboard_channels::contract::{InboundMessage, RunEventBody, SessionKey, Usage};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use super::{ContextEngine, Target};
use crate::agent::{Agent, EventSink, Turn};
use crate::provider::pricing::CostTally;
use crate::provider::{ChatMessage, ChatResponse, ProviderError, Role};
use crate::store::users::Billing;
use crate::store::{RunKind, RunStatus, RunStore, SessionStore, SideRun, StoreError};
use crate::tools::{PersonaAccess, ToolContext, ToolFilter, truncate_middle};
use crate::workspace::memory::{MemoryScope, Reach};

/// The only tools the memory flush is offered.
pub const FILE_TOOLS: [&str; 4] = ["read_file", "write_file", "edit_file", "list_dir"];

/// The flush turn's instruction: it names the memory file of the session's scope.
pub fn flush_prompt(memory: &MemoryScope) -> String {
    let Some(file) = memory.file_shown() else {
        return "This conversation is about to be summarised. There is no memory file to write to here, \
                so reply only NO_REPLY."
            .to_owned();
    };
    let mut text = format!(
        "The earlier part of this conversation is about to be summarised and removed from your context. \
         Before that happens, write any lasting facts worth remembering (the user's preferences, decisions, \
         names, open tasks) to {file} in the workspace: read it first and add to it, do not repeat what is \
         already there. If there is nothing worth keeping, reply only NO_REPLY. This reply is not shown to \
         the user."
    );
    if !memory.is_owner() {
        text.push_str(&format!(
            " {file} is the memory of {}; it may not exist yet, and it is the only file you can use now.",
            memory.describe()
        ));
    }
    text
}

/// The summary call's instruction.
pub const SUMMARY_PROMPT: &str = "You summarise conversations for an assistant that will continue \
     them without seeing the original. Write a concise summary of the conversation below: the \
     decisions made, the facts learnt about the user and their work, and the tasks still open. \
     Fold in the previous summary when there is one. Reply with the summary only.";

/// Characters of one message kept in the text given to the summariser.
const MESSAGE_CHARS: usize = 2000;
/// The summariser reads at least this much of the conversation, however small the window.
const MIN_SUMMARY_CHARS: usize = 1000;
/// The share of the history's room a summary may take: with what a compaction keeps of recent
/// messages (`keep_recent_share`, a quarter by default), the history after a compaction holds
/// well under half its room, so the turns after it have room before the next one.
const SUMMARY_SHARE: f64 = 0.15;
/// A summary may always be this long, however small the window: shorter says too little.
const MIN_SUMMARY_TOKENS: u64 = 64;
/// Steps of the memory flush at most: read the memory file, write it, perhaps correct the
/// write, and answer. A model that keeps calling tools past that is not writing memory, and
/// every step re-sends the whole conversation.
const FLUSH_MAX_STEPS: u32 = 5;

#[derive(Debug, Error)]
pub enum CompactionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the summary call failed: {0}")]
    Model(#[from] ProviderError),
    #[error("the model returned an empty summary")]
    EmptySummary,
    #[error("the worker is shutting down")]
    Cancelled,
}

/// What [`compact_due`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    NotNeeded,
    /// Another compaction of the session is running.
    Busy,
    Compacted {
        summarized: usize,
        through_id: i64,
    },
}

/// What compaction works with.
#[derive(Clone, Copy)]
pub struct Deps<'a> {
    pub engine: &'a ContextEngine,
    /// Where the session's transcript, summary and compaction mark are.
    pub sessions: &'a dyn SessionStore,
    /// Where the flush and summary calls are recorded as side runs.
    pub runs: &'a dyn RunStore,
    pub agent: &'a Agent,
    /// The session's key: it records the agent the session belongs to.
    pub session_key: &'a SessionKey,
    /// The head of the memory flush's requests.
    pub flush_head: &'a Head,
    /// The session's memory scope: the flush writes there and nowhere else's.
    pub memory: &'a MemoryScope,
    /// Who pays for the flush and the summary: the person whose turn led to the compaction
    /// (or who asked for it); `None` for no one.
    pub billing: Option<&'a Billing>,
}

/// The head of the memory flush's requests: a system prompt and the tools offered. After a turn,
/// the turn's own (see [`Head::of_turn`]), so that the flush's requests start as the turn's did
/// and a provider's prompt cache (or a local server's one slot) serves all of it; the flush can
/// still call only the file tools (its tool context allows no others). Without a turn (`/compact`), the minimal prompt with the file
/// tools ([`Head::minimal`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub system_prompt: String,
    pub tools: ToolFilter,
}

impl Head {
    /// The head of a turn that ran with `system_prompt`, offering `tools`.
    pub fn of_turn(system_prompt: String, tools: ToolFilter) -> Self {
        Self { system_prompt, tools }
    }

    /// The minimal prompt, built for the file tools alone (see [`flush_filter`]).
    pub fn minimal(system_prompt: String) -> Self {
        Self { system_prompt, tools: flush_filter() }
    }
}

/// The tools the memory flush may use: the file tools only.
pub fn flush_filter() -> ToolFilter {
    ToolFilter::Only(FILE_TOOLS.iter().map(|&name| name.to_owned()).collect::<BTreeSet<_>>())
}

/// A session whose history is due for compaction: its rows as read, and where to cut them.
#[derive(Debug)]
pub struct Due {
    rows: Vec<(i64, ChatMessage)>,
    cut: usize,
}

/// `session_key`'s history cut for a compaction asked for now (`/compact`), whatever its
/// size: what a compaction keeps stays, and the rest is summarised; when all of it would stay,
/// everything before the newest exchange is. `None` when there is nothing before that.
pub async fn due_now(
    engine: &ContextEngine,
    store: &dyn SessionStore,
    agent: &Agent,
    session_key: &SessionKey,
    history_limit: usize,
) -> Result<Option<Due>, StoreError> {
    let rows = store.history_rows(session_key, history_limit).await?;
    let cut = split_for(engine, agent, &rows).or_else(|| last_exchange(&rows));
    Ok(cut.map(|cut| Due { rows, cut }))
}

/// Whether `session_key`'s history passes `max_messages` or `context_share` of the input
/// budget. Called after every turn, so it only reads the history: the rest a compaction needs
/// (the memory scope, the flush's prompt) is prepared by the caller only when one is due.
pub async fn due(
    engine: &ContextEngine,
    store: &dyn SessionStore,
    agent: &Agent,
    session_key: &SessionKey,
    history_limit: usize,
) -> Result<Option<Due>, StoreError> {
    let rows = store.history_rows(session_key, history_limit).await?;
    if !is_due(engine, agent, &rows) {
        return Ok(None);
    }
    let Some(cut) = split_for(engine, agent, &rows) else { return Ok(None) };
    // What stays (at least the newest exchange) must leave room for turns before the next
    // compaction: in a window that holds hardly two exchanges, every turn would compact, two
    // more model calls each time, where trimming the history costs nothing.
    let kept: u64 =
        rows[cut..].iter().map(|(_, message)| engine.calibration().messages(std::slice::from_ref(message))).sum();
    let trigger = engine.settings().compaction.context_share * engine.history_room(Target::primary(agent)) as f64;
    if kept as f64 > trigger / 2.0 {
        tracing::debug!(kept, "a compaction would keep too much to free room; the history is trimmed instead");
        return Ok(None);
    }
    Ok(Some(Due { rows, cut }))
}

/// Compacts a session [`due`] found due, unless another compaction of it is running.
pub async fn compact_due(
    deps: Deps<'_>,
    msg: &InboundMessage,
    due: Due,
    stop: &CancellationToken,
) -> Result<Outcome, CompactionError> {
    let key = deps.session_key;
    if !deps.sessions.begin_compaction(key).await? {
        return Ok(Outcome::Busy);
    }
    let result = tokio::select! {
        result = compact(deps, msg, &due.rows, due.cut) => result,
        () = stop.cancelled() => Err(CompactionError::Cancelled),
    };
    if result.is_err()
        && let Err(err) = deps.sessions.abort_compaction(key).await
    {
        tracing::warn!(%err, "cannot clear the compaction mark; it goes stale on its own");
    }
    result
}

fn is_due(engine: &ContextEngine, agent: &Agent, rows: &[(i64, ChatMessage)]) -> bool {
    let raw = rows.iter().map(|(_, message)| crate::tokens::raw_message(message)).sum();
    over_threshold(engine, agent, rows.len(), raw)
}

/// Whether a history of `count` messages, `raw` tokens by the heuristic, is due.
fn over_threshold(engine: &ContextEngine, agent: &Agent, count: usize, raw: u64) -> bool {
    let config = &engine.settings().compaction;
    if count > config.max_messages {
        return true;
    }
    engine.calibration().correct(raw) as f64 > config.context_share * engine.history_room(Target::primary(agent)) as f64
}

/// The history a turn read, as the compaction check after the turn needs it: each message's
/// heuristic token count, oldest first. Kept instead of reading the history again after
/// every turn, when only a few turns in a long conversation lead to a compaction.
#[derive(Debug, Clone, Default)]
pub struct HistoryShape(Vec<u64>);

impl HistoryShape {
    pub fn of(history: &[ChatMessage]) -> Self {
        Self(history.iter().map(crate::tokens::raw_message).collect())
    }

    /// Whether the history will be due once the turn's `transcript` is stored: [`due`] would
    /// find it so, reading the newest `history_limit` rows. When it says yes, [`due`] reads
    /// them to see where to cut.
    pub fn due_after(&self, engine: &ContextEngine, agent: &Agent, transcript: &[ChatMessage], limit: usize) -> bool {
        let added = transcript.iter().map(crate::tokens::raw_message);
        let all: Vec<u64> = self.0.iter().copied().chain(added).collect();
        let newest = &all[all.len().saturating_sub(limit)..];
        over_threshold(engine, agent, newest.len(), newest.iter().sum())
    }
}

/// How many of the oldest rows a compaction of `agent`'s session summarises (see
/// [`split_point`]): it keeps `keep_recent_share` of the input budget and at most
/// `keep_recent_messages`.
pub fn split_for(engine: &ContextEngine, agent: &Agent, rows: &[(i64, ChatMessage)]) -> Option<usize> {
    let config = &engine.settings().compaction;
    let keep_tokens = (config.keep_recent_share * engine.history_room(Target::primary(agent)) as f64) as u64;
    split_point(rows, keep_tokens, config.keep_recent_messages, engine.calibration())
}

/// How many of the oldest rows to summarise: all but the newest ones that fit in `keep_tokens`
/// (and `keep_messages`), the kept part starting at a user message, so a tool call and its
/// results stay on one side; at least the newest exchange is kept. `None` when nothing would
/// be summarised.
pub fn split_point(
    rows: &[(i64, ChatMessage)],
    keep_tokens: u64,
    keep_messages: usize,
    cal: &crate::tokens::Calibration,
) -> Option<usize> {
    let mut kept_tokens = 0;
    let mut cut = rows.len();
    while cut > 0 && rows.len() - cut < keep_messages {
        let tokens = cal.messages(std::slice::from_ref(&rows[cut - 1].1));
        if kept_tokens + tokens > keep_tokens {
            break;
        }
        kept_tokens += tokens;
        cut -= 1;
    }
    // Keep less rather than more: on to the next user message (but keep the newest exchange).
    while cut < rows.len() && rows[cut].1.role != Role::User {
        cut += 1;
    }
    let cut = if cut == rows.len() { last_exchange(rows)? } else { cut };
    (cut > 0).then_some(cut)
}

/// Where the newest exchange starts (its user message): all before it can be summarised.
fn last_exchange(rows: &[(i64, ChatMessage)]) -> Option<usize> {
    rows.iter().rposition(|(_, message)| message.role == Role::User).filter(|&at| at > 0)
}

async fn compact(
    deps: Deps<'_>,
    msg: &InboundMessage,
    rows: &[(i64, ChatMessage)],
    cut: usize,
) -> Result<Outcome, CompactionError> {
    let key = deps.session_key;
    let previous = deps.sessions.session_summary(key).await?.map(|summary| summary.text);
    let history: Vec<ChatMessage> = rows.iter().map(|(_, m)| m.clone()).collect();
    let old = render(previous.as_deref(), &history[..cut]);
    let flush = flush_memory(deps, msg, history, previous.as_deref()).await;
    record(deps, msg, flush, 1).await;
    let max_tokens = summary_max_tokens(deps);
    // Characters, as `truncate_middle` counts them.
    let mut room = summary_room(deps).min(old.chars().count());
    let mut call = 1;
    let answer = loop {
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
            answer => break answer,
        }
    };
    let summary = answer?.content;
    // A server that ignores `max_tokens` must not make every later turn carry a longer one.
    let summary = truncate_middle(summary.trim(), summary_max_chars(max_tokens));
    if summary.is_empty() {
        return Err(CompactionError::EmptySummary);
    }
    let through_id = rows[cut - 1].0;
    deps.sessions.finish_compaction(key, &summary, through_id).await?;
    Ok(Outcome::Compacted { summarized: cut, through_id })
}

/// The summary's bound: the configured one, within the agent's output reserve and within
/// [`SUMMARY_SHARE`] of the history's room. Every later turn
/// carries the summary: in a small local model's window, one as long as the answer limit would
/// leave the turns after it no room, and the next compaction would be due at once.
fn summary_max_tokens(deps: Deps<'_>) -> u32 {
    // At least 1: the config refuses 0, and settings built in code get the same floor.
    let configured = deps.engine.settings().compaction.summary_max_tokens.max(1);
    let target = Target::primary(deps.agent);
    let reserve = crate::config::output_reserve(deps.engine.window(target), deps.agent.settings().max_tokens);
    let share = SUMMARY_SHARE * deps.engine.history_room(target) as f64;
    let bound = reserve.min((share as u64).max(MIN_SUMMARY_TOKENS));
    u32::try_from(bound).map_or(configured, |bound| configured.min(bound.max(1)))
}

/// Characters of the conversation the summariser reads at most: what the window holds beside
/// the instruction and the summary, at the ratio of tokens to characters the provider's counts
/// have shown (a small model's tokenizer may count twice the heuristic), with a margin.
fn summary_room(deps: Deps<'_>) -> usize {
    let instruction = deps.engine.calibration().messages(&[ChatMessage::system(SUMMARY_PROMPT)]);
    let tokens = deps.engine.input_budget(Target::primary(deps.agent), 0).saturating_sub(instruction);
    // The heuristic counts four characters a token; three leaves a quarter for text that
    // tokenizes worse than what the calibration learnt from.
    let chars = tokens as f64 * 3.0 / deps.engine.calibration().ratio();
    (chars as usize).max(MIN_SUMMARY_CHARS)
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

/// The memory flush turn. Its outcome is only logged: a failed flush loses nothing that the
/// summary does not keep, so the compaction goes on.
async fn flush_memory(
    deps: Deps<'_>,
    msg: &InboundMessage,
    history: Vec<ChatMessage>,
    summary: Option<&str>,
) -> SideRun {
    let started_at = crate::clock::now();
    let input = ChatMessage::user(flush_prompt(deps.memory));
    let head = deps.flush_head;
    let prepared = deps.engine.prepare(
        Target::primary(deps.agent),
        deps.session_key,
        &head.system_prompt,
        history,
        summary,
        &input,
        &head.tools,
    );
    let turn = Turn {
        system_prompt: head.system_prompt.clone(),
        history: prepared.history,
        input,
        ctx: flush_context(deps.agent, deps.session_key, msg, deps.memory),
        tools: head.tools.clone(),
        events: &NoEvents,
        steer: None,
        max_iterations: Some(FLUSH_MAX_STEPS),
        name_speakers: msg.is_group,
        model: None,
        max_tokens: Some(deps.engine.answer_limit(Target::primary(deps.agent))),
        cache_key: Some(crate::provider::cache_key(&deps.agent.settings().name, deps.session_key)),
        budget: Some(deps.engine.run_budget(Target::primary(deps.agent))),
    };
    let timeout = deps.engine.settings().compaction.flush_timeout();
    let run = SideRun { started_at, ..side_run(deps, RunKind::MemoryFlush) };
    match tokio::time::timeout(timeout, deps.agent.run(turn)).await {
        Err(_) => {
            tracing::warn!(timeout_secs = timeout.as_secs(), "memory flush timed out");
            // What the calls used is lost with them: recorded as a failure without counts.
            let error = format!("timed out after {} s", timeout.as_secs());
            SideRun { status: RunStatus::Failed, error: Some(error), ..run }
        }
        Ok(result) => {
            match &result.error {
                Some(error) => tracing::warn!(%error, "memory flush failed"),
                None => tracing::info!(
                    wrote = wrote_a_file(&result.transcript),
                    iterations = result.iterations,
                    "memory flush done"
                ),
            }
            let status = if result.error.is_some() { RunStatus::Failed } else { RunStatus::Completed };
            SideRun {
                status,
                model: result.model,
                usage: result.usage,
                cost_usd: result.cost_usd,
                iterations: result.iterations,
                error: result.error,
                ..run
            }
        }
    }
}

/// Whether the flush wrote to its memory file (rather than answering that nothing was new):
/// a `write_file` or `edit_file` call whose result is not an error. A refused or failed write
/// wrote nothing.
fn wrote_a_file(transcript: &[ChatMessage]) -> bool {
    let writes: Vec<&str> = transcript
        .iter()
        .flat_map(|message| &message.tool_calls)
        .filter(|call| call.name == "write_file" || call.name == "edit_file")
        .map(|call| call.id.as_str())
        .collect();
    transcript.iter().any(|message| {
        message.role == Role::Tool
            && message.tool_call_id.as_deref().is_some_and(|id| writes.contains(&id))
            && !message.content.starts_with("error:")
    })
}

/// A side run of `kind` for this compaction, before its outcome is known.
fn side_run(deps: Deps<'_>, kind: RunKind) -> SideRun {
    SideRun {
        kind,
        session_key: deps.session_key.to_string(),
        inbound_id: String::new(),
        status: RunStatus::Completed,
        model: deps.agent.settings().model.clone(),
        usage: Usage::default(),
        cost_usd: None,
        iterations: 0,
        error: None,
        started_at: crate::clock::now(),
        billing: deps.billing.cloned(),
    }
}

/// The summary call as a side run: what it used and cost, or why it failed.
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

/// Records the `call`th side run of its kind of the compaction that followed `msg`'s turn
/// (logged, never fatal: the compaction goes on without its record).
async fn record(deps: Deps<'_>, msg: &InboundMessage, run: SideRun, call: u32) {
    let inbound_id = match call {
        1 => format!("{}:{}", msg.id, run.kind.as_str()),
        call => format!("{}:{}:{call}", msg.id, run.kind.as_str()),
    };
    let run = SideRun { inbound_id, ..run };
    if let Err(err) = deps.runs.record_side_run(&run).await {
        tracing::warn!(%err, kind = run.kind.as_str(), "cannot record a compaction's model call");
    }
}

/// Outside the owner's scope the flush reaches only the scope's memory file: its only job, and
/// what a conversation of strangers could otherwise steer into any workspace file.
fn flush_context(agent: &Agent, session_key: &SessionKey, msg: &InboundMessage, memory: &MemoryScope) -> ToolContext {
    let ctx = ToolContext::for_message(
        &agent.settings().name,
        &agent.settings().workspace,
        session_key,
        msg,
        &format!("{}:memory-flush", msg.id),
        memory.clone(),
    );
    // Only the owner's scope reaches past its own file; the persona is the owner's to change.
    let (memory_reach, persona) = match memory.is_owner() {
        true => (Reach::Workspace, PersonaAccess::Editable),
        false => (Reach::OwnFile, PersonaAccess::ReadOnly(Arc::clone(&agent.settings().protected))),
    };
    // switchboard's own work on the scope's memory: never waits for an approver.
    // It is offered the turn's tools (see [`Head`]) but may call the file tools only.
    ToolContext { memory_reach, persona, level: crate::config::Level::Owner, tools: flush_filter(), ..ctx }
}

/// The flush's events go nowhere: nobody is waiting for this turn.
struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _: RunEventBody) {}
}

/// The conversation as plain text for the summariser; long messages cut in the middle.
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
    fn a_refused_write_is_not_counted_as_written() {
        let call = |id: &str| crate::provider::ToolCall {
            id: id.to_owned(),
            name: "write_file".to_owned(),
            arguments: serde_json::json!({"path": "memory/x.md"}),
        };
        let refused = vec![
            ChatMessage::assistant("", vec![call("a")]),
            ChatMessage::tool_result(&call("a"), "error: refused: memory/x.md is not your memory file"),
            ChatMessage::assistant("NO_REPLY", Vec::new()),
        ];
        assert!(!wrote_a_file(&refused));
        let mut written = refused.clone();
        written.insert(2, ChatMessage::assistant("", vec![call("b")]));
        written.insert(3, ChatMessage::tool_result(&call("b"), "wrote memory/x.md (120 bytes)"));
        assert!(wrote_a_file(&written));
    }

    fn rows(messages: Vec<ChatMessage>) -> Vec<(i64, ChatMessage)> {
        messages.into_iter().zip(1..).map(|(m, id)| (id, m)).collect()
    }

    #[test]
    fn the_split_keeps_recent_messages_and_starts_them_at_a_user_message() {
        let call = crate::provider::ToolCall { id: "c".into(), name: "t".into(), arguments: serde_json::json!({}) };
        let rows = rows(vec![
            ChatMessage::user("1"),
            ChatMessage::assistant("a1", vec![]),
            ChatMessage::user("2"),
            ChatMessage::assistant("", vec![call.clone()]),
            ChatMessage::tool_result(&call, "r"),
            ChatMessage::assistant("a2", vec![]),
        ]);
        let cal = crate::tokens::Calibration::default();
        let split = |keep_messages| split_point(&rows, u64::MAX, keep_messages, &cal);
        // Kept from a user message on: fewer rather than more.
        assert_eq!(split(2), Some(2));
        assert_eq!(split(4), Some(2));
        // All would be kept: not due.
        assert_eq!(split(6), None);
        assert_eq!(split(0), Some(2), "the newest exchange always stays");
        // By tokens: the kept part fits the share.
        let one_message = cal.messages(std::slice::from_ref(&rows[5].1));
        assert_eq!(split_point(&rows, one_message, 100, &cal), Some(2));
        let only_first = vec![rows[0].clone(), rows[1].clone()];
        assert_eq!(split_point(&only_first, u64::MAX, 100, &cal), None, "one exchange: nothing to summarise");
    }

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
