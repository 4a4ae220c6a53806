//! Compaction: when a session's history grows long, old messages are folded into a summary.
//!
//! Runs after a turn's reply is delivered and acked, still inside the session's task, so the
//! session's next turn waits for it and always sees either the old history or the new summary,
//! never half of each; other sessions are unaffected. Across processes, the store's
//! compaction mark ([`Store::begin_compaction`]) keeps two compactions of one session apart.
//!
//! Steps: (1) a memory flush, a turn that may call only the file tools (offered the tools of
//! the turn before it, whose request it repeats for the provider's cache: [`Head`]), asked to
//! write lasting facts to the memory file of the session's scope (`MEMORY.md` in the owner's
//! direct chats, the chat's own file elsewhere, and only that file there), bounded by a
//! timeout, its reply never delivered and its messages never stored; (2) a model call that
//! summarises all but the most recent messages (with the previous summary), its request
//! starting as the flush's where it can ([`summary`]); (3) the summary is saved and the covered
//! transcript rows hidden from history. A failure before (3) leaves summary and transcript as
//! they were.
//!
//! Its calls go to the agent's chain in order (no session's `/model` pick), so it is measured
//! against and fitted to the window of the chain's first model ([`Target::primary`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use switchboard_channels::contract::{InboundMessage, SessionKey, Usage};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

mod summary;

pub use summary::{SUMMARY_INSTRUCTION, SUMMARY_PROMPT, render};

use super::{ContextEngine, Target};
use crate::agent::{Agent, Turn, Unwatched};
use crate::provider::{ChatMessage, ProviderError, Role, ToolChoice};
use crate::store::users::Billing;
use crate::store::{RunKind, RunStatus, RunStore, SessionStore, SideRun, StoreError};
use crate::tools::{PersonaAccess, ToolContext, ToolFilter};
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

/// The head of the memory flush's requests: a system prompt, the tools offered and the
/// conversation. After a turn, the turn's own (see [`Head::of_turn`]), so that the flush's
/// requests start as the turn's did and a provider's prompt cache (or a local server's one
/// slot) serves all of it; the flush can still call only the file tools (its tool context
/// allows no others). Without a turn (`/compact`), the minimal prompt with the file tools
/// ([`Head::minimal`], [`minimal_tools`]) and the session's history as a turn would see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub system_prompt: String,
    pub tools: ToolFilter,
    /// What the turn sent after the system prompt (its history, its input, the messages it
    /// added); empty: prepared from the stored history.
    pub conversation: Vec<ChatMessage>,
}

impl Head {
    /// The head of a turn that ran with `system_prompt`, offering `tools`, before its
    /// conversation is known (see [`Head::after`]).
    pub fn of_turn(system_prompt: String, tools: ToolFilter) -> Self {
        Self { system_prompt, tools, conversation: Vec::new() }
    }

    /// The head with the turn's conversation: the `history` its last call sent and its
    /// `transcript`. Prepared again from the stored rows, the history would be cut where the
    /// turn's own messages pass its room, and the flush would miss the cache from there on.
    pub fn after(self, history: Vec<ChatMessage>, transcript: &[ChatMessage]) -> Self {
        let mut conversation = history;
        conversation.extend_from_slice(transcript);
        Self { conversation, ..self }
    }

    /// The minimal prompt, built for `tools` (see [`minimal_tools`]).
    pub fn minimal(system_prompt: String, tools: ToolFilter) -> Self {
        Self { system_prompt, tools, conversation: Vec::new() }
    }
}

/// The tools a compaction without a turn before it (`/compact`) offers: the file tools, which
/// its flush may use; none when the agent's `tool_choice` is `none` (no call may use a tool).
pub fn minimal_tools(agent: &Agent) -> ToolFilter {
    match agent.settings().tool_choice {
        ToolChoice::None => ToolFilter::Only(BTreeSet::new()),
        _ => flush_filter(),
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
    let input = ChatMessage::user(flush_prompt(deps.memory));
    let head = deps.flush_head;
    let conversation = match head.conversation.is_empty() {
        false => head.conversation.clone(),
        true => {
            let target = Target::primary(deps.agent);
            let (prompt, tools) = (&head.system_prompt, &head.tools);
            deps.engine.prepare(target, key, prompt, history.clone(), previous.as_deref(), &input, tools).history
        }
    };
    let after_turn = summary::after_turn(deps, &conversation, &history[cut], &history[..cut]);
    // With `tool_choice = "none"` no call may ask for a tool: a flush could write nothing.
    if deps.agent.settings().tool_choice != ToolChoice::None {
        let flush = flush_memory(deps, msg, conversation, input).await;
        record(deps, msg, flush, 1).await;
    }
    let source = summary::Source {
        after_turn,
        previous: previous.as_deref(),
        messages: &history[..cut],
        name_speakers: msg.is_group,
    };
    let summary = summary::summarise(deps, msg, source).await?;
    let through_id = rows[cut - 1].0;
    deps.sessions.finish_compaction(key, &summary, through_id).await?;
    Ok(Outcome::Compacted { summarized: cut, through_id })
}

/// The memory flush turn. Its outcome is only logged: a failed flush loses nothing that the
/// summary does not keep, so the compaction goes on.
async fn flush_memory(
    deps: Deps<'_>,
    msg: &InboundMessage,
    conversation: Vec<ChatMessage>,
    input: ChatMessage,
) -> SideRun {
    let started_at = crate::clock::now();
    let head = deps.flush_head;
    let turn = Turn {
        system_prompt: head.system_prompt.clone(),
        history: conversation,
        input,
        ctx: flush_context(deps.agent, deps.session_key, msg, deps.memory),
        tools: head.tools.clone(),
        events: &Unwatched,
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
}
