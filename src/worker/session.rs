//! The per-session state machine: which message runs next, what a message arriving during a
//! run does (the queue mode), and the handle by which `/stop` and `interrupt` cancel a run.
//!
//! All of a session's state sits in one map entry behind the worker's `sessions` mutex. The
//! mutex is only held for short, synchronous decisions (never across an `.await`), so the
//! intake loop, session tasks and commands can all consult it without blocking each other.

use std::collections::VecDeque;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use switchboard_channels::contract::InboundMessage;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::keepalive::{Held, Settle};
use super::{Shared, commands, run};
use crate::agent::SteerReceiver;

/// What a message does that arrives while its session is running a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueMode {
    /// It becomes its own turn afterwards, in arrival order.
    #[default]
    Followup,
    /// Waiting messages are merged into one turn once the chat has been quiet for a moment.
    Collect,
    /// The running turn is cancelled; only the newest message is answered.
    Interrupt,
    /// It is added to the running turn before its next model call.
    Steer,
}

impl QueueMode {
    pub const ALL: [QueueMode; 4] = [QueueMode::Followup, QueueMode::Collect, QueueMode::Interrupt, QueueMode::Steer];

    pub fn as_str(self) -> &'static str {
        match self {
            QueueMode::Followup => "followup",
            QueueMode::Collect => "collect",
            QueueMode::Interrupt => "interrupt",
            QueueMode::Steer => "steer",
        }
    }

    pub fn parse(name: &str) -> Option<QueueMode> {
        QueueMode::ALL.into_iter().find(|mode| mode.as_str().eq_ignore_ascii_case(name))
    }
}

/// How sessions queue messages.
#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// The mode of sessions that did not choose one with `/queue`.
    pub mode: QueueMode,
    pub collect_window: Duration,
    /// Messages waiting behind a running turn; more are answered with a notice.
    pub max_depth: usize,
    /// Quiet time after which one sender's rapid messages are merged; zero = off.
    pub debounce: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            mode: QueueMode::Followup,
            collect_window: Duration::from_millis(1500),
            max_depth: 10,
            debounce: Duration::ZERO,
        }
    }
}

/// A message taken from the bus and decoded, waiting for its session's turn.
pub(super) struct Job {
    pub msg: InboundMessage,
    pub held: Held,
    /// Arrival order across the worker: `/stop` drops only what arrived before it.
    pub seq: u64,
    pub _slot: OwnedSemaphorePermit,
}

/// The running turn of a session.
pub(super) struct ActiveRun {
    /// Cancelled by `/stop`, `/new` and `interrupt`; the run then stores "stopped".
    pub cancel: CancellationToken,
    /// Cancelled by the session task once the run's outcome is stored.
    pub finished: CancellationToken,
    /// `steer` mode: texts for the running turn's next model call ...
    steer: mpsc::UnboundedSender<String>,
    /// ... and their messages, held (not acked) until the turn's outcome is stored.
    steered: Vec<Job>,
}

/// What a session's running turn is controlled by.
pub(super) struct Control<'a> {
    pub cancel: &'a CancellationToken,
    pub steer: &'a mut SteerReceiver,
}

/// One session with work in this worker. It exists exactly while a session task runs for it.
pub(super) struct Session {
    pub queue: VecDeque<Job>,
    pub active: Option<ActiveRun>,
    pub mode: QueueMode,
    last_arrival: Instant,
}

/// Where `place` put a message.
pub(super) enum Placed {
    /// The session was idle: the caller starts its task.
    Started,
    Queued,
    /// The queue is full: the sender is told to wait.
    Full(Box<Job>),
    /// `interrupt`: the running turn was cancelled and these older waiting messages dropped.
    Interrupted(Vec<Job>),
}

/// Decides what happens to `job` in its session. Called by the intake loop in arrival order.
pub(super) fn place(shared: &Shared, key: &str, job: Job) -> Placed {
    let mut sessions = shared.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    let queue_settings = &shared.settings.queue;
    let Some(session) = sessions.get_mut(key) else {
        let mut queue = VecDeque::new();
        queue.push_back(job);
        let session = Session { queue, active: None, mode: queue_settings.mode, last_arrival: Instant::now() };
        sessions.insert(key.to_owned(), session);
        return Placed::Started;
    };
    session.last_arrival = Instant::now();
    if session.active.is_some() && session.mode == QueueMode::Interrupt {
        if let Some(active) = &session.active {
            active.cancel.cancel();
        }
        let dropped = session.queue.drain(..).collect();
        session.queue.push_back(job);
        return Placed::Interrupted(dropped);
    }
    let waiting = session.queue.len() + session.active.as_ref().map_or(0, |active| active.steered.len());
    if waiting >= queue_settings.max_depth.max(1) {
        return Placed::Full(Box::new(job));
    }
    if let Some(active) = session.active.as_mut().filter(|_| session.mode == QueueMode::Steer) {
        // Sent under the lock the session task takes to end the run, so the text is either
        // read by the turn or still in the channel when it is counted there.
        if active.steer.send(run::input_text(&job.msg)).is_ok() {
            active.steered.push(job);
            return Placed::Queued;
        }
    }
    session.queue.push_back(job);
    Placed::Queued
}

