//! The agent's part of a run: the prompt fitted to the context window of the model the turn
//! calls first (the session's `/model` pick, else the chain's first), the history chosen within
//! it, the agent loop. When a model's server refuses a call as too long and names a window
//! smaller than the configured one, the chain learns it for that model (see
//! [`crate::context::Windows`]); a turn that failed on the window of the model it was fitted to
//! runs once more within it, so a local model with the default configuration still answers.

use switchboard_channels::contract::{InboundMessage, SessionKey};

use super::TurnRunner;
use crate::agent::{Agent, EventSink, SteerReceiver, Turn, TurnResult};
use crate::config::Level;
use crate::context::Target;
use crate::context::compaction::{Head, HistoryShape};
use crate::provider::ChatMessage;
use crate::store::{SessionHead, StoreError};
use crate::tools::run_clock::RunClock;
use crate::tools::{PersonaAccess, ToolContext, ToolFilter};
use crate::workspace::memory::MemoryScope;

/// What a turn is about.
pub(super) struct TurnPlan<'a> {
    pub agent: &'a Agent,
    pub msg: &'a InboundMessage,
    pub run_id: &'a str,
    pub session_key: &'a SessionKey,
    /// The tools the sender may use.
    pub tools: ToolFilter,
    /// The level the turn runs at (a group's raises it): whether it may change the persona,
    /// whether its calls need an approver.
    pub level: Level,
    /// Its time limit, held still while a call waits for an approver.
    pub clock: RunClock,
    pub input: ChatMessage,
    /// Whose memory the turn reads and writes (decided by the worker, see docs/memory.md).
    pub memory: MemoryScope,
    /// The chain entry the chat picked with `/model`; `None` = the chain's order.
    pub model: Option<String>,
}

/// A turn that ran, and whether its session is due for compaction once it is stored.
pub(super) struct Ran {
    pub result: TurnResult,
    pub compaction: Option<CompactionDue>,
}

/// A turn after which its session is due for compaction.
#[derive(Debug, Clone, Default)]
pub(super) struct CompactionDue {
    /// The turn's head, which the memory flush's requests start with; `None` when the turn
    /// called a model the chat picked first (the flush calls the chain in order, fitted to the
    /// window of its first model).
    pub head: Option<Head>,
}

/// Runs the turn (see the module docs) in the memory scope of its plan; store errors reading
/// the history are the caller's. `session_head`: the session's, when its task read it just before.
pub(super) async fn run_agent(
    turns: &TurnRunner,
    plan: &TurnPlan<'_>,
    session_head: Option<SessionHead>,
    events: &dyn EventSink,
    steer: &mut SteerReceiver,
) -> Result<Ran, StoreError> {
    let recalled = super::recall::recall(turns, plan.agent, plan.msg, &plan.input.content, || tool_context(plan)).await;
    let recalled = recalled.as_deref();
    let target = Target::new(plan.agent, plan.model.as_deref());
    let window = turns.context.window(target);
    let (mut result, mut history, mut head) = attempt(turns, plan, session_head, recalled, events, steer).await?;
    // The chain learns what a server names, for the model it named it for: a fallback's
    // refusal leaves this window as it was, and the turn is not run again for it.
    let shrank = turns.context.window(target) < window;
    super::windows::save(turns.store.as_ref(), &turns.context).await;
    if shrank && result.overflowed {
        tracing::info!(limit = ?result.context_limit, "running the turn again within the window the model server named");
        let first = result;
        (result, history, head) = attempt(turns, plan, None, recalled, events, steer).await?;
        result.usage.add(first.usage);
    }
    let limit = turns.settings.history_limit;
    let due = history.due_after(&turns.context, plan.agent, &result.transcript, limit);
    let compaction = due.then(|| {
        let head = head.after(std::mem::take(&mut result.history), &result.transcript);
        CompactionDue { head: plan.model.is_none().then_some(head) }
    });
    Ok(Ran { result, compaction })
}

/// The tools' view of the turn, before the tools offered are chosen.
fn tool_context(plan: &TurnPlan<'_>) -> ToolContext {
    let settings = plan.agent.settings();
    let memory = plan.memory.clone();
    let ctx =
        ToolContext::for_message(&settings.name, &settings.workspace, plan.session_key, plan.msg, plan.run_id, memory);
    let persona = PersonaAccess::for_level(plan.level, &settings.protected);
    let outbox = Some(crate::workspace::outbox::run_folder(plan.run_id));
    ToolContext { persona, level: plan.level, clock: plan.clock.clone(), outbox, ..ctx }
}

async fn attempt(
    turns: &TurnRunner,
    plan: &TurnPlan<'_>,
    session_head: Option<SessionHead>,
    recalled: Option<&str>,
    events: &dyn EventSink,
    steer: &mut SteerReceiver,
) -> Result<(TurnResult, HistoryShape, Head), StoreError> {
    let TurnPlan { agent, msg, session_key, .. } = *plan;
    let target = Target::new(agent, plan.model.as_deref());
    let memory = &plan.memory;
    let limit = turns.settings.history_limit;
    let conversation = match session_head {
        Some(read) => turns.store.conversation_from(session_key, limit, read).await?,
        None => turns.store.conversation(session_key, limit).await?,
    };
    let (history, summary) = (conversation.history, conversation.summary);
    let run = super::prompt::PromptFor { msg, session_key, memory };
    let mut input = ChatMessage { recalled: recalled.map(str::to_owned), ..plan.input.clone() };
    let summary = summary.as_ref().map(|s| s.text.as_str());
    let (system_prompt, tools) =
        super::prompt::fitted_prompt(turns, target, &run, plan.tools.clone(), summary, &mut input).await;
    let shape = HistoryShape::of(&history);
    let prepared = turns.context.prepare(target, session_key, &system_prompt, history, summary, &input, &tools);
    let head = Head::of_turn(system_prompt.clone(), tools.clone());
    let turn = Turn {
        system_prompt,
        history: prepared.history,
        input,
        ctx: ToolContext { tools: tools.clone(), ..tool_context(plan) },
        tools,
        events,
        steer: Some(steer),
        max_iterations: None,
        name_speakers: msg.is_group,
        model: plan.model.clone(),
        max_tokens: Some(turns.context.answer_limit(target)),
        cache_key: Some(crate::provider::cache_key(&agent.settings().name, session_key)),
        budget: Some(turns.context.run_budget(target)),
    };
    let result = agent.run(turn).await;
    // Estimates teach the estimator nothing.
    if result.error.is_none() && !result.usage.estimated {
        turns.context.learn(prepared.raw_base, &result);
    }
    Ok((result, shape, head))
}
