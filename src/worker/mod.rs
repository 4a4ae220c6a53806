//! The worker: takes inbound messages off the bus, runs one turn at a time per session in
//! arrival order (sessions in parallel, up to a limit), records each run in the store and
//! publishes the reply.
//!
//! Delivery guarantees live here, once, rather than in each adapter: a message is acked only
//! after its run is stored and its reply published; a message whose run already finished is
//! not run again (the store keys runs by inbound id); a message that cannot be decoded goes to
//! the dead-letter subject and is acked, so it is never retried forever.

mod access;
mod hygiene;
mod keepalive;
mod prompt;
mod run;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use switchboard_channels::bus::{Bus, BusError, DeliveryInfo};
use switchboard_channels::contract::{DeadLetter, InboundMessage};
use switchboard_channels::subject::Flow;
use thiserror::Error;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::context::{ContextEngine, ContextSettings};
use crate::hygiene::Guard;
use crate::store::Store;
use crate::users::AccessPolicy;
use keepalive::{Held, Settle};

#[derive(Debug, Error)]
pub enum WorkerError {
    #[error("cannot consume inbound messages: {0}")]
    Bus(#[from] BusError),
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
    /// Token budget, history pipeline and compaction.
    pub context: ContextSettings,
    /// Levels, tool permissions and budgets of the senders.
    pub access: AccessPolicy,
    /// Time zone and file caps for the system prompt built for each run.
    pub prompt: crate::prompt::PromptSettings,
    /// The input guard, built from `[guard]`; `None` passes messages to the model unchanged.
    pub guard: Option<Arc<Guard>>,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            max_concurrent_runs: 16,
            max_held: 64,
            max_message_age: Duration::from_secs(3600),
            progress_interval: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(30),
            history_limit: 200,
            context: ContextSettings::default(),
            access: AccessPolicy::default(),
            prompt: crate::prompt::PromptSettings::default(),
            guard: None,
        }
    }
}

/// A message taken from the bus and decoded, waiting for its session's turn.
struct Job {
    msg: InboundMessage,
    held: Held,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

/// What the per-session tasks share.
pub(crate) struct Shared {
    pub bus: Arc<dyn Bus>,
    pub store: Arc<dyn Store>,
    pub agent: Arc<Agent>,
    pub settings: WorkerSettings,
    /// The history pipeline and the token estimate correction, shared by all sessions.
    pub context: ContextEngine,
    runs: Arc<Semaphore>,
    sessions: Mutex<HashMap<String, mpsc::UnboundedSender<Job>>>,
    /// Cancelled when shutdown starts: no new runs start.
    stopping: CancellationToken,
    /// Cancelled when the grace period is over: running turns are abandoned.
    abandon: CancellationToken,
}

/// Consumes the inbound queue until `shutdown` is cancelled, then drains.
pub struct Worker {
    shared: Arc<Shared>,
}

impl Worker {
    pub fn new(bus: Arc<dyn Bus>, store: Arc<dyn Store>, agent: Arc<Agent>, settings: WorkerSettings) -> Self {
        let runs = Arc::new(Semaphore::new(settings.max_concurrent_runs.max(1)));
        let context = ContextEngine::new(settings.context.clone());
        let shared = Shared {
            bus,
            store,
            agent,
            context,
            settings,
            runs,
            sessions: Mutex::new(HashMap::new()),
            stopping: CancellationToken::new(),
            abandon: CancellationToken::new(),
        };
        Self { shared: Arc::new(shared) }
    }

    /// Runs until `shutdown` is cancelled: stops taking messages, lets running turns finish
    /// within the grace period, and gives everything else back to the bus.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let shared = self.shared;
        let mut deliveries = shared.bus.inbound().await?;
        let slots = Arc::new(Semaphore::new(shared.settings.max_held.max(1)));
        let mut tasks = JoinSet::new();
        tracing::info!(max_concurrent_runs = shared.settings.max_concurrent_runs, "worker started");
        loop {
            // Take a slot before pulling, so a busy worker leaves messages on the bus for others.
            let slot = tokio::select! {
                _ = shutdown.cancelled() => break,
                slot = Arc::clone(&slots).acquire_owned() => slot,
            };
            let Ok(slot) = slot else { break };
            let delivery = tokio::select! {
                _ = shutdown.cancelled() => break,
                next = deliveries.next() => next,
            };
            match delivery {
                Some(Ok(delivery)) => {
                    let (info, acker) = delivery.into_parts();
                    let held = Held::start(acker, shared.settings.progress_interval);
                    if let Some(job) = intake(&shared, info, held, slot).await {
                        dispatch(&shared, job, &mut tasks);
                    }
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
        tracing::warn!(id = %msg.id, session = %msg.session_key(), age_secs = age.num_seconds(),
            "dropping a message too old to answer usefully");
        held.settle(Settle::Ack).await;
        return None;
    }
    Some(Job { msg, held, _slot: slot })
}

async fn dead_letter(shared: &Shared, info: &DeliveryInfo, reason: String, held: Held) {
    tracing::warn!(subject = %info.subject, %reason, "dead-lettering an inbound message");
    let letter = DeadLetter {
        subject: info.subject.clone(),
        reason,
        payload: String::from_utf8_lossy(&info.payload).into_owned(),
        ..DeadLetter::default()
    };
    match shared.bus.dead_letter(Flow::In, &letter).await {
        Ok(()) => held.settle(Settle::Ack).await,
        // Keep the message rather than lose it; it comes back and is tried again.
        Err(err) => {
            tracing::error!(%err, "cannot publish a dead letter");
            held.settle(Settle::Nak(Some(Duration::from_secs(5)))).await;
        }
    }
}

/// Queues a job behind its session; starts a session task when none is running.
fn dispatch(shared: &Arc<Shared>, job: Job, tasks: &mut JoinSet<()>) {
    let key = job.msg.session_key();
    let mut sessions = shared.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    let job = match sessions.get(&key) {
        Some(queue) => match queue.send(job) {
            Ok(()) => return,
            Err(mpsc::error::SendError(job)) => job,
        },
        None => job,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    // The receiver is alive until the task below ends, and it has not started yet.
    let _ = tx.send(job);
    sessions.insert(key.clone(), tx);
    tasks.spawn(session_loop(Arc::clone(shared), key, rx));
}

/// Runs one session's jobs in arrival order, then exits when its queue is empty.
async fn session_loop(shared: Arc<Shared>, key: String, mut rx: mpsc::UnboundedReceiver<Job>) {
    loop {
        let next = {
            // Checked under the lock that dispatch holds while sending, so no job is stranded.
            let mut sessions = shared.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            match rx.try_recv() {
                Ok(job) => Some(job),
                Err(_) => {
                    sessions.remove(&key);
                    None
                }
            }
        };
        let Some(job) = next else { return };
        run::process(&shared, job.msg, job.held).await;
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
