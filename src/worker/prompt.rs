//! The system prompt of one run: the workspace files read fresh, the sender, the tools
//! offered. Building it is [`crate::prompt`]'s job; this only gathers the run's facts.

use switchboard_channels::contract::{InboundKind, InboundMessage};

use super::Shared;
use crate::agent::Agent;
use crate::prompt::{self, PromptInput, PromptMode, Sender};
use crate::tools::ToolFilter;
use crate::users::Level;
use crate::workspace::WorkspaceFiles;

/// The prompt for a run about `msg`: full mode for the main agent's turns, minimal mode for
/// housekeeping turns (the memory flush; later sub-agents and cron jobs).
pub(super) async fn system_prompt(
    shared: &Shared,
    agent: &Agent,
    msg: &InboundMessage,
    session_key: &str,
    level: Level,
    tools: &ToolFilter,
    mode: PromptMode,
) -> String {
    let tools = agent.tool_specs(tools);
    let agent = agent.settings();
    let settings = &shared.settings.prompt;
    let files = WorkspaceFiles::load(&agent.workspace, settings.max_file_chars, settings.memory_max_chars).await;
    let sender = match msg.kind {
        InboundKind::System => Sender::System,
        InboundKind::User => Sender::Person { id: &msg.sender.id, name: &msg.sender.name, level },
    };
    prompt::build(&PromptInput {
        mode,
        files: &files,
        workspace: &agent.workspace,
        tools: &tools,
        operator: &agent.system_prompt,
        sender,
        channel: &msg.channel,
        is_group: msg.is_group,
        mentioned: msg.mentioned,
        now: chrono::Utc::now(),
        timezone: settings.timezone,
        model: &agent.model,
        agent: &agent.name,
        session_key,
    })
}
