//! The worker: takes inbound messages off the bus, runs one turn at a time per session in
//! arrival order (sessions in parallel, up to a limit), records each run in the store and
//! publishes the reply.
//!
//! Delivery guarantees live here, once, rather than in each adapter: a message is acked only
//! after its run is stored and its reply published; a message whose run already finished is
//! not run again (the store keys runs by inbound id); a message that cannot be decoded goes to
//! the dead-letter subject and is acked, so it is never retried forever.

mod abort;
mod access;
pub mod agents;
mod answer;
mod batch;
mod commands;
pub(crate) mod commit;
mod compact;
mod events;
mod expiry;
mod files;
mod hygiene;
mod input;
mod intake;
mod job;
mod keepalive;
mod memory_scope;
mod offer;
mod order;
mod overflow;
mod owner;
mod prefs;
mod prompt;
mod rate;
mod recall;
mod reloadable;
mod run;
mod session;
mod settle;
mod turn;
mod usage;
mod voice;
mod windows;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use switchboard_channels::Gauge;
use switchboard_channels::bus::{Bus, BusError};
use switchboard_channels::contract::{InboundMessage, SessionKey};
use thiserror::Error;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::config::RateLimitsConfig;
use crate::context::{ContextEngine, ContextSettings};
use crate::control::Control;
use crate::hygiene::Guard;
use crate::provider::transcribe::Transcriber;
use crate::store::Store;
use crate::subagents::SubagentManager;
use crate::users::AccessPolicy;
use access::People;
use agents::Agents;
pub use recall::RecallSettings;
use reloadable::Reloadable;
pub use session::QueueSettings;
use session::Session;

