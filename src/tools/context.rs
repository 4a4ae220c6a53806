//! What a tool knows about the run that calls it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use switchboard_channels::contract::{InboundKind, InboundMessage, Origin, SessionKey};

use super::ToolFilter;
use super::run_clock::RunClock;
use crate::config::Level;
use crate::workspace::memory::{MemoryScope, Reach};
use crate::workspace::protected::ProtectedFiles;

/// What a tool knows about the run that calls it.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    pub session_key: SessionKey,
    pub channel: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub run_id: String,
    /// The platform id of the person whose message started the run.
    pub sender_id: String,
    pub sender_name: String,
    /// The agent's workspace directory; file tools and `exec` work inside it.
    pub workspace: PathBuf,
    /// The name of the agent running the turn.
    pub agent: String,
    /// Whether the run's chat is a group (several people read the replies).
    pub is_group: bool,
    /// What started the run when switchboard did (a cron job, a heartbeat, a sub-agent's
    /// result); `None` for a person's message.
    pub origin: Option<Origin>,
    /// The tools this run may use; work the run starts (a sub-agent) gets no more than these.
    pub tools: ToolFilter,
    /// The person this run acts for (`telegram:42`): the sender, or for a system message the
    /// person whose job made it; `None` = the owner. Jobs and sub-agents started by the run
    /// act for the same person.
    pub on_behalf_of: Option<String>,
    /// Whose memory the run uses, decided by the worker from the chat: the file tools refuse
    /// other scopes' memory files. The default, [`MemoryScope::None`], refuses them all.
    pub memory: MemoryScope,
    /// How far the file tools reach within the scope.
    pub memory_reach: Reach,
    /// Whether the run may change the files every chat runs under (`[workspace] protected`).
    pub persona: PersonaAccess,
    /// The level the run acts with (a group's included): approvals ask those below owner.
    pub level: Level,
    /// The run's time limit, held still while a call waits for an approver.
    pub clock: RunClock,
    /// What the run knows as `outbox/`: its own folder (relative to the workspace), whose
    /// files go with its reply. `None` (sub-agents, the memory flush: no reply of their own):
    /// `outbox/` is refused.
    pub outbox: Option<PathBuf>,
}

/// Whether a run may change the workspace's protected files: the persona, instructions and
/// skills every chat of the agent runs under. Reading them is open to all.
#[derive(Debug, Clone)]
pub enum PersonaAccess {
    /// A run of an admin or the owner.
    Editable,
    /// Anyone else's: writing, editing or deleting these is refused.
    ReadOnly(Arc<ProtectedFiles>),
}

impl Default for PersonaAccess {
    /// Read-only with the default list: a run whose level nobody looked at fails closed.
    fn default() -> Self {
        Self::ReadOnly(Arc::new(ProtectedFiles::default()))
    }
}

impl PersonaAccess {
    /// The access of a run at `level` in a workspace protecting `protected`.
    pub fn for_level(level: Level, protected: &Arc<ProtectedFiles>) -> Self {
        if level >= Level::Admin { Self::Editable } else { Self::ReadOnly(Arc::clone(protected)) }
    }

    /// The protected files, when this run may not change them.
    pub fn read_only(&self) -> Option<&ProtectedFiles> {
        match self {
            Self::Editable => None,
            Self::ReadOnly(protected) => Some(protected),
        }
    }
}

impl ToolContext {
    /// The context of a run of the agent `agent` (working in `workspace`) answering `msg` in
    /// `session_key`, with the memory of `memory`.
    pub fn for_message(
        agent: &str,
        workspace: &Path,
        session_key: &SessionKey,
        msg: &InboundMessage,
        run_id: &str,
        memory: MemoryScope,
    ) -> Self {
        Self {
            session_key: session_key.to_owned(),
            channel: msg.channel.clone(),
            chat_id: msg.chat_id.clone(),
            thread_id: msg.thread_id.clone(),
            run_id: run_id.to_owned(),
            sender_id: msg.sender.id.clone(),
            sender_name: msg.sender.name.clone(),
            workspace: workspace.to_owned(),
            agent: agent.to_owned(),
            is_group: msg.is_group,
            origin: (msg.kind == InboundKind::System).then(|| msg.origin.clone().unwrap_or_default()),
            tools: ToolFilter::All,
            on_behalf_of: acting_for(msg),
            memory,
            memory_reach: Reach::Workspace,
            persona: PersonaAccess::default(),
            level: Level::default(),
            clock: RunClock::default(),
            outbox: None,
        }
    }
}

/// Whom a run of `msg` acts for: its sender, or the person named by a system message.
fn acting_for(msg: &InboundMessage) -> Option<String> {
    match msg.kind {
        InboundKind::User => Some(crate::config::Identity::new(&msg.channel, &msg.sender.id).to_string()),
        InboundKind::System => msg.on_behalf_of().map(str::to_owned),
    }
}
