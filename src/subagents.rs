//! Sub-agents: background runs of an agent on one self-contained task, started by the
//! `spawn` tool ([`tool::SpawnTool`]), whose result comes back to the session that started
//! them as a system message (`subagent:<id>`) for the main agent to pass on.
//!
//! A sub-agent runs as a tokio task in the worker process that received the `spawn` call.
//! Its record in the store ([`crate::store::subagents`]) is what makes it reliable beyond that
//! process: the worker holds a lease on it and renews it; `/stop` on another worker reaches it
//! through `cancel_requested`; and when the worker dies, any worker's reaper ([`SubagentManager::tick`])
//! finds the expired lease and reports the sub-agent as failed. Nothing is silently forgotten.
//!
//! Shutdown: [`SubagentManager::shutdown`] stops the running sub-agents, records them as
//! failed ("interrupted: switchboard shut down") and announces that, while the bus is still
//! there. Leaving them to the reaper would report them only after a restart and a full lease;
//! announcing at once lets another worker (or this one, after a restart) tell the user now.

mod announce;
mod run;
pub mod tool;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use switchboard_channels::Bus;
use switchboard_channels::contract::{ChatAddress, SessionKey};
use thiserror::Error;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::agent::Agent;
use crate::clock::{Clock, to_store_precision};
use crate::config::SubagentsConfig;
use crate::prompt::PromptSettings;
use crate::store::StoreError;
use crate::store::subagents::{Created, NewSubagent, SubagentStore};
use crate::tools::{PersonaAccess, ToolFilter};
use crate::workspace::memory::MemoryScope;

pub use announce::{TickReport, announcement};

/// `origin.kind` of a sub-agent's announcement.
pub const ORIGIN_KIND: &str = "subagent";

/// Tools a sub-agent never gets: it must not talk to people, start sub-agents or schedule jobs.
pub const WITHHELD_TOOLS: [&str; 3] = ["message", "spawn", "cron"];

/// Start of a sub-agent's run id (`subagent:<id>`), by which a tool knows it runs in one.
pub const RUN_ID_PREFIX: &str = "subagent:";

/// The error a sub-agent whose worker died is recorded with.
pub const LOST_ERROR: &str = "the worker running it stopped before it finished";

/// The error a sub-agent stopped by a shutdown is recorded with.
pub const SHUTDOWN_ERROR: &str = "interrupted: switchboard shut down";

/// How long [`SubagentManager::shutdown`] waits for sub-agents to record and announce their end.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// Limits and timings of sub-agents (`[subagents]`).
#[derive(Debug, Clone)]
pub struct SubagentSettings {
    pub max_iterations: u32,
    pub max_children_per_session: usize,
    /// Sub-agents running at once in this process; the rest wait `queued`.
    pub max_concurrent: usize,
    pub timeout: Duration,
    /// How long a claim lasts without renewal; renewed every third of it.
    pub lease: Duration,
    pub max_result_chars: usize,
    /// Time zone and file caps for the sub-agents' (minimal) prompts.
    pub prompt: PromptSettings,
}

impl Default for SubagentSettings {
    fn default() -> Self {
        Self::from_config(&SubagentsConfig::default(), PromptSettings::default())
    }
}

impl SubagentSettings {
    pub fn from_config(config: &SubagentsConfig, prompt: PromptSettings) -> Self {
        Self {
            max_iterations: config.max_iterations,
            max_children_per_session: config.max_children_per_session,
            max_concurrent: config.max_concurrent,
            timeout: config.timeout(),
            lease: config.lease(),
            max_result_chars: config.max_result_chars,
            prompt,
        }
    }

    fn renew_every(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(100))
    }
}

/// Why a sub-agent was not started. The text goes back to the model.
#[derive(Debug, Error)]
pub enum SpawnError {
    #[error("a sub-agent cannot start sub-agents; do the work yourself")]
    Nested,
    #[error(
        "this conversation already has {live} sub-agents queued or running (at most {max}); wait for one to report back"
    )]
    SessionFull { live: usize, max: usize },
    #[error("switchboard is shutting down; try again later")]
    ShuttingDown,
    #[error("the agent {0:?} cannot run sub-agents in this worker")]
    UnknownAgent(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What the spawning run asks for.
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    /// The spawning run's full session key (`ToolContext::session_key`).
    pub parent_session: SessionKey,
    pub parent_agent: String,
    /// Where the spawning run's replies go; the result is announced there.
    pub chat: ChatAddress,
    pub label: String,
    pub task: String,
    /// The person the spawning run acts for (`ToolContext::on_behalf_of`).
    pub on_behalf_of: Option<String>,
    /// The spawning run's tools; the sub-agent gets these minus [`WITHHELD_TOOLS`].
    pub tools: ToolFilter,
    /// The spawning run's memory scope (`ToolContext::memory`), which the sub-agent keeps: one
    /// started from a group cannot reach the owner's memory either.
    pub memory: MemoryScope,
    /// Whether the spawning run could change the protected files; the sub-agent can no more.
    pub persona: PersonaAccess,
    /// The spawning run's level, for the sub-agent's approvals.
    pub level: crate::config::Level,
}

