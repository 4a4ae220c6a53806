//! One sub-agent's task: wait for a slot, run the agent on the task with the minimal prompt,
//! keep the lease alive meanwhile, then record the end and announce it.

use std::collections::BTreeSet;
use std::sync::Arc;

use switchboard_channels::contract::{Origin, SessionKey, Usage};
use tokio_util::sync::CancellationToken;

use super::{ORIGIN_KIND, RUN_ID_PREFIX, SHUTDOWN_ERROR, SubagentManager, WITHHELD_TOOLS};
use crate::agent::{Agent, Turn, Unwatched};
use crate::config::Identity;
use crate::prompt::{self, PromptInput, PromptMode, Sender};
use crate::provider::ChatMessage;
use crate::store::subagents::{NewSubagent, Renewal, SubagentEnd, SubagentStatus};
use crate::store::users::Billing;
use crate::tools::{PersonaAccess, ToolContext, ToolFilter};
use crate::users::month_key;
use crate::workspace::WorkspaceFiles;
use crate::workspace::memory::{MemoryScope, Reach};

/// What a sub-agent's task needs: its record as created, and its tools.
pub(super) struct Job {
    pub record: NewSubagent,
    pub tools: ToolFilter,
    /// The spawning run's memory scope.
    pub memory: MemoryScope,
    /// Whether the spawning run could change the protected files.
    pub persona: PersonaAccess,
    /// The spawning run's level: its approvals are asked as the parent's would be.
    pub level: crate::config::Level,
}

/// How the task ended.
#[expect(clippy::large_enum_variant, reason = "one short-lived value per sub-agent task")]
enum Ending {
    End(SubagentEnd),
    /// The record is no longer this worker's (a reaper ended it): record nothing.
    Gone,
}

/// The parent's tools that the agent has, minus the withheld ones.
pub(super) fn subagent_tools(agent: &Agent, parent: &ToolFilter) -> ToolFilter {
    let mut names: BTreeSet<String> = agent
        .tool_names()
        .into_iter()
        .filter(|name| parent.allows(name) && !WITHHELD_TOOLS.contains(&name.as_str()))
        .collect();
    // What the parent could call only through `mcp_call`, the sub-agent can too.
    names.extend(parent.via_call_entries().cloned());
    ToolFilter::Only(names)
}

pub(super) async fn run(manager: Arc<SubagentManager>, job: Job, cancel: CancellationToken) {
    let id = job.record.id.clone();
    // `biased`: a stop that arrived together with the result wins, so a cancelled sub-agent
    // is never announced.
    let ending = tokio::select! {
        biased;
        _ = manager.stopping.cancelled() => Ending::End(ended(SubagentStatus::Failed, None, Some(SHUTDOWN_ERROR.into()))),
        _ = cancel.cancelled() => Ending::End(cancelled()),
        renewal = keep_lease(&manager, &id) => match renewal {
            Renewal::Gone => Ending::Gone,
            _ => Ending::End(cancelled()),
        },
        end = work(&manager, &job) => Ending::End(end),
    };
    manager.forget(&id);
    let end = match ending {
        Ending::Gone => {
            tracing::warn!(subagent = %id, "sub-agent record ended elsewhere (lease lost); dropping its result");
            return;
        }
        Ending::End(end) => end,
    };
    tracing::info!(subagent = %id, status = end.status.as_str(), error = ?end.error,
        input_tokens = end.usage.input_tokens, output_tokens = end.usage.output_tokens, cost_usd = ?end.cost_usd,
        "sub-agent ended");
    match manager.store.finish_subagent(&id, &manager.worker_id, &end, manager.now()).await {
        Ok(true) if end.status != SubagentStatus::Cancelled => {
            manager.announce_ended(&id).await;
        }
        Ok(true) => {}
        Ok(false) => tracing::warn!(subagent = %id, "sub-agent was already ended elsewhere; not announcing"),
        // The lease is no longer renewed: the reaper reports it as lost, never silently.
        Err(err) => tracing::error!(subagent = %id, %err, "cannot record the sub-agent's end"),
    }
}

