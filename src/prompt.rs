//! The system prompt, assembled per run from sections, and the context line of each message
//! ([`context`]).
//!
//! The system prompt holds only what stays the same from one turn of a chat to the next: the
//! time, the speaker, the model and recalled memory go with the message instead (see
//! [`context`] for why). Each section is a function of the run ([`PromptInput`]) that returns
//! its text or `None`, so which sections a run gets is decided in one visible place per
//! section and tests can check each one. The main agent gets every section ([`PromptMode::Full`]), also for cron
//! turns and heartbeats, whose answers go to a chat; sub-agents and the memory flush get the
//! few they need ([`PromptMode::Minimal`]), which keeps their prompts short and free of
//! chat-only rules (silent replies, heartbeats).

pub mod context;
mod sections;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;
use switchboard_channels::contract::SessionKey;

use crate::config::Level;
use crate::provider::ToolSpec;
use crate::workspace::WorkspaceFiles;
use crate::workspace::memory::MemoryScope;
use crate::workspace::skills::Catalog;
use crate::zone::Tz;

pub use context::TurnContext;
pub use sections::HEARTBEAT_OK;
pub use sections::SECTIONS;

/// How much of the prompt a run gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptMode {
    /// The main agent answering a chat: every section.
    Full,
    /// Sub-agents and small context windows: identity, tooling, safety, workspace, how
    /// messages are introduced, and runtime only.
    Minimal,
}

/// What the worker needs, from the config, to build prompts.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSettings {
    /// The time zone context lines give the time in.
    pub timezone: Tz,
    /// Characters kept of each bootstrap file (from its start).
    pub max_file_chars: usize,
    /// Characters kept of `MEMORY.md` (from its end: the newest facts).
    pub memory_max_chars: usize,
}

impl Default for PromptSettings {
    fn default() -> Self {
        Self { timezone: Tz::UTC, max_file_chars: 8000, memory_max_chars: 8000 }
    }
}

/// Who sent the message a run answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sender<'a> {
    /// A person on a channel.
    Person { id: &'a str, name: &'a str, level: Level },
    /// switchboard itself: a cron job, a heartbeat or a sub-agent's result.
    System,
}

/// Everything a run's prompt is made from: what is the same for every turn of its chat.
#[derive(Debug, Clone)]
pub struct PromptInput<'a> {
    pub mode: PromptMode,
    pub files: &'a WorkspaceFiles,
    pub workspace: &'a Path,
    /// The tools offered in this run (already filtered by the sender's level).
    pub tools: &'a [Arc<ToolSpec>],
    /// The skills the agent may use; listed when `skill_get` is offered and `skill_search` is not.
    pub skills: &'a Catalog,
    /// `agent.system_prompt`: the operator's own instructions.
    pub operator: &'a str,
    /// Who sent the message: only whether a person did counts here (the rest is in the
    /// message's context line).
    pub sender: Sender<'a>,
    pub channel: &'a str,
    pub is_group: bool,
    /// Whose memory the run uses: `files.memory` is this scope's file, and only the owner's
    /// scope has `USER.md` and `MEMORY.md`.
    pub memory: &'a MemoryScope,
    pub agent: &'a str,
    pub session_key: &'a SessionKey,
}

/// The system prompt for a run: its sections in order, separated by blank lines.
pub fn build(input: &PromptInput<'_>) -> String {
    SECTIONS.iter().filter_map(|(_, section)| section(input)).collect::<Vec<_>>().join("\n\n")
}