/// A sub-agent this process runs, as `/stop` needs to find it.
struct Live {
    parent_session: SessionKey,
    cancel: CancellationToken,
}

/// Starts, limits, cancels and reports sub-agents; one per worker process.
pub struct SubagentManager {
    store: Arc<dyn SubagentStore>,
    bus: Arc<dyn Bus>,
    clock: Clock,
    settings: SubagentSettings,
    /// This process's name on the records it runs (their lease holder).
    worker_id: String,
    /// The agents sub-agents run as, set once after they are built. The agents hold the
    /// `spawn` tool, which holds this manager, which needs the agents: the cycle is broken by
    /// building the manager first and attaching the agents later. Weak, so the agents and the
    /// manager do not keep each other alive.
    /// Replaced as a whole by a config reload (the new agents' `spawn` tools hold this same
    /// manager).
    agents: RwLock<HashMap<String, Weak<Agent>>>,
    slots: Arc<Semaphore>,
    live: Mutex<HashMap<String, Live>>,
    tasks: tokio::sync::Mutex<JoinSet<()>>,
    /// Cancelled by [`SubagentManager::shutdown`].
    stopping: CancellationToken,
    /// The worker's context engine, for the budget inside which a sub-agent's run shortens
    /// its older tool results (see [`SubagentManager::use_context`]); unset: no budget.
    context: std::sync::OnceLock<Arc<crate::context::ContextEngine>>,
}

impl SubagentManager {
    pub fn new(
        store: Arc<dyn SubagentStore>,
        bus: Arc<dyn Bus>,
        clock: Clock,
        settings: SubagentSettings,
    ) -> Arc<Self> {
        let worker_id = format!("{}-{}", std::process::id(), uuid::Uuid::now_v7().simple());
        Arc::new(Self {
            slots: Arc::new(Semaphore::new(settings.max_concurrent.max(1))),
            store,
            bus,
            clock,
            settings,
            worker_id,
            agents: RwLock::default(),
            live: Mutex::new(HashMap::new()),
            tasks: tokio::sync::Mutex::new(JoinSet::new()),
            stopping: CancellationToken::new(),
            context: std::sync::OnceLock::new(),
        })
    }

    /// Gives the manager the worker's context engine (once; a reload keeps the engine), so a
    /// sub-agent's run is fitted to its model's window like a turn's.
    pub fn use_context(&self, engine: Arc<crate::context::ContextEngine>) {
        // Already set: the same worker's engine.
        let _ = self.context.set(engine);
    }

    /// The tokens a run of `agent` may send, when the worker's engine is known.
    fn run_budget(&self, agent: &Agent) -> Option<u64> {
        let engine = self.context.get()?;
        Some(engine.run_budget(crate::context::Target::primary(agent)))
    }

