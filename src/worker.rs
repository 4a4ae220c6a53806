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
mod cron_hooks;
mod events;
mod expiry;
mod files;
mod hygiene;
mod input;
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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use switchboard_channels::Gauge;
use switchboard_channels::bus::{Bus, BusError, DeliveryInfo};
use switchboard_channels::contract::{DeadLetter, InboundKind, InboundMessage};
use switchboard_channels::subject::Flow;
use thiserror::Error;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::config::RateLimitsConfig;
use crate::context::{ContextEngine, ContextSettings};
use crate::control::Control;
use crate::hygiene::Guard;
use crate::provider::transcribe::Transcriber;
use crate::store::Store;
use crate::subagents::SubagentManager;
use crate::users::AccessPolicy;
use agents::Agents;
use job::Job;
use keepalive::{Held, Settle};
pub use recall::RecallSettings;
pub use session::QueueSettings;
use session::{Placed, Session};

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

/// What the per-session tasks share.
pub(crate) struct Shared {
    pub bus: Arc<dyn Bus>,
    pub store: Arc<dyn Store>,
    /// The agents by name and the bindings that pick one per message (replaced by a reload).
    pub agents: reloadable::Reloadable<Agents>,
    /// Levels, tool permissions and budgets (`settings.access` until a reload replaces it).
    pub access: reloadable::Reloadable<AccessPolicy>,
    pub settings: WorkerSettings,
    /// The owner's operations, for the owner's commands.
    pub control: Arc<Control>,
    /// The history pipeline, the token estimate correction and the models' windows, shared by
    /// all sessions and by the agents' model chains (which refit requests with it).
    pub context: Arc<ContextEngine>,
    runs: Arc<Semaphore>,
    /// Sessions with work in this worker; see `session` for the state machine.
    sessions: Mutex<HashMap<String, Session>>,
    /// Per session, the messages a full queue did not keep since its last notice.
    overflow: Mutex<HashMap<String, Vec<overflow::NotKept>>>,
    /// Per-sender turn counts for `[rate_limits]`.
    rate: Mutex<rate::RateLimiter>,
    /// Numbers messages in arrival order.
    arrivals: AtomicU64,
    /// Stream positions of the inbound messages held here (see `order`).
    held_seqs: order::HeldSeqs,
    /// Cancelled when shutdown starts: no new runs start.
    stopping: CancellationToken,
    /// The sub-agents `/stop` and `/new` cancel, when sub-agents are enabled.
    subagents: std::sync::OnceLock<Arc<SubagentManager>>,
    /// Cancelled when the grace period is over: running turns are abandoned.
    abandon: CancellationToken,
    /// Tasks of the intake loop not yet joined (session loops, commands, notices).
    tasks: AtomicUsize,
}

/// Replaces a running worker's agents (bindings, models, tools, skills settings) and access
/// policy (permissions, budgets); turns that started keep what they started with.
pub struct Reloader(Arc<Shared>);

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

/// Consumes the inbound queue until `shutdown` is cancelled, then drains.
pub struct Worker {
    shared: Arc<Shared>,
    /// False while the process does not hold its lock on the database: no message is taken
    /// then (see `store::lock::KeptLock`); `None`: always taken.
    gate: Option<watch::Receiver<bool>>,
}

impl Worker {
    pub fn new(
        bus: Arc<dyn Bus>,
        store: Arc<dyn Store>,
        agent: Arc<Agent>,
        settings: WorkerSettings,
        control: Arc<Control>,
    ) -> Self {
        let context = Self::context_for(&settings);
        Self::with_agents(bus, store, Agents::single(agent), settings, control, context)
    }

    /// The context engine of a worker with `settings`: made before the worker, since the
    /// agents' model chains refit requests with it (see [`crate::provider::failover::Fitting`]).
    pub fn context_for(settings: &WorkerSettings) -> Arc<ContextEngine> {
        Arc::new(ContextEngine::new(settings.context.clone()))
    }

    /// A worker that picks one of several agents per message (see [`agents`]); `control`
    /// carries out the owner's commands. `context` is made from `settings.context`
    /// beforehand, for the agents' model chains to refit requests with ([`Worker::context_for`]).
    pub fn with_agents(
        bus: Arc<dyn Bus>,
        store: Arc<dyn Store>,
        agents: Agents,
        settings: WorkerSettings,
        control: Arc<Control>,
        context: Arc<ContextEngine>,
    ) -> Self {
        let runs = Arc::new(Semaphore::new(settings.max_concurrent_runs.max(1)));
        let rate = Mutex::new(rate::RateLimiter::new(settings.rate_limits, settings.queue.debounce));
        let shared = Shared {
            bus,
            store,
            agents: reloadable::Reloadable::new(agents),
            access: reloadable::Reloadable::new(settings.access.clone()),
            context,
            settings,
            control,
            runs,
            sessions: Mutex::new(HashMap::new()),
            overflow: Mutex::new(HashMap::new()),
            rate,
            arrivals: AtomicU64::new(0),
            held_seqs: order::HeldSeqs::default(),
            stopping: CancellationToken::new(),
            subagents: std::sync::OnceLock::new(),
            abandon: CancellationToken::new(),
            tasks: AtomicUsize::new(0),
        };
        Self { shared: Arc::new(shared), gate: None }
    }