#[derive(Debug, Error)]
pub enum WorkerError {
    #[error("cannot consume inbound messages: {0}")]
    Bus(#[from] BusError),
}

/// Deliveries a worker holds beyond those it can run: messages for busy sessions (to merge or
/// steer, to drop on `/stop`) and commands, which do not wait for a run.
const HELD_SPARE: usize = 64;

/// How many deliveries a worker with `max_concurrent_runs` holds at once. Not many more than
/// it can run: a held delivery costs about 20 KB (its session task, keep-alive and message),
/// and with 10,000 chats writing at once four times the runs held 60 MB more (206 against 147
/// MiB peak) for the same throughput. The rest waits on the bus, which keeps it compactly
/// (and, on NATS, lets another worker take it).
pub fn held_for(max_concurrent_runs: usize) -> usize {
    max_concurrent_runs.saturating_add(HELD_SPARE)
}

/// How a worker paces itself.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Sessions whose turns run at the same time.
    pub max_concurrent_runs: usize,
    /// Deliveries held at once (queued behind a busy session or running); bounds memory.
    pub max_held: usize,
    /// Older messages are dropped with a log line rather than answered hours late.
    pub max_message_age: Duration,
    /// How often a held delivery is reported as still in progress.
    pub progress_interval: Duration,
    /// How long in-flight runs may take to finish at shutdown before they are abandoned.
    pub shutdown_grace: Duration,
    /// Messages of history read from the store for a turn, before the history pipeline.
    pub history_limit: usize,
    /// How long one run may take in all (`agent.run_timeout_secs`).
    pub run_timeout: Duration,
    /// Token budget, history pipeline and compaction.
    pub context: ContextSettings,
    /// Levels, tool permissions and budgets of the senders.
    pub access: AccessPolicy,
    /// Time zone and file caps for the system prompt built for each run.
    pub prompt: crate::prompt::PromptSettings,
    /// The input guard, built from `[guard]`; `None` passes messages to the model unchanged.
    pub guard: Option<Arc<Guard>>,
    /// What messages arriving during a run do.
    pub queue: QueueSettings,
    /// Turns a sender may start per minute, by level (`[rate_limits]`).
    pub rate_limits: RateLimitsConfig,
    /// Memory recalled into each turn's prompt (`[memory]`).
    pub recall: RecallSettings,
    /// Turns voice notes into text before a turn (`[transcription]`); `None`: they reach the
    /// model as their path.
    pub transcriber: Option<Arc<Transcriber>>,
    /// MCP tools offered one by one up to this many; beyond, through `mcp_tool_search`.
    pub mcp_inline_max: usize,
    /// How long files sent from runs' outboxes are kept (`[workspace] outbox_keep_days`).
    pub outbox_keep: Duration,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            max_concurrent_runs: crate::config::DEFAULT_MAX_CONCURRENT_RUNS,
            max_held: held_for(crate::config::DEFAULT_MAX_CONCURRENT_RUNS),
            max_message_age: Duration::from_secs(3600),
            progress_interval: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(30),
            history_limit: 200,
            run_timeout: Duration::from_secs(300),
            context: ContextSettings::default(),
            access: AccessPolicy::default(),
            prompt: crate::prompt::PromptSettings::default(),
            guard: None,
            queue: QueueSettings::default(),
            // Off unless asked for: the daemon passes `[rate_limits]`, whose defaults limit.
            rate_limits: RateLimitsConfig::UNLIMITED,
            recall: RecallSettings::default(),
            transcriber: None,
            mcp_inline_max: 30,
            outbox_keep: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// What turns run with (the turn's part of [`WorkerSettings`]).
struct TurnSettings {
    /// Messages of history read from the store for a turn, before the history pipeline.
    history_limit: usize,
    /// How long one run may take in all (`agent.run_timeout_secs`).
    run_timeout: Duration,
    /// Time zone and file caps for the system prompt built for each run.
    prompt: crate::prompt::PromptSettings,
    /// The input guard; `None` passes messages to the model unchanged.
    guard: Option<Arc<Guard>>,
    /// Memory recalled into each turn's prompt (`[memory]`).
    recall: RecallSettings,
    /// Turns voice notes into text before a turn; `None`: they reach the model as their path.
    transcriber: Option<Arc<Transcriber>>,
    /// MCP tools offered one by one up to this many; beyond, through `mcp_tool_search`.
    mcp_inline_max: usize,
    /// How long files sent from runs' outboxes are kept.
    outbox_keep: Duration,
}

/// Everything a turn needs, shared by the session tasks and the commands. The intake
/// (`intake`) decides when a message's turn runs; this runs it.
pub(crate) struct TurnRunner {
    bus: Arc<dyn Bus>,
    store: Arc<dyn Store>,
    /// How a finished run's outcome and reply are committed (chosen by the assembly).
    commit: Arc<dyn commit::CommitPort>,
    /// The agents by name and the bindings that pick one per message (replaced by a reload).
    agents: Reloadable<Agents>,
    /// Levels, tool permissions and budgets (replaced by a reload).
    access: Reloadable<AccessPolicy>,
    /// The owner's operations, for the owner's commands.
    control: Arc<crate::control::Control>,
    /// The history pipeline, the token estimate correction and the models' windows, shared by
    /// all sessions and by the agents' model chains (which refit requests with it).
    context: Arc<ContextEngine>,
    settings: TurnSettings,
    /// Turns running at once (`max_concurrent_runs`).
    runs: Semaphore,
    /// Cancelled when shutdown starts: no new turn starts.
    stopping: CancellationToken,
    /// Cancelled when the grace period is over: running turns are abandoned.
    abandon: CancellationToken,
    /// The sub-agents `/stop` and `/new` cancel, when sub-agents are enabled.
    subagents: OnceLock<Arc<SubagentManager>>,
}

impl TurnRunner {
    /// The session key `msg` is stored under.
    fn session_key(&self, msg: &InboundMessage) -> SessionKey {
        self.agents.get().session_key(msg)
    }

    /// Who people are and what they may do, under the access policy in force now.
    fn people(&self) -> People<'_> {
        People { policy: self.access.get(), store: self.store.as_ref() }
    }
}

