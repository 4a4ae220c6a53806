//! The system prompt of one run: the workspace files read fresh, the sender, the tools
//! offered. Building it is [`crate::prompt`]'s job; this only gathers the run's facts.

use switchboard_channels::contract::{InboundKind, InboundMessage, SessionKey};

use super::TurnRunner;
use crate::agent::Agent;
use crate::config::Level;
use crate::context::Target;
use crate::prompt::{self, PromptInput, PromptMode, Sender, TurnContext};
use crate::provider::ChatMessage;
use crate::tools::ToolFilter;
use crate::workspace::WorkspaceFiles;
use crate::workspace::memory::MemoryScope;
use crate::workspace::skills::Catalog;

/// What a prompt is for: the message a run answers, in which session, for whom.
pub(super) struct PromptFor<'a> {
    pub msg: &'a InboundMessage,
    pub session_key: &'a SessionKey,
    /// Whose memory the prompt shows.
    pub memory: &'a MemoryScope,
}

/// The prompt for a run about `run.msg`: full mode for the main agent's turns, minimal mode
/// for small context windows and housekeeping turns. It is the same for every turn of the
/// chat (the time and the speaker go in the message's context line: [`context_line`]).
pub(super) async fn system_prompt(
    turns: &TurnRunner,
    agent: &Agent,
    run: &PromptFor<'_>,
    tools: &ToolFilter,
    skills: &Catalog,
    mode: PromptMode,
) -> String {
    let PromptFor { msg, session_key, memory } = *run;
    let tools = agent.tool_specs(tools);
    let agent = agent.settings();
    let settings = &turns.settings.prompt;
    let files =
        WorkspaceFiles::load(&agent.workspace, settings.max_file_chars, settings.memory_max_chars, memory).await;
    prompt::build(&PromptInput {
        mode,
        files: &files,
        workspace: &agent.workspace,
        tools: &tools,
        skills,
        operator: &agent.system_prompt,
        sender: sender(msg, Level::Guest),
        channel: &msg.channel,
        is_group: msg.is_group,
        memory,
        agent: &agent.name,
        session_key,
    })
}

/// The context line of the message a turn answers (see [`crate::prompt::context`]): the time
/// now, the sender at `level`, the chat, and `model`, the model asked first.
pub(super) fn context_line(turns: &TurnRunner, msg: &InboundMessage, level: Level, model: &str) -> String {
    TurnContext {
        now: turns.access.get().now(),
        timezone: turns.settings.prompt.timezone.clone(),
        sender: sender(msg, level),
        several_people: super::batch::merged_with_names(msg),
        channel: &msg.channel,
        is_group: msg.is_group,
        mentioned: msg.mentioned,
        model,
    }
    .line()
}

fn sender(msg: &InboundMessage, level: Level) -> Sender<'_> {
    match msg.kind {
        InboundKind::System => Sender::System,
        InboundKind::User => Sender::Person { id: &msg.sender.id, name: &msg.sender.name, level },
    }
}

/// A person's turn's system prompt and tools, fitted to the model's context window. A window too
/// small for the whole prompt and every tool schema degrades in this order (documented in
/// docs/local-models.md): the minimal prompt, then tool schemas dropped (an MCP server's
/// before switchboard's own, largest first), until the fixed part leaves room for the
/// conversation; what `input` recalled from memory goes last, only when even no tool leaves
/// room for it (it is then taken off `input`). A session keeps a degraded fit until it is
/// compacted (`summary` changes), while the fit still holds: a new estimate or a short message
/// must not change the head of every request that follows.
pub(super) async fn fitted_prompt(
    turns: &TurnRunner,
    target: Target<'_>,
    run: &PromptFor<'_>,
    tools: ToolFilter,
    summary: Option<&str>,
    input: &mut ChatMessage,
) -> (String, ToolFilter) {
    let (engine, agent) = (&turns.context, target.agent);
    let super::offer::Offer { tools, skills } = super::offer::offer(agent, tools, turns.settings.mcp_inline_max).await;
    if let Some(kept) = engine.kept_tools(target, run.session_key, summary, &tools) {
        let prompt = system_prompt(turns, agent, run, &kept, &skills, PromptMode::Minimal).await;
        if engine.fixed_part_fits(target, &prompt, agent.tool_tokens(&kept), input) {
            return (prompt, kept);
        }
    }
    let full = system_prompt(turns, agent, run, &tools, &skills, PromptMode::Full).await;
    if engine.fixed_part_fits(target, &full, agent.tool_tokens(&tools), input) {
        return (full, tools);
    }
    let fitted = degrade(turns, target, run, &tools, &skills, input).await;
    engine.keep_tools(target, run.session_key, summary, &tools, fitted.tools.clone());
    (fitted.prompt, fitted.tools)
}

