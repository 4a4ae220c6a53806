//! The per-session state machine: which message runs next, what a message arriving during a
//! run does (the queue mode), and the handle by which `/stop` and `interrupt` cancel a run.
//! Which waiting messages make one turn, and when it may start, is [`batch`]'s rule; what a
//! full queue tells the chat is [`overflow`]'s.
//!
//! All of a session's state sits in one map entry behind the worker's `sessions` mutex. The
//! mutex is only held for short, synchronous decisions (never across an `.await`), so the
//! intake loop, session tasks and commands can all consult it without blocking each other.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures_util::FutureExt;
use switchboard_channels::contract::SessionKey;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Intake;
use super::batch::{self, Batching};
use super::job::{Choices, Control, Job};
use super::keepalive::Settle;
use super::{expiry, overflow, settle};
use crate::agent::SteerReceiver;
use crate::config::QueueMode;
use crate::store::{SessionHead, SessionStart};

/// How sessions queue messages (`[worker]`).
#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// The mode of sessions that did not choose one with `/queue`.
    pub mode: QueueMode,
    pub collect_window: Duration,
    /// Turns waiting behind a running one (a merged burst counts once); a message that would
    /// start one more is not kept, and the chat is told once (see `overflow`).
    pub max_depth: usize,
    /// Quiet time after which one sender's rapid messages are merged into one turn; zero = off.
    pub debounce: Duration,
    /// A turn whose newest message waited longer than this does not start (see `expiry`);
    /// zero = no limit.
    pub max_wait: Duration,
}

impl QueueSettings {
    pub fn from_config(config: &crate::config::WorkerConfig) -> Self {
        Self {
            mode: config.queue_mode,
            collect_window: Duration::from_millis(config.collect_window_ms),
            max_depth: config.max_queue_depth,
            debounce: Duration::from_millis(config.debounce_ms),
            max_wait: Duration::from_secs(config.max_wait_secs),
        }
    }
}

impl Default for QueueSettings {
    /// What the default configuration gives.
    fn default() -> Self {
        Self::from_config(&crate::config::WorkerConfig::default())
    }
}

/// The running turn of a session.
pub(super) struct ActiveRun {
    /// Cancelled by `/stop`, `/new` and `interrupt`; the run then stores "stopped".
    pub cancel: CancellationToken,
    /// Cancelled by the session task once the run's outcome is stored.
    pub finished: CancellationToken,
    /// `steer` mode: user messages for the running turn's next model call ...
    steer: mpsc::UnboundedSender<crate::provider::ChatMessage>,
    /// ... and their messages, held (not acked) until the turn's outcome is stored.
    steered: Vec<Job>,
}

/// One session with work in this worker. It exists exactly while a session task runs for it.
pub(super) struct Session {
    pub queue: VecDeque<Job>,
    pub active: Option<ActiveRun>,
    pub mode: QueueMode,
    /// `/model`: the chain entry tried first; `None` = the chain's order.
    pub model: Option<String>,
    /// `/verbose on`: progress messages while tools run.
    pub verbose: bool,
    /// When a message for this session last arrived (the full-queue notice waits for quiet).
    pub last_arrival: Instant,
}

/// Where `place` put a message.
pub(super) enum Placed {
    /// The session was idle: the caller starts its task.
    Started,
    Queued,
    /// The queue is full and the message is not kept. `first` = the first of this busy spell:
    /// it carries the one notice that names every message not kept (see `overflow`).
    Full {
        job: Box<Job>,
        first: bool,
    },
    /// Not kept, and a client waits for this message's own answer (an API request): it is
    /// answered at once, alone, instead of with the busy spell's notice.
    Refused {
        job: Box<Job>,
        reason: overflow::Reason,
    },
    /// `interrupt`: the running turn was cancelled and these older waiting messages dropped.
    Interrupted(Vec<Job>),
}

/// Whether a message that finds its session busy is kept: not in `drop` mode, nor beyond the
/// queue's depth. Either way the chat is told once per busy spell (see `overflow`).
fn not_kept(intake: &Intake, key: &SessionKey, job: Job, reason: overflow::Reason) -> Placed {
    if job.msg.awaits_reply() {
        return Placed::Refused { job: Box::new(job), reason };
    }
    let first = overflow::note(intake, key, &job.msg, reason);
    Placed::Full { job: Box::new(job), first }
}