/// An end without a model turn to account for (or whose turn was cut off).
fn ended(status: SubagentStatus, result: Option<String>, error: Option<String>) -> SubagentEnd {
    SubagentEnd { status, result, error, usage: Usage::default(), cost_usd: None, billing: None }
}

fn cancelled() -> SubagentEnd {
    ended(SubagentStatus::Cancelled, None, Some("cancelled by /stop".into()))
}

/// Renews the lease every third of it; returns when the record is gone or cancelling was
/// requested (by `/stop` on any worker). Store errors are logged and retried: a lease that
/// runs out meanwhile is reported by the reaper.
async fn keep_lease(manager: &SubagentManager, id: &str) -> Renewal {
    let every = manager.settings.renew_every();
    loop {
        tokio::time::sleep(every).await;
        match manager.store.renew_subagent_lease(id, &manager.worker_id, manager.lease_until()).await {
            Ok(Renewal::Renewed) => {}
            Ok(other) => return other,
            Err(err) => tracing::warn!(subagent = %id, %err, "cannot renew the sub-agent's lease"),
        }
    }
}

/// Waits for a slot, marks the record running and runs the agent within the time limit.
async fn work(manager: &SubagentManager, job: &Job) -> SubagentEnd {
    let record = &job.record;
    // Held until the sub-agent ends; the semaphore is never closed.
    let Ok(_slot) = manager.slots.acquire().await else {
        return ended(SubagentStatus::Failed, None, Some(SHUTDOWN_ERROR.into()));
    };
    match manager.store.start_subagent(&record.id, &manager.worker_id, manager.now(), manager.lease_until()).await {
        Ok(true) => {}
        // No longer queued: cancelled (cancel_requested) before it could start.
        Ok(false) => return cancelled(),
        Err(err) => return ended(SubagentStatus::Failed, None, Some(format!("cannot start: {err}"))),
    }
    let Some(agent) = manager.agent(&record.parent_agent) else {
        let error = format!("the agent {:?} is not available", record.parent_agent);
        return ended(SubagentStatus::Failed, None, Some(error));
    };
    tracing::info!(subagent = %record.id, "sub-agent running");
    let turn_prompt = system_prompt(manager, &agent, job).await;
    let turn = Turn {
        system_prompt: turn_prompt,
        history: Vec::new(),
        input: ChatMessage {
            context: Some(context_line(manager, &agent, record)),
            ..ChatMessage::user(task_message(&record.task))
        },
        ctx: tool_context(&agent, job),
        tools: job.tools.clone(),
        // Its steps are not shown in the chat; only its result is announced.
        events: &Unwatched,
        steer: None,
        max_iterations: Some(manager.settings.max_iterations),
        name_speakers: false,
        model: None,
        // A sub-agent runs on the configured window; its own max_tokens, else the default reserve.
        max_tokens: Some(agent.settings().max_tokens.unwrap_or(crate::config::DEFAULT_OUTPUT_RESERVE as u32)),
        cache_key: None,
        // Its older tool results are shortened to fit, as a turn's are: a sub-agent has no
        // history for an overflow to drop.
        budget: manager.run_budget(&agent),
    };
    let limit = manager.settings.timeout;
    match tokio::time::timeout(limit, agent.run(turn)).await {
        Err(_) => {
            let error = format!("did not finish within {} s and was stopped", limit.as_secs_f64().ceil());
            ended(SubagentStatus::TimedOut, None, Some(error))
        }
        Ok(result) => {
            let end = match result.error {
                None => ended(SubagentStatus::Completed, Some(result.reply), None),
                Some(error) => ended(SubagentStatus::Failed, Some(result.reply).filter(|r| !r.is_empty()), Some(error)),
            };
            SubagentEnd { usage: result.usage, cost_usd: result.cost_usd, billing: billing(manager, record), ..end }
        }
    }
}