    /// Takes messages only while `gate` is true (the process holds its database lock).
    pub fn with_intake_gate(mut self, gate: watch::Receiver<bool>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Lets `/stop` and `/new` cancel the session's sub-agents (those `manager` runs here and,
    /// through the store, on other workers).
    pub fn with_subagents(self, manager: Arc<SubagentManager>) -> Self {
        if self.shared.subagents.set(manager).is_err() {
            tracing::warn!("worker: sub-agent manager set twice; keeping the first");
        }
        self
    }

    /// What a config reload uses to swap the agents and the access policy of this worker.
    pub fn reloader(&self) -> Reloader {
        Reloader(Arc::clone(&self.shared))
    }

    /// Reads what this worker holds while it runs, for the metrics endpoint.
    pub fn gauges(&self) -> WorkerGauges {
        WorkerGauges(Arc::clone(&self.shared))
    }

    /// Runs until `shutdown` is cancelled: stops taking messages, lets running turns finish
    /// within the grace period, and gives everything else back to the bus.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let (shared, mut gate) = (self.shared, self.gate);
        let mut deliveries = shared.bus.inbound().await?;
        let slots = Arc::new(Semaphore::new(shared.settings.max_held.max(1)));
        let mut tasks = JoinSet::new();
        windows::restore(&shared).await;
        tracing::info!(max_concurrent_runs = shared.settings.max_concurrent_runs, "worker started");
        loop {
            // Take a slot before pulling, so a busy worker leaves messages on the bus for others.
            let slot = tokio::select! {
                _ = shutdown.cancelled() => break,
                slot = Arc::clone(&slots).acquire_owned() => slot,
                Some(joined) = tasks.join_next() => { reaped(&shared, joined, &tasks); continue; }
            };
            let Ok(slot) = slot else { break };
            if !gate_open(gate.as_mut(), &shutdown).await {
                break;
            }
            let delivery = tokio::select! {
                _ = shutdown.cancelled() => break,
                next = deliveries.next() => next,
                // Finished tasks are freed while the queue is quiet too, not at the next message.
                Some(joined) = tasks.join_next() => { reaped(&shared, joined, &tasks); continue; }
            };
            match delivery {
                Some(Ok(delivery)) => {
                    let (info, acker) = delivery.into_parts();
                    let held = Held::start(acker, info.subject.clone(), shared.settings.progress_interval);
                    // The lock may have been lost while waiting for this one: it is not run
                    // before the lock is back (held meanwhile, so the bus does not hand it out).
                    if !gate_open(gate.as_mut(), &shutdown).await {
                        held.settle(Settle::Nak(None)).await;
                        break;
                    }
                    let Some(job) = intake(&shared, info, held, slot).await else { continue };
                    if let Some(job) = limit_rate(&shared, job, &mut tasks).await {
                        dispatch(&shared, job, &mut tasks);
                    }
                    shared.tasks.store(tasks.len(), Ordering::Relaxed);
                }
                Some(Err(err)) => {
                    tracing::warn!(%err, "receiving from the bus failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => {
                    tracing::warn!("the inbound stream ended");
                    break;
                }
            }
        }
        drain(&shared, tasks).await;
        Ok(())
    }
}

/// Waits until `gate` is open; false when the worker is to stop instead (shutdown, or the
/// gate's keeper ended: the process is stopping).
async fn gate_open(gate: Option<&mut watch::Receiver<bool>>, shutdown: &CancellationToken) -> bool {
    let Some(gate) = gate else { return true };
    if *gate.borrow() {
        return true;
    }
    tracing::info!("not holding the database lock: taking no messages until it is back");
    tokio::select! {
        _ = shutdown.cancelled() => false,
        open = gate.wait_for(|held| *held) => open.is_ok(),
    }
}

/// Reads what a worker holds, while it runs; see [`Worker::gauges`].
#[derive(Clone)]
pub struct WorkerGauges(Arc<Shared>);

impl WorkerGauges {
    pub fn read(&self) -> Vec<Gauge> {
        let shared = &self.0;
        let sessions = shared.sessions.lock().unwrap_or_else(PoisonError::into_inner).len();
        let overflow = shared.overflow.lock().unwrap_or_else(PoisonError::into_inner).len();
        let rate = shared.rate.lock().unwrap_or_else(PoisonError::into_inner).remembered();
        vec![
            Gauge::new(
                "worker_tasks",
                "Tasks of the worker's intake loop not yet joined (one per busy session, command or notice)",
                shared.tasks.load(Ordering::Relaxed),
            ),
            Gauge::new(
                "worker_sessions",
                "Sessions with a running turn or queued messages (each forgotten when its queue is empty)",
                sessions,
            ),
            Gauge::new(
                "worker_sessions_over_capacity",
                "Sessions whose queue was full since their last notice",
                overflow,
            ),
            Gauge::new(
                "worker_rate_limit_entries",
                "Senders and chats the rate limiter remembers (those idle for a minute are dropped once a map holds 1024, or twice its active entries)",
                rate,
            ),
        ]
    }
}

/// Decodes and checks a delivery; what cannot be processed is dead-lettered or dropped here.
async fn intake(
    shared: &Shared,
    info: DeliveryInfo,
    held: Held,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> Option<Job> {
    let msg = match serde_json::from_slice::<InboundMessage>(&info.payload) {
        Ok(msg) => msg,
        Err(err) => {
            dead_letter(shared, &info, format!("not a valid InboundMessage: {err}"), held).await;
            return None;
        }
    };
    if let Err(err) = msg.validate() {
        dead_letter(shared, &info, format!("invalid InboundMessage: {err}"), held).await;
        return None;
    }
    let age = chrono::Utc::now().signed_duration_since(msg.received_at);
    if age.to_std().is_ok_and(|age| age > shared.settings.max_message_age) {
        tracing::warn!(id = %msg.id, session = %shared.agents.get().session_key(&msg), age_secs = age.num_seconds(),
            "dropping a message too old to answer usefully");
        held.settle(Settle::Ack).await;
        return None;
    }
    let held = match wait_in_order(shared, &info, &msg, held).await {
        Some(held) => held,
        None => return None,
    };
    let seq = shared.arrivals.fetch_add(1, Ordering::Relaxed);
    Some(Job { msg, held, seq, arrived: tokio::time::Instant::now(), _slot: slot })
}

/// Hands the delivery back while an older message of its chat is not done elsewhere (see
/// `order`); otherwise marks its stream position as held here and returns it. Commands are
/// exempt: they bypass the session's queue anyway (`/stop` must not wait for the run it stops).
async fn wait_in_order(shared: &Shared, info: &DeliveryInfo, msg: &InboundMessage, mut held: Held) -> Option<Held> {
    let Some(position) = info.stream_seq else { return Some(held) };
    if msg.kind == InboundKind::User && commands::parse(&msg.content).is_some() {
        return Some(held);
    }
    match order::wait_for_older(shared.bus.as_ref(), shared.store.as_ref(), &shared.held_seqs, info).await {
        Ok(None) => {
            held.keep_position(shared.held_seqs.hold(position));
            Some(held)
        }
        Ok(Some(delay)) => {
            held.settle(Settle::Nak(Some(delay))).await;
            None
        }
        Err(err) => {
            tracing::warn!(%err, "cannot tell whether an older message of the chat is pending; trying later");
            held.settle(Settle::Nak(Some(Duration::from_secs(1)))).await;
            None
        }
    }
}

async fn dead_letter(shared: &Shared, info: &DeliveryInfo, reason: String, held: Held) {
    let payload = String::from_utf8_lossy(&info.payload).into_owned();
    dead_letter_payload(shared, &info.subject, payload, reason, held).await;
}

/// Sets a message aside with the reason and acks it. When the dead letter cannot be published
/// for a reason that would recur, the message is acked all the same (and the log says it was
/// dropped): going round forever would be worse.
pub(crate) async fn dead_letter_payload(shared: &Shared, subject: &str, payload: String, reason: String, held: Held) {
    let letter = DeadLetter { subject: subject.to_owned(), reason, payload, ..DeadLetter::default() };
    match shared.bus.dead_letter(Flow::In, &letter).await {
        Ok(()) => held.settle(Settle::Ack).await,
        Err(err) if err.is_permanent() => {
            tracing::error!(%err, %subject, reason = %letter.reason,
                "cannot dead-letter an inbound message; dropping it");
            held.settle(Settle::Ack).await;
        }
        // Keep the message rather than lose it; it comes back and is tried again.
        Err(err) => {
            tracing::error!(%err, %subject, "cannot publish a dead letter now; the message will come back");
            held.settle(Settle::Nak(Some(Duration::from_secs(5)))).await;
        }
    }
}

/// Applies `[rate_limits]` to a person's message (commands and the API channel excepted):
/// `None` when it is over its sender's limit and was settled here, with the sender's one
/// notice or without answer.
async fn limit_rate(shared: &Arc<Shared>, job: Job, tasks: &mut JoinSet<()>) -> Option<Job> {
    let msg = &job.msg;
    // The API channel takes the sender from the request, so a per-sender limit would not hold
    // there (a client names a new sender); its token and HTTP limits guard it instead.
    let api = msg.channel == switchboard_channels::api::CHANNEL;
    if msg.kind != InboundKind::User || api || commands::parse(&msg.content).is_some() {
        return Some(job);
    }
    let key = shared.agents.get().session_key(msg);
    let sender = crate::config::Identity::new(&msg.channel, &msg.sender.id).to_string();
    let check = |level| {
        let mut limiter = shared.rate.lock().unwrap_or_else(PoisonError::into_inner);
        limiter.check(&key, &sender, tokio::time::Instant::now(), level)
    };
    let mut verdict = check(None);
    if verdict == rate::Verdict::NeedLevel {
        let level = match access::own_level(shared, msg).await {
            Ok(level) => level,
            Err(err) => {
                // The run would fail on the store too; let it, and be retried, rather than
                // refuse someone for a store error.
                tracing::warn!(%err, id = %msg.id, "cannot look up the sender's level for the rate limit");
                return Some(job);
            }
        };
        verdict = check(Some(level));
    }
    let rate::Verdict::Limited { notify, retry_after, per_minute } = verdict else { return Some(job) };
    tracing::info!(id = %msg.id, session = %key, %sender, notify, "sender over their rate limit; not answering");
    let shared = Arc::clone(shared);
    if notify {
        let text = rate::notice(&msg.sender.name, msg.is_group, per_minute, retry_after);
        tasks.spawn(settle::answer(shared, job, text));
    } else {
        tasks.spawn(async move { settle::settle_unanswered(&shared, job, "over the sender's rate limit").await });
    }
    None
}

/// Notes a task the intake loop joined. A JoinSet keeps a finished task (its whole future)
/// until it is joined, so the loop joins them as they finish: otherwise every message
/// handled would stay in memory.
fn reaped(shared: &Shared, joined: Result<(), tokio::task::JoinError>, tasks: &JoinSet<()>) {
    if let Err(err) = joined
        && err.is_panic()
    {
        tracing::error!(%err, "a worker task panicked");
    }
    shared.tasks.store(tasks.len(), Ordering::Relaxed);
}

/// Sends a job where it goes: a command runs now, beside any running turn (guarantee 3: it
/// bypasses the queue); anything else goes through its session's queue.
fn dispatch(shared: &Arc<Shared>, job: Job, tasks: &mut JoinSet<()>) {
    // Only people type commands; a system message (cron prompt, sub-agent result) that
    // happens to start with "/stop" is text for the model.
    let command = (job.msg.kind == InboundKind::User).then(|| commands::parse(&job.msg.content)).flatten();
    if let Some(command) = command {
        tasks.spawn(commands::handle(Arc::clone(shared), job, command));
        return;
    }
    let key = shared.agents.get().session_key(&job.msg);
    match session::place(shared, &key, job) {
        Placed::Started => {
            tasks.spawn(session::session_loop(Arc::clone(shared), key));
        }
        Placed::Queued => {}
        // One notice per busy spell, carried by its first message not kept; the others are
        // recorded and acked at once.
        Placed::Full { job, first: true } => {
            tasks.spawn(overflow::notify(Arc::clone(shared), key, *job));
        }
        Placed::Refused { job, reason } => {
            tasks.spawn(overflow::refuse(Arc::clone(shared), *job, reason));
        }
        Placed::Full { job, first: false } => {
            let shared = Arc::clone(shared);
            tasks.spawn(async move { settle::settle_unanswered(&shared, *job, overflow::NOT_KEPT).await });
        }
        Placed::Interrupted(dropped) => {
            let shared = Arc::clone(shared);
            tasks.spawn(async move {
                for job in dropped {
                    overflow::replaced(Arc::clone(&shared), job).await;
                }
            });
        }
    }
}

/// Waits for session tasks to finish within the grace period, then abandons the rest.
async fn drain(shared: &Shared, mut tasks: JoinSet<()>) {
    shared.stopping.cancel();
    let grace = shared.settings.shutdown_grace;
    tracing::info!(running = tasks.len(), grace_secs = grace.as_secs(), "worker stopping");
    let finished = tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
    if finished.is_err() {
        tracing::warn!(left = tasks.len(), "grace period over; abandoning running turns");
        shared.abandon.cancel();
        while tasks.join_next().await.is_some() {}
    }
    tracing::info!("worker stopped");
}