    /// Gives the manager the agents its sub-agents run as (again after a config reload).
    pub fn attach<'a>(&self, agents: impl IntoIterator<Item = &'a Arc<Agent>>) {
        let by_name = agents.into_iter().map(|agent| (agent.settings().name.clone(), Arc::downgrade(agent))).collect();
        *self.agents.write().unwrap_or_else(PoisonError::into_inner) = by_name;
    }

    pub fn settings(&self) -> &SubagentSettings {
        &self.settings
    }

    /// The name this process holds its sub-agents' leases under.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    fn agent(&self, name: &str) -> Option<Arc<Agent>> {
        self.agents.read().unwrap_or_else(PoisonError::into_inner).get(name)?.upgrade()
    }

    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        to_store_precision((self.clock)())
    }

    fn lease_until(&self) -> chrono::DateTime<chrono::Utc> {
        let lease = chrono::Duration::from_std(self.settings.lease).unwrap_or(chrono::Duration::MAX);
        self.now().checked_add_signed(lease).unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
    }

    /// Queues a sub-agent and starts its task; returns its id at once.
    pub async fn spawn(self: &Arc<Self>, request: SpawnRequest) -> Result<String, SpawnError> {
        if self.stopping.is_cancelled() {
            return Err(SpawnError::ShuttingDown);
        }
        let agent =
            self.agent(&request.parent_agent).ok_or_else(|| SpawnError::UnknownAgent(request.parent_agent.clone()))?;
        let id = uuid::Uuid::now_v7().to_string();
        let new = NewSubagent {
            id: id.clone(),
            session: isolated_session(&request.parent_session, &request.parent_agent, &request.chat),
            parent_session: request.parent_session.to_string(),
            parent_agent: request.parent_agent.clone(),
            chat: request.chat.clone(),
            label: request.label.clone(),
            on_behalf_of: request.on_behalf_of.clone(),
            task: request.task.clone(),
            worker: self.worker_id.clone(),
        };
        let max = self.settings.max_children_per_session;
        if let Created::SessionFull { live } =
            self.store.create_subagent(&new, max, self.now(), self.lease_until()).await?
        {
            return Err(SpawnError::SessionFull { live, max });
        }
        let cancel = CancellationToken::new();
        self.lock_live()
            .insert(id.clone(), Live { parent_session: request.parent_session.clone(), cancel: cancel.clone() });
        let tools = run::subagent_tools(&agent, &request.tools);
        let job = run::Job {
            record: new,
            tools,
            memory: request.memory.clone(),
            persona: request.persona.clone(),
            level: request.level,
        };
        let mut tasks = self.tasks.lock().await;
        while tasks.try_join_next().is_some() {}
        let span = tracing::info_span!("subagent", subagent = %id, parent = %request.parent_session);
        tasks.spawn(run::run(Arc::clone(self), job, cancel).instrument(span));
        tracing::info!(subagent = %id, parent = %request.parent_session, label = %request.label, "sub-agent queued");
        Ok(id)
    }

    /// Cancels the queued and running sub-agents of `parent_session` (`/stop`, `/new`): those
    /// of this process at once, those of other workers at their next lease renewal. Returns
    /// how many were cancelled. They are recorded `cancelled` and not announced.
    pub async fn cancel_session(&self, parent_session: &SessionKey) -> usize {
        // The store first: a local sub-agent cancelled before it would end its record and
        // no longer be counted.
        let mut ids: Vec<String> = match self.store.request_subagent_cancel(parent_session).await {
            Ok(ids) => ids,
            Err(err) => {
                tracing::warn!(%err, session = %parent_session, "cannot ask other workers to cancel sub-agents");
                Vec::new()
            }
        };
        let local: Vec<(String, CancellationToken)> = self
            .lock_live()
            .iter()
            .filter(|(_, live)| live.parent_session == *parent_session)
            .map(|(id, live)| (id.clone(), live.cancel.clone()))
            .collect();
        for (id, cancel) in local {
            cancel.cancel();
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        if !ids.is_empty() {
            tracing::info!(session = %parent_session, count = ids.len(), "cancelled sub-agents");
        }
        ids.len()
    }

    /// Sub-agents this process runs or has queued now.
    pub fn live_count(&self) -> usize {
        self.lock_live().len()
    }

    /// Stops every sub-agent of this process, recording and announcing each as failed
    /// (see the module docs), and waits for that, at most a few seconds. Spawning stops too.
    pub async fn shutdown(&self) {
        self.stopping.cancel();
        let mut tasks = self.tasks.lock().await;
        let running = tasks.len();
        let finished = tokio::time::timeout(SHUTDOWN_WAIT, async { while tasks.join_next().await.is_some() {} }).await;
        if finished.is_err() {
            tracing::warn!(left = tasks.len(), "sub-agents did not stop in time; the reaper will report them");
            tasks.abort_all();
        }
        tracing::info!(running, "sub-agents stopped");
    }

    fn lock_live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn forget(&self, id: &str) {
        self.lock_live().remove(id);
    }
}

/// The parent's isolated session (`metadata.session`), when its session is not its chat's:
/// its key without the `<agent>/` prefix, if that differs from the chat's key.
pub fn isolated_session(parent_session: &SessionKey, parent_agent: &str, chat: &ChatAddress) -> Option<String> {
    let base = parent_session.base(parent_agent);
    (base != chat.session_key()).then(|| base.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic() -> ChatAddress {
        ChatAddress { channel: "telegram".into(), chat_id: "-100".into(), thread_id: Some("7".into()), is_group: true }
    }

    #[test]
    fn the_isolated_session_is_the_parent_key_without_the_agent_prefix() {
        assert_eq!(isolated_session(&SessionKey::stored("telegram:-100:topic:7"), "main", &topic()), None);
        assert_eq!(isolated_session(&SessionKey::stored("support/telegram:-100:topic:7"), "support", &topic()), None);
        assert_eq!(isolated_session(&SessionKey::stored("cron:abc"), "main", &topic()), Some("cron:abc".into()));
        assert_eq!(
            isolated_session(&SessionKey::stored("support/cron:abc"), "support", &topic()),
            Some("cron:abc".into())
        );
    }
}
