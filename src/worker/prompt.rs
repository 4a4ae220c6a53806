//! The system prompt of one run: the workspace files read fresh, the sender, the tools
//! offered. Building it is [`crate::prompt`]'s job; this only gathers the run's facts.

use switchboard_channels::contract::{InboundKind, InboundMessage};

use super::Shared;
use crate::agent::Agent;
use crate::config::Level;
use crate::prompt::{self, PromptInput, PromptMode, Sender};
use crate::provider::ChatMessage;
use crate::tools::ToolFilter;
use crate::workspace::WorkspaceFiles;
use crate::workspace::memory::MemoryScope;
use crate::workspace::skills::Catalog;

/// What a prompt is for: the message a run answers, in which session, for whom.
pub(super) struct PromptFor<'a> {
    pub msg: &'a InboundMessage,
    pub session_key: &'a str,
    /// The sender's level, as the prompt tells the model.
    pub level: Level,
    /// Whose memory the prompt shows.
    pub memory: &'a MemoryScope,
    /// What the new message recalled from memory (`[memory] recall`): a section at the end of
    /// the prompt.
    pub recalled: Option<&'a str>,
}

/// The prompt for a run about `run.msg`: full mode for the main agent's turns, minimal mode
/// for housekeeping turns (the memory flush; later sub-agents and cron jobs).
pub(super) async fn system_prompt(
    shared: &Shared,
    agent: &Agent,
    run: &PromptFor<'_>,
    tools: &ToolFilter,
    skills: &Catalog,
    mode: PromptMode,
) -> String {
    let PromptFor { msg, session_key, level, memory, recalled } = *run;
    let tools = agent.tool_specs(tools);
    let agent = agent.settings();
    let settings = &shared.settings.prompt;
    let files =
        WorkspaceFiles::load(&agent.workspace, settings.max_file_chars, settings.memory_max_chars, memory).await;
    let sender = match msg.kind {
        InboundKind::System => Sender::System,
        InboundKind::User => Sender::Person { id: &msg.sender.id, name: &msg.sender.name, level },
    };
    let prompt = prompt::build(&PromptInput {
        mode,
        files: &files,
        workspace: &agent.workspace,
        tools: &tools,
        skills,
        operator: &agent.system_prompt,
        sender,
        channel: &msg.channel,
        is_group: msg.is_group,
        mentioned: msg.mentioned,
        memory,
        now: chrono::Utc::now(),
        timezone: settings.timezone,
        model: &agent.model,
        agent: &agent.name,
        session_key,
    });
    match recalled {
        Some(recalled) => format!("{prompt}\n\n{recalled}"),
        None => prompt,
    }
}

/// A person's turn's system prompt and tools, fitted to the model's context window. A window too
/// small for the whole prompt and every tool schema degrades in this order (documented in
/// docs/local-models.md): the minimal prompt, then tool schemas dropped largest first, until
/// the fixed part leaves room for the conversation; what the message recalled from memory goes
/// last, only when even no tool leaves room for it.
pub(super) async fn fitted_prompt(
    shared: &Shared,
    agent: &Agent,
    run: &PromptFor<'_>,
    tools: ToolFilter,
    input: &ChatMessage,
) -> (String, ToolFilter) {
    let engine = &shared.context;
    let super::offer::Offer { tools, skills } = super::offer::offer(agent, tools, shared.settings.mcp_inline_max).await;
    let full = system_prompt(shared, agent, run, &tools, &skills, PromptMode::Full).await;
    if engine.fixed_part_fits(agent, &full, agent.tool_tokens(&tools), input) {
        return (full, tools);
    }
    // A small model calls memory_search least reliably, and tools it calls badly at best:
    // recall (turned on by the operator) is how it keeps its memory, so it outlasts the tools.
    let mut fitted = fit_tools(shared, agent, run, &tools, &skills, input).await;
    if !fitted.fits && run.recalled.is_some() {
        fitted = fit_tools(shared, agent, &PromptFor { recalled: None, ..*run }, &tools, &skills, input).await;
    }
    engine.windows().note_degraded(&agent.settings().name, &fitted.dropped, fitted.fits);
    (fitted.prompt, fitted.tools)
}

/// The minimal prompt with the tools that fit beside it.
struct Fitted {
    prompt: String,
    tools: ToolFilter,
    dropped: Vec<String>,
    fits: bool,
}

/// The minimal prompt for `run`, with tool schemas dropped largest first until it fits.
async fn fit_tools(
    shared: &Shared,
    agent: &Agent,
    run: &PromptFor<'_>,
    tools: &ToolFilter,
    skills: &Catalog,
    input: &ChatMessage,
) -> Fitted {
    let engine = &shared.context;
    // Built with every tool, this prompt lists more tools than it will: an upper bound.
    let minimal = system_prompt(shared, agent, run, tools, skills, PromptMode::Minimal).await;
    let mut offered = agent.tool_tokens_each(tools);
    offered.sort_by_key(|(_, tokens)| std::cmp::Reverse(*tokens));
    let mut tool_tokens: u64 = offered.iter().map(|(_, tokens)| tokens).sum();
    let mut dropped = Vec::new();
    while !offered.is_empty() && !engine.fixed_part_fits(agent, &minimal, tool_tokens, input) {
        let (name, tokens) = offered.remove(0);
        tool_tokens -= tokens;
        dropped.push(name);
    }
    let fits = engine.fixed_part_fits(agent, &minimal, tool_tokens, input);
    if dropped.is_empty() {
        return Fitted { prompt: minimal, tools: tools.clone(), dropped, fits };
    }
    let kept = ToolFilter::Only(offered.into_iter().map(|(name, _)| name).collect());
    let prompt = system_prompt(shared, agent, run, &kept, skills, PromptMode::Minimal).await;
    Fitted { prompt, tools: kept, dropped, fits }
}