/// The minimal prompt with the tools that fit beside it: see [`fitted_prompt`].
async fn degrade(
    turns: &TurnRunner,
    target: Target<'_>,
    run: &PromptFor<'_>,
    tools: &ToolFilter,
    skills: &Catalog,
    input: &mut ChatMessage,
) -> Fitted {
    let (engine, agent) = (&turns.context, target.agent);
    // A small model calls memory_search least reliably, and tools it calls badly at best:
    // recall (turned on by the operator) is how it keeps its memory, so it outlasts the tools.
    let mut fitted = fit_tools(turns, target, run, tools, skills, input).await;
    if !fitted.fits && input.recalled.is_some() {
        input.recalled = None;
        fitted = fit_tools(turns, target, run, tools, skills, input).await;
    }
    let window = engine.window(target);
    engine.windows().note_degraded(&agent.settings().name, target.model, window, &fitted.dropped, fitted.fits);
    fitted
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
    turns: &TurnRunner,
    target: Target<'_>,
    run: &PromptFor<'_>,
    tools: &ToolFilter,
    skills: &Catalog,
    input: &ChatMessage,
) -> Fitted {
    let (engine, agent) = (&turns.context, target.agent);
    // Built with every tool, this prompt lists more tools than it will: an upper bound.
    let minimal = system_prompt(turns, agent, run, tools, skills, PromptMode::Minimal).await;
    let mut offered = in_drop_order(agent.tool_tokens_each(tools));
    let mut tool_tokens: u64 = offered.iter().map(|(_, tokens)| tokens).sum();
    let mut dropped = Vec::new();
    while !offered.is_empty() && !engine.fixed_part_fits(target, &minimal, tool_tokens, input) {
        let (name, tokens) = offered.remove(0);
        tool_tokens -= tokens;
        dropped.push(name);
    }
    let fits = engine.fixed_part_fits(target, &minimal, tool_tokens, input);
    if dropped.is_empty() {
        return Fitted { prompt: minimal, tools: tools.clone(), dropped, fits };
    }
    let kept = ToolFilter::Only(offered.into_iter().map(|(name, _)| name).collect());
    let prompt = system_prompt(turns, agent, run, &kept, skills, PromptMode::Minimal).await;
    Fitted { prompt, tools: kept, dropped, fits }
}

/// The tools a turn keeps longest when the window is small: the workspace files and `message`.
const CORE_TOOLS: [&str; 5] = ["read_file", "write_file", "edit_file", "list_dir", "message"];

/// Tools with their schemas' tokens, in the order they are dropped to fit a small window: an
/// MCP server's (`<server>__<tool>`) first, then switchboard's own, the core ones last; largest
/// first within each tier.
fn in_drop_order(mut tools: Vec<(String, u64)>) -> Vec<(String, u64)> {
    tools.sort_by_key(|(name, tokens)| (drop_tier(name), std::cmp::Reverse(*tokens)));
    tools
}

/// See [`in_drop_order`].
fn drop_tier(name: &str) -> u8 {
    if name.contains("__") {
        0
    } else if CORE_TOOLS.contains(&name) {
        2
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_tools_are_dropped_first_and_the_core_tools_last_largest_first_within_each() {
        let tools = [
            ("read_file", 300),
            ("message", 150),
            ("exec", 400),
            ("files__search", 100),
            ("cron", 900),
            ("list_dir", 120),
            ("files__read_everything", 2000),
            ("write_file", 500),
            ("web_fetch", 250),
            ("docs__lookup", 700),
        ];
        let order = in_drop_order(tools.iter().map(|&(name, tokens)| (name.to_owned(), tokens)).collect());
        let names: Vec<&str> = order.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "files__read_everything",
                "docs__lookup",
                "files__search",
                "cron",
                "exec",
                "web_fetch",
                "write_file",
                "read_file",
                "message",
                "list_dir",
            ]
        );
    }
}
