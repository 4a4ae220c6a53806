//! The intake loop: takes deliveries off the bus, decodes and checks them, keeps a chat's
//! order, applies the rate limit, and hands each message to its session's queue (or a command
//! to its handler). [`Intake`] owns the queueing state; the turns are the `TurnRunner`'s.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures_util::stream::FuturesOrdered;
use futures_util::{FutureExt, StreamExt};
use switchboard_channels::Gauge;
use switchboard_channels::bus::{BusError, DeliveryInfo};
use switchboard_channels::contract::{InboundKind, InboundMessage};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Intake;
use super::job::Job;
use super::keepalive::{Held, Settle};
use super::session::Placed;
use super::{commands, order, overflow, rate, session, settle};

/// Deliveries decoded and checked at once. On NATS each checks its chat's order with a round
/// trip to the server; one at a time, those round trips bounded a worker's intake.
const MAX_TAKING: usize = 32;

impl Intake {
    /// Takes deliveries until `shutdown` is cancelled (only while `gate` is open), then drains.
    pub(super) async fn run(
        self: Arc<Self>,
        mut gate: Option<watch::Receiver<bool>>,
        shutdown: CancellationToken,
    ) -> Result<(), BusError> {
        let capacity = self.settings.max_held.max(1);
        let mut deliveries = self.turns.bus.inbound_within(capacity).await?;
        let slots = Arc::new(Semaphore::new(capacity));
        let mut tasks = JoinSet::new();
        let turns = &self.turns;
        super::windows::restore(turns.store.as_ref(), &turns.context, &turns.agents.get()).await;
        tracing::info!(max_concurrent_runs = self.settings.max_concurrent_runs, "worker started");
        // Deliveries being decoded and checked, several at once (a chat's order is a round trip
        // to the bus on NATS), handed on in the order they came.
        let mut taking = FuturesOrdered::new();
        let mut chains = order::TakeChains::default();
        let intake: &Intake = &self;
        let mut slot = None;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                // Finished tasks are freed while the queue is quiet too, not at the next message.
                Some(joined) = tasks.join_next() => self.reaped(joined, &tasks),
                Some(taken) = taking.next() => self.hand_on(taken, &mut tasks).await,
                // A slot before pulling, so a busy worker leaves messages on the bus for others.
                permit = Arc::clone(&slots).acquire_owned(), if slot.is_none() && taking.len() < MAX_TAKING => {
                    let Ok(permit) = permit else { break };
                    if !gate_open(gate.as_mut(), &shutdown).await {
                        break;
                    }
                    slot = Some(permit);
                }
                next = deliveries.next(), if slot.is_some() => match next {
                    Some(Ok(delivery)) => {
                        let (info, acker) = delivery.into_parts();
                        let held = Held::start(acker, &info, self.settings.progress_interval);
                        // The lock may have been lost while waiting for this one: it is not run
                        // before the lock is back (held meanwhile, so the bus does not hand it out).
                        if !gate_open(gate.as_mut(), &shutdown).await {
                            held.settle(Settle::Nak(None)).await;
                            break;
                        }
                        let Some(slot) = slot.take() else { continue };
                        let seq = self.arrivals.fetch_add(1, Ordering::Relaxed);
                        if self.order.is_none() {
                            // No round trip to overlap (the in-process bus keeps the order
                            // itself): taken here, without a task or a chain.
                            let taken = self.take(info, held, slot, seq).await;
                            self.hand_on(taken, &mut tasks).await;
                            continue;
                        }
                        let (previous, guard) = chains.link(&info.subject);
                        taking.push_back(
                            async move {
                                if let Some(previous) = previous {
                                    // Ended either way: the sender is dropped, never used.
                                    let _ = previous.await;
                                }
                                let taken = intake.take(info, held, slot, seq).await;
                                drop(guard);
                                taken
                            }
                            .boxed(),
                        );
                    }
                    Some(Err(err)) => {
                        tracing::warn!(%err, "receiving from the bus failed; retrying in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    None => {
                        tracing::warn!("the inbound stream ended");
                        break;
                    }
                },
            }
        }
        // Taken before the stop: handed on, as they would have been a moment earlier.
        while let Some(taken) = taking.next().await {
            self.hand_on(taken, &mut tasks).await;
        }
        self.drain(tasks).await;
        Ok(())
    }

    /// A message taken (decoded, checked, in its chat's order) goes to its session, unless its
    /// sender is over the rate limit.
    async fn hand_on(self: &Arc<Self>, taken: Option<Job>, tasks: &mut JoinSet<()>) {
        if let Some(job) = taken
            && let Some(job) = self.limit_rate(job, tasks).await
        {
            self.dispatch(job, tasks);
        }
        self.tasks.store(tasks.len(), Ordering::Relaxed);
    }

    /// Decodes and checks a delivery (the `seq`-th to arrive); what cannot be processed is
    /// dead-lettered or dropped here.
    async fn take(&self, info: DeliveryInfo, held: Held, slot: OwnedSemaphorePermit, seq: u64) -> Option<Job> {
        let bus = self.turns.bus.as_ref();
        let msg = match serde_json::from_slice::<InboundMessage>(&info.payload) {
            Ok(msg) => msg,
            Err(err) => {
                settle::dead_letter(bus, &info, format!("not a valid InboundMessage: {err}"), held).await;
                return None;
            }
        };
        if let Err(err) = msg.validate() {
            settle::dead_letter(bus, &info, format!("invalid InboundMessage: {err}"), held).await;
            return None;
        }
        let age = chrono::Utc::now().signed_duration_since(msg.received_at);
        if age.to_std().is_ok_and(|age| age > self.settings.max_message_age) {
            tracing::warn!(id = %msg.id, session = %self.turns.session_key(&msg), age_secs = age.num_seconds(),
                "dropping a message too old to answer usefully");
            held.settle(Settle::Ack).await;
            return None;
        }
        let held = self.wait_in_order(&info, &msg, held).await?;
        Some(Job { msg, held, seq, arrived: tokio::time::Instant::now(), _slot: slot })
    }

    /// Hands the delivery back while an older message of its chat is not done elsewhere (see
    /// `order`); otherwise marks its stream position as held here and returns it. Commands are
    /// exempt: they bypass the session's queue anyway (`/stop` must not wait for the run it stops).
    async fn wait_in_order(&self, info: &DeliveryInfo, msg: &InboundMessage, mut held: Held) -> Option<Held> {
        let (Some(order), Some(position)) = (&self.order, info.stream_seq) else { return Some(held) };
        if msg.kind == InboundKind::User && commands::parse(&msg.content).is_some() {
            return Some(held);
        }
        match order::wait_for_older(order, self.turns.store.as_ref(), info).await {
            Ok(None) => {
                held.keep_position(order.held.hold(position));
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

    /// Applies `[rate_limits]` to a person's message (commands and claimed senders excepted):
    /// `None` when it is over its sender's limit and was settled here, with the sender's one
    /// notice or without answer.
    async fn limit_rate(&self, job: Job, tasks: &mut JoinSet<()>) -> Option<Job> {
        let msg = &job.msg;
        // A sender the client names itself (the API's) would escape a per-sender limit by
        // naming a new one; its adapter limits its clients instead (the API's tokens and HTTP
        // limits).
        if msg.kind != InboundKind::User || msg.sender_is_claimed() || commands::parse(&msg.content).is_some() {
            return Some(job);
        }
        let key = self.turns.session_key(msg);
        let sender = crate::config::Identity::new(&msg.channel, &msg.sender.id).to_string();
        let check = |level| {
            let mut limiter = self.rate.lock().unwrap_or_else(PoisonError::into_inner);
            limiter.check(&key, &sender, tokio::time::Instant::now(), level)
        };
        let mut verdict = check(None);
        if verdict == rate::Verdict::NeedLevel {
            let level = match self.turns.people().own_level(msg).await {
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
        let turns = Arc::clone(&self.turns);
        if notify {
            let text = rate::notice(&msg.sender.name, msg.is_group, per_minute, retry_after);
            tasks.spawn(settle::answer(turns, job, text));
        } else {
            tasks.spawn(async move { settle::settle_unanswered(&turns, job, "over the sender's rate limit").await });
        }
        None
    }

    /// Notes a task the intake loop joined. A JoinSet keeps a finished task (its whole future)
    /// until it is joined, so the loop joins them as they finish: otherwise every message
    /// handled would stay in memory.
    fn reaped(&self, joined: Result<(), tokio::task::JoinError>, tasks: &JoinSet<()>) {
        if let Err(err) = joined
            && err.is_panic()
        {
            tracing::error!(%err, "a worker task panicked");
        }
        self.tasks.store(tasks.len(), Ordering::Relaxed);
    }

    /// Sends a job where it goes: a command runs now, beside any running turn (guarantee 3: it
    /// bypasses the queue); anything else goes through its session's queue.
    fn dispatch(self: &Arc<Self>, job: Job, tasks: &mut JoinSet<()>) {
        // Only people type commands; a system message (cron prompt, sub-agent result) that
        // happens to start with "/stop" is text for the model.
        let command = (job.msg.kind == InboundKind::User).then(|| commands::parse(&job.msg.content)).flatten();
        if let Some(command) = command {
            tasks.spawn(commands::handle(Arc::clone(self), job, command));
            return;
        }
        let key = self.turns.session_key(&job.msg);
        let turns = Arc::clone(&self.turns);
        match session::place(self, &key, job) {
            Placed::Started => {
                tasks.spawn(session::session_loop(Arc::clone(self), key));
            }
            Placed::Queued => {}
            // One notice per busy spell, carried by its first message not kept; the others are
            // recorded and acked at once.
            Placed::Full { job, first: true } => {
                tasks.spawn(overflow::notify(Arc::clone(self), key, *job));
            }
            Placed::Refused { job, reason } => {
                tasks.spawn(overflow::refuse(turns, *job, reason));
            }
            Placed::Full { job, first: false } => {
                tasks.spawn(async move { settle::settle_unanswered(&turns, *job, overflow::NOT_KEPT).await });
            }
            Placed::Interrupted(dropped) => {
                tasks.spawn(async move {
                    for job in dropped {
                        overflow::replaced(Arc::clone(&turns), job).await;
                    }
                });
            }
        }
    }

    /// Waits for session tasks to finish within the grace period, then abandons the rest.
    async fn drain(&self, mut tasks: JoinSet<()>) {
        self.turns.stopping.cancel();
        let grace = self.settings.shutdown_grace;
        tracing::info!(running = tasks.len(), grace_secs = grace.as_secs(), "worker stopping");
        let finished = tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        if finished.is_err() {
            tracing::warn!(left = tasks.len(), "grace period over; abandoning running turns");
            self.turns.abandon.cancel();
            while tasks.join_next().await.is_some() {}
        }
        tracing::info!("worker stopped");
    }

    /// What the intake holds now, for the metrics endpoint.
    pub(super) fn busy_sessions(&self) -> usize {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub(super) fn gauges(&self) -> Vec<Gauge> {
        let sessions = self.busy_sessions();
        let overflow = self.overflow.lock().unwrap_or_else(PoisonError::into_inner).len();
        let rate = self.rate.lock().unwrap_or_else(PoisonError::into_inner).remembered();
        vec![
            Gauge::new(
                "worker_tasks",
                "Tasks of the worker's intake loop not yet joined (one per busy session, command or notice)",
                self.tasks.load(Ordering::Relaxed),
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