/// Decides what happens to `job` in its session. Called by the intake loop in arrival order.
pub(super) fn place(intake: &Intake, key: &SessionKey, job: Job) -> Placed {
    let mut sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    let queue_settings = &intake.settings.queue;
    let Some(session) = sessions.get_mut(key) else {
        let mut queue = VecDeque::new();
        queue.push_back(job);
        let session = Session {
            queue,
            active: None,
            mode: queue_settings.mode,
            model: None,
            verbose: false,
            last_arrival: Instant::now(),
        };
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
    if session.active.is_some() && session.mode == QueueMode::Drop {
        return not_kept(intake, key, job, overflow::Reason::Busy);
    }
    // Turns, not messages, are counted: a message joining the last waiting turn (the same
    // sender's burst, or anything in `collect`) costs nothing, so a burst is never cut short.
    let steered = session.active.as_ref().map_or(0, |active| active.steered.len());
    session.queue.push_back(job);
    if batching(intake, session.mode).turns(&session.queue) + steered > queue_settings.max_depth.max(1) {
        let Some(job) = session.queue.pop_back() else { return Placed::Queued };
        return not_kept(intake, key, job, overflow::Reason::QueueFull);
    }
    // A voice note to transcribe waits for a turn of its own: transcribing is async work this
    // lock cannot wait for, and steered in it would reach the model as a path only.
    let hearable = intake.settings.hears_voice && job_has_voice_note(session.queue.back());
    if let Some(active) = session.active.as_mut().filter(|_| session.mode == QueueMode::Steer && !hearable) {
        // Sent under the lock the session task takes to end the run, so the text is either
        // read by the turn or still in the channel when it is counted there.
        if let Some(job) = session.queue.pop_back() {
            if active.steer.send(super::input::message(&job.msg)).is_ok() {
                active.steered.push(job);
            } else {
                session.queue.push_back(job);
            }
        }
    }
    Placed::Queued
}

fn job_has_voice_note(job: Option<&Job>) -> bool {
    job.is_some_and(|job| job.msg.media.iter().any(super::voice::is_voice_note))
}

/// The batching rule for a session in `mode`.
pub(super) fn batching(intake: &Intake, mode: QueueMode) -> Batching {
    let settings = &intake.settings.queue;
    Batching {
        mode,
        debounce: settings.debounce,
        collect_window: settings.collect_window,
        max_chars: intake.settings.max_message_chars,
    }
}

/// Runs one session's turns in order until its queue is empty, then removes the session.
pub(super) async fn session_loop(intake: Arc<Intake>, key: SessionKey) {
    let mut head = load_prefs(&intake, &key).await;
    loop {
        // The head read at the start serves the first turn, if it starts at once: while a
        // burst is awaited, `/new` or another process may change the history.
        if wait_for_turn(&intake, &key).await {
            head = None;
        }
        let Some(Batch { first, rest, cancel, mut steer }) = next_batch(&intake, &key) else { return };
        let head = head.take();
        let (primary, merged) = batch::merge(first, rest, mode_of(&intake, &key));
        let Some((primary, merged)) =
            expiry::admit(&intake.turns, intake.settings.queue.max_wait, primary, merged).await
        else {
            // No turn read the steering channel: what was steered meanwhile becomes followups.
            end_run(&intake, &key, &mut steer);
            continue;
        };
        let control = Control { cancel: &cancel, steer: &mut steer, choices: choices_of(&intake, &key), head };
        // `TurnRunner::run` catches a panic of the run itself; this one is for its bookkeeping
        // around the run (settling, compaction). Unwinding out of here would leave the session
        // marked running forever, and every later message of the chat queued behind nothing.
        let turn = AssertUnwindSafe(intake.turns.run(primary.msg, primary.held, control)).catch_unwind();
        let acked = turn.await.unwrap_or_else(|panic| {
            let panic = super::abort::panic_text(panic.as_ref());
            tracing::error!(session = %key, %panic, "a session task panicked after its run; the session goes on");
            false
        });
        let steered = end_run(&intake, &key, &mut steer);
        for job in merged.into_iter().chain(steered) {
            if acked {
                settle::settle_unanswered(&intake.turns, job, "merged into another turn").await;
            } else {
                // The turn went back to the bus; so do the messages it stood for.
                job.held.settle(Settle::Nak(None)).await;
            }
        }
    }
}

/// Marks the session idle. Steering messages the turn never read become followup turns, at
/// the front of the queue in their order; the ones it read are returned, to be settled.
fn end_run(intake: &Intake, key: &SessionKey, steer: &mut SteerReceiver) -> Vec<Job> {
    let mut sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
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

/// Reads what the session chose with `/queue`, `/model` and `/verbose` from the store; returns
/// the session's head, read with them.
async fn load_prefs(intake: &Intake, key: &SessionKey) -> Option<SessionHead> {
    let SessionStart { prefs, head } = match intake.turns.store.session_start(key).await {
        Ok(start) => start,
        Err(err) => {
            tracing::warn!(%err, session = %key, "cannot read the session's settings; using the defaults");
            return None;
        }
    };
    if let Some(mode) = prefs.queue_mode {
        set_mode(intake, key, mode);
    }
    let mut sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(session) = sessions.get_mut(key) {
        session.model = prefs.model;
        session.verbose = prefs.verbose;
    }
    Some(head)
}

/// Changes the model or the verbosity of a live session (`/model`, `/verbose`); a session
/// without a task reads them on start.
pub(super) fn set_prefs(intake: &Intake, key: &SessionKey, model: Option<Option<String>>, verbose: Option<bool>) {
    let mut sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(session) = sessions.get_mut(key) {
        if let Some(model) = model {
            session.model = model;
        }
        if let Some(verbose) = verbose {
            session.verbose = verbose;
        }
    }
}

/// The live session's model choice and verbosity.
fn choices_of(intake: &Intake, key: &SessionKey) -> Choices {
    let sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    sessions
        .get(key)
        .map_or_else(Choices::default, |session| Choices { model: session.model.clone(), verbose: session.verbose })
}

/// Changes the mode of a live session (`/queue`); a session without a task reads it on start.
pub(super) fn set_mode(intake: &Intake, key: &SessionKey, mode: QueueMode) {
    let mut sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(session) = sessions.get_mut(key) {
        session.mode = mode;
    }
}

fn mode_of(intake: &Intake, key: &SessionKey) -> QueueMode {
    let sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    sessions.get(key).map_or(intake.settings.queue.mode, |session| session.mode)
}

/// Waits until the turn at the front of the queue may start: in `collect` mode, or with
/// debouncing on, until its burst is over (see [`Batching::start_at`]). Sleeps without the lock
/// and looks again, since a message that arrived meanwhile moves the time. True when it waited.
async fn wait_for_turn(intake: &Intake, key: &SessionKey) -> bool {
    let free_since = Instant::now();
    let mut waited = false;
    loop {
        let start_at = {
            let sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(session) = sessions.get(key) else { return waited };
            batching(intake, session.mode).start_at(&session.queue, free_since)
        };
        match start_at {
            Some(at) if Instant::now() < at && !intake.turns.stopping.is_cancelled() => {
                waited = true;
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = intake.turns.stopping.cancelled() => {}
                }
            }
            _ => return waited,
        }
    }
}

/// Takes the next turn's messages and marks the session running; `None` (and the session
/// removed) when nothing waits. Done under the lock `place` takes, so no message is stranded
/// between "queue empty" and "session gone".
fn next_batch(intake: &Intake, key: &SessionKey) -> Option<Batch> {
    let mut sessions = intake.sessions.lock().unwrap_or_else(PoisonError::into_inner);
    let session = sessions.get_mut(key)?;
    if session.queue.is_empty() {
        sessions.remove(key);
        return None;
    }
    let len = batching(intake, session.mode).len_at(&session.queue, 0);
    let mut jobs = session.queue.drain(..len);
    let first = jobs.next()?;
    let rest: Vec<Job> = jobs.collect();
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