/// Runs one session's turns in order until its queue is empty, then removes the session.
pub(super) async fn session_loop(shared: Arc<Shared>, key: String) {
    load_mode(&shared, &key).await;
    loop {
        wait_for_quiet(&shared, &key).await;
        let Some(Batch { first, rest, cancel, mut steer }) = next_batch(&shared, &key) else { return };
        let (primary, merged) = merge(first, rest, mode_of(&shared, &key));
        let control = Control { cancel: &cancel, steer: &mut steer };
        let acked = run::process(&shared, primary.msg, primary.held, control).await;
        let steered = end_run(&shared, &key, &mut steer);
        for job in merged.into_iter().chain(steered) {
            if acked {
                commands::settle_unanswered(&shared, job, "merged into another turn").await;
            } else {
                // The turn went back to the bus; so do the messages it stood for.
                job.held.settle(Settle::Nak(None)).await;
            }
        }
    }
}

/// Marks the session idle. Steering messages the turn never read become followup turns, at
/// the front of the queue in their order; the ones it read are returned, to be settled.
fn end_run(shared: &Shared, key: &str, steer: &mut SteerReceiver) -> Vec<Job> {
    let mut sessions = shared.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(session) = sessions.get_mut(key) else { return Vec::new() };
    let Some(mut active) = session.active.take() else { return Vec::new() };
    active.finished.cancel();
    let mut unread = 0;
    while steer.try_recv().is_ok() {
        unread += 1;
    }
    let read = active.steered.len().saturating_sub(unread);
    let followups = active.steered.split_off(read);
    for job in followups.into_iter().rev() {
        session.queue.push_front(job);
    }
    active.steered
}

/// Reads the session's own queue mode from the store, if it chose one.
async fn load_mode(shared: &Shared, key: &str) {
    let mode = match shared.store.session_info(key).await {
        Ok(info) => info.queue_mode.as_deref().and_then(QueueMode::parse),
        Err(err) => {
            tracing::warn!(%err, session = %key, "cannot read the session's queue mode; using the default");
            None
        }
    };
    if let Some(mode) = mode {
        set_mode(shared, key, mode);
    }
}

/// Changes the mode of a live session (`/queue`); a session without a task reads it on start.
pub(super) fn set_mode(shared: &Shared, key: &str, mode: QueueMode) {
    let mut sessions = shared.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(session) = sessions.get_mut(key) {
        session.mode = mode;
    }
}

fn mode_of(shared: &Shared, key: &str) -> QueueMode {
    let sessions = shared.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    sessions.get(key).map_or(shared.settings.queue.mode, |session| session.mode)
}

/// In `collect` mode (or with debouncing on) waits until no message arrived for the window,
/// so a burst becomes one turn. Sleeps without the lock and re-checks the last arrival.
async fn wait_for_quiet(shared: &Shared, key: &str) {
    let window = match mode_of(shared, key) {
        QueueMode::Collect => shared.settings.queue.collect_window,
        _ => shared.settings.queue.debounce,
    };
    if window.is_zero() {
        return;
    }
    loop {
        let quiet_at = {
            let sessions = shared.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            match sessions.get(key) {
                Some(session) => session.last_arrival + window,
                None => return,
            }
        };
        if Instant::now() >= quiet_at || shared.stopping.is_cancelled() {
            return;
        }
        tokio::time::sleep_until(quiet_at).await;
    }
}

/// Takes the next turn's messages and marks the session running; `None` (and the session
/// removed) when nothing waits. Done under the lock `place` takes, so no message is stranded
/// between "queue empty" and "session gone".
fn next_batch(shared: &Shared, key: &str) -> Option<Batch> {
    let mut sessions = shared.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    let session = sessions.get_mut(key)?;
    let first = match session.queue.pop_front() {
        Some(job) => job,
        None => {
            sessions.remove(key);
            return None;
        }
    };
    let mut rest = Vec::new();
    let merge_all = session.mode == QueueMode::Collect;
    let debounce = !shared.settings.queue.debounce.is_zero();
    while let Some(next) = session.queue.front() {
        let same_sender = next.msg.sender.id == first.msg.sender.id;
        if !(merge_all || (debounce && same_sender)) {
            break;
        }
        rest.extend(session.queue.pop_front());
    }
    let cancel = CancellationToken::new();
    let (tx, steer) = mpsc::unbounded_channel();
    let active =
        ActiveRun { cancel: cancel.clone(), finished: CancellationToken::new(), steer: tx, steered: Vec::new() };
    session.active = Some(active);
    Some(Batch { first, rest, cancel, steer })
}

/// The messages of one turn and its controls.
struct Batch {
    first: Job,
    rest: Vec<Job>,
    cancel: CancellationToken,
    steer: SteerReceiver,
}

/// Makes one turn of a batch: the newest message carries the joined texts (with sender
/// names when several people wrote) and gets the reply; the others are settled after it.
fn merge(first: Job, mut rest: Vec<Job>, mode: QueueMode) -> (Job, Vec<Job>) {
    let Some(mut primary) = rest.pop() else { return (first, rest) };
    let mut batch = vec![first];
    batch.extend(rest);
    let named = mode == QueueMode::Collect;
    let line = |msg: &InboundMessage| {
        if named { format!("{}: {}", msg.sender.name, msg.content) } else { msg.content.clone() }
    };
    let mut text: Vec<String> = batch.iter().map(|job| line(&job.msg)).collect();
    text.push(line(&primary.msg));
    primary.msg.content = text.join("\n");
    for job in &batch {
        primary.msg.media.extend(job.msg.media.iter().cloned());
    }
    (primary, batch)
}