/// How the intake paces itself (its part of [`WorkerSettings`]).
struct IntakeSettings {
    /// Sessions whose turns run at the same time.
    max_concurrent_runs: usize,
    /// Deliveries held at once (queued behind a busy session or running); bounds memory.
    max_held: usize,
    /// Older messages are dropped with a log line rather than answered hours late.
    max_message_age: Duration,
    /// How often a held delivery is reported as still in progress.
    progress_interval: Duration,
    /// How long in-flight runs may take to finish at shutdown before they are abandoned.
    shutdown_grace: Duration,
    /// What messages arriving during a run do.
    queue: QueueSettings,
    /// The longest text a merged turn may have (the input guard's limit; none without one).
    max_message_chars: usize,
    /// Voice notes are transcribed before their turn (so one is never steered into a run).
    hears_voice: bool,
}

/// The queueing state of a worker, in front of its [`TurnRunner`].
pub(crate) struct Intake {
    /// Runs the turns the intake lets start.
    turns: Arc<TurnRunner>,
    settings: IntakeSettings,
    /// Sessions with work in this worker; see `session` for the state machine.
    sessions: Mutex<HashMap<SessionKey, Session>>,
    /// Per session, the messages a full queue did not keep since its last notice.
    overflow: Mutex<HashMap<SessionKey, Vec<overflow::NotKept>>>,
    /// Per-sender turn counts for `[rate_limits]`.
    rate: Mutex<rate::RateLimiter>,
    /// Numbers messages in arrival order.
    arrivals: AtomicU64,
    /// A chat's order across workers, on a bus whose stream several processes consume (see
    /// `order`); `None` on a bus that delivers in order by itself.
    order: Option<order::ChatOrder>,
    /// Tasks of the intake loop not yet joined (session loops, commands, notices).
    tasks: AtomicUsize,
}

impl Intake {
    fn new(turns: Arc<TurnRunner>, settings: IntakeSettings, rate_limits: crate::config::RateLimitsConfig) -> Self {
        let rate = Mutex::new(rate::RateLimiter::new(rate_limits, settings.queue.debounce));
        let order = Arc::clone(&turns.bus).stream_order().map(order::ChatOrder::new);
        Self {
            turns,
            settings,
            sessions: Mutex::new(HashMap::new()),
            overflow: Mutex::new(HashMap::new()),
            rate,
            arrivals: AtomicU64::new(0),
            order,
            tasks: AtomicUsize::new(0),
        }
    }
}

/// Replaces a running worker's agents (bindings, models, tools, skills settings) and access
/// policy (permissions, budgets); turns that started keep what they started with.
pub struct Reloader(Arc<TurnRunner>);

impl Reloader {
    /// What the new agents' model chains refit requests with: the running worker's engine.
    pub fn fitting(&self) -> Arc<dyn crate::provider::failover::Fitting> {
        Arc::clone(&self.0.context) as _
    }

    pub fn apply(&self, agents: Agents, access: AccessPolicy) {
        if let Some(manager) = self.0.subagents.get() {
            manager.attach(agents.all());
        }
        self.0.agents.replace(agents);
        self.0.access.replace(access);
    }
}

/// What a worker reaches outside itself: the bus, the store, and how a run is committed to
/// both (the assembly picks the commit for the bus in use).
pub(crate) struct WorkerPorts {
    pub(crate) bus: Arc<dyn Bus>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) commit: Arc<dyn commit::CommitPort>,
}

/// Consumes the inbound queue until `shutdown` is cancelled, then drains: the intake in front
/// (queues and scheduling, `intake`), the turn runner behind it (everything a turn needs, `run`).
pub struct Worker {
    intake: Arc<Intake>,
    /// False while the process does not hold its lock on the database: no message is taken
    /// then (see `store::lock::KeptLock`); `None`: always taken.
    gate: Option<watch::Receiver<bool>>,
}