/// Whose budget a sub-agent's usage counts against: the person it acts for, like the run that
/// started it; the owner's (no one's) when it acts for nobody in particular.
fn billing(manager: &SubagentManager, record: &NewSubagent) -> Option<Billing> {
    let person = record.on_behalf_of.as_deref()?;
    match person.parse::<Identity>() {
        // Counted for the person only: a sub-agent's record does not say which configured
        // group (a Discord server, say) its parent ran in.
        Ok(identity) => Some(Billing { identity, month: month_key(manager.now()), group: None }),
        Err(err) => {
            tracing::warn!(subagent = %record.id, %err, "the sub-agent acts for an invalid person; its usage is not counted");
            None
        }
    }
}

/// The user message a sub-agent answers: it sees its task, not the conversation.
fn task_message(task: &str) -> String {
    format!(
        "You are a sub-agent: the main agent gave you one task to do on your own. Nobody reads \
         your questions, so do not ask any; do the task with your tools and answer with its \
         result, complete and concise. Your answer goes back to the main agent.\n\nTask: {task}"
    )
}

/// The task's context line: the time, and that switchboard sent it (see `prompt::context`).
fn context_line(manager: &SubagentManager, agent: &Agent, record: &NewSubagent) -> String {
    prompt::TurnContext {
        now: manager.now(),
        timezone: manager.settings.prompt.timezone.clone(),
        sender: Sender::System,
        several_people: false,
        channel: &record.chat.channel,
        is_group: record.chat.is_group,
        mentioned: false,
        model: &agent.settings().model,
    }
    .line()
}

/// The minimal prompt (identity, tools, safety, workspace, context lines, runtime).
async fn system_prompt(manager: &SubagentManager, agent: &Agent, job: &Job) -> String {
    let record = &job.record;
    let specs = agent.tool_specs(&job.tools);
    let settings = agent.settings();
    let caps = &manager.settings.prompt;
    let files =
        WorkspaceFiles::load(&settings.workspace, caps.max_file_chars, caps.memory_max_chars, &job.memory).await;
    // Read only when the sub-agent may load a skill, as for a turn (`worker::offer`).
    let skills = match specs.iter().any(|spec| spec.name == crate::tools::skills::SKILL_GET) {
        true => crate::workspace::skills::load(&settings.workspace, &settings.skills.allow).await,
        false => Default::default(),
    };
    let session_key = own_session(record);
    prompt::build(&PromptInput {
        mode: PromptMode::Minimal,
        files: &files,
        workspace: &settings.workspace,
        tools: &specs,
        skills: &skills,
        operator: &settings.system_prompt,
        sender: Sender::System,
        channel: &record.chat.channel,
        is_group: record.chat.is_group,
        memory: &job.memory,
        agent: &settings.name,
        session_key: &session_key,
    })
}

/// The sub-agent's tool context: its own run id (which tells tools it is a sub-agent), the
/// parent's chat and memory scope, and its reduced tools.
fn tool_context(agent: &Agent, job: &Job) -> ToolContext {
    let (record, tools) = (&job.record, &job.tools);
    let run_id = format!("{RUN_ID_PREFIX}{}", record.id);
    ToolContext {
        session_key: own_session(record),
        channel: record.chat.channel.clone(),
        chat_id: record.chat.chat_id.clone(),
        thread_id: record.chat.thread_id.clone(),
        run_id,
        sender_id: "switchboard".into(),
        sender_name: "switchboard".into(),
        workspace: agent.settings().workspace.clone(),
        agent: agent.settings().name.clone(),
        is_group: record.chat.is_group,
        origin: Some(Origin { kind: ORIGIN_KIND.into(), id: record.id.clone() }),
        tools: tools.clone(),
        on_behalf_of: record.on_behalf_of.clone(),
        memory: job.memory.clone(),
        memory_reach: Reach::Workspace,
        persona: job.persona.clone(),
        level: job.level,
        clock: Default::default(),
        // Its result goes to the parent's chat in a run of its own: nothing to attach to.
        outbox: None,
    }
}

/// A sub-agent's own session: named by its run id alone, whatever its agent, so that its
/// tools know they run in a sub-agent.
fn own_session(record: &NewSubagent) -> SessionKey {
    SessionKey::stored(format!("{RUN_ID_PREFIX}{}", record.id))
}