impl Worker {
    /// The context engine of a worker with `settings`: made before the worker, since the
    /// agents' model chains refit requests with it (see [`crate::provider::failover::Fitting`]).
    pub fn context_for(settings: &WorkerSettings) -> Arc<ContextEngine> {
        Arc::new(ContextEngine::new(settings.context.clone()))
    }

    /// A worker that picks one of several agents per message (see [`agents`]) and commits
    /// their runs through `ports.commit`; `control` carries out the owner's commands.
    /// `context` is made from `settings.context` beforehand, for the agents' model chains to
    /// refit requests with ([`Worker::context_for`]).
    pub(crate) fn with_agents(
        ports: WorkerPorts,
        agents: Agents,
        settings: WorkerSettings,
        control: Arc<Control>,
        context: Arc<ContextEngine>,
    ) -> Self {
        let intake_settings = IntakeSettings {
            max_concurrent_runs: settings.max_concurrent_runs,
            max_held: settings.max_held,
            max_message_age: settings.max_message_age,
            progress_interval: settings.progress_interval,
            shutdown_grace: settings.shutdown_grace,
            queue: settings.queue.clone(),
            max_message_chars: settings.guard.as_ref().map_or(usize::MAX, |guard| guard.max_message_chars()),
            hears_voice: settings.transcriber.is_some(),
        };
        let WorkerPorts { bus, store, commit } = ports;
        let turns = TurnRunner {
            bus,
            store,
            commit,
            agents: Reloadable::new(agents),
            access: Reloadable::new(settings.access),
            control,
            context,
            runs: Semaphore::new(settings.max_concurrent_runs.max(1)),
            stopping: CancellationToken::new(),
            abandon: CancellationToken::new(),
            subagents: OnceLock::new(),
            settings: TurnSettings {
                history_limit: settings.history_limit,
                run_timeout: settings.run_timeout,
                prompt: settings.prompt,
                guard: settings.guard,
                recall: settings.recall,
                transcriber: settings.transcriber,
                mcp_inline_max: settings.mcp_inline_max,
                outbox_keep: settings.outbox_keep,
            },
        };
        let intake = Intake::new(Arc::new(turns), intake_settings, settings.rate_limits);
        Self { intake: Arc::new(intake), gate: None }
    }

    /// Takes messages only while `gate` is true (the process holds its database lock).
    pub fn with_intake_gate(mut self, gate: watch::Receiver<bool>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Lets `/stop` and `/new` cancel the session's sub-agents (those `manager` runs here and,
    /// through the store, on other workers).
    pub fn with_subagents(self, manager: Arc<SubagentManager>) -> Self {
        if self.intake.turns.subagents.set(manager).is_err() {
            tracing::warn!("worker: sub-agent manager set twice; keeping the first");
        }
        self
    }

    /// What a config reload uses to swap the agents and the access policy of this worker.
    pub fn reloader(&self) -> Reloader {
        Reloader(Arc::clone(&self.intake.turns))
    }

    /// Reads what this worker holds while it runs, for the metrics endpoint.
    pub fn gauges(&self) -> WorkerGauges {
        WorkerGauges(Arc::clone(&self.intake))
    }

    /// Runs until `shutdown` is cancelled: stops taking messages, lets running turns finish
    /// within the grace period, and gives everything else back to the bus.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        Ok(self.intake.run(self.gate, shutdown).await?)
    }
}

/// Reads what a worker holds, while it runs; see [`Worker::gauges`].
#[derive(Clone)]
pub struct WorkerGauges(Arc<Intake>);

impl WorkerGauges {
    pub fn read(&self) -> Vec<Gauge> {
        self.0.gauges()
    }

    /// Sessions with a turn under way or messages waiting.
    pub fn busy_sessions(&self) -> usize {
        self.0.busy_sessions()
    }
}
