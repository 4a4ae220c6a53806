//! Live feedback while a run goes on: the typing indicator and edit-in-place streaming.
//!
//! [`run_live`] follows the channel's run events. `run.started` starts a typing task for the
//! run's target; `chunk` events grow a draft, a message that an editor task shows and edits at
//! most once per the platform's edit interval. The run's final reply, delivered by
//! [`run_outbound`](super::outbound::run_outbound), takes the draft over through
//! [`LiveRuns::finish`] and turns it into the reply's first part; finishing also stops typing.
//!
//! Runs are keyed by [`RunEvent::run_key`]: the inbound message id they answer (a reply's
//! `in_reply_to`), or the run id. Keys of finished runs are remembered for a while, so that
//! events arriving after the reply (the event stream and the reply queue are not ordered with
//! each other) cannot start typing or a new draft again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::RecentIds;
use super::platform::Platform;
use crate::bus::Events;
use crate::contract::{RunEvent, RunEventBody};

/// Runs older than this lose their typing indicator and draft, whatever happened to them.
const MAX_RUN_AGE: Duration = Duration::from_secs(600);
/// How often stale runs are looked for.
const SWEEP_INTERVAL: Duration = Duration::from_secs(30);
/// How many finished run keys are remembered.
const FINISHED_KEPT: usize = 1024;
/// How long a run streams before its draft is first shown: an answer complete by then is
/// simply sent, without a draft that flickers for a moment and an edit to replace it.
const FIRST_DRAFT_AFTER: Duration = Duration::from_millis(500);

/// Runs in progress in a platform's chats, shared by the event follower and the
/// `Courier` that delivers replies.
pub struct LiveRuns<P: Platform> {
    state: Mutex<LiveState<P>>,
    typing_interval: Duration,
}

struct LiveState<P: Platform> {
    runs: HashMap<String, RunEntry<P>>,
    finished: RecentIds,
}

struct RunEntry<P: Platform> {
    typing: Option<CancellationToken>,
    draft: Option<Arc<Draft<P>>>,
    started: Instant,
}

impl<P: Platform> RunEntry<P> {
    fn new() -> Self {
        Self { typing: None, draft: None, started: Instant::now() }
    }

    fn stop_typing(&mut self) {
        if let Some(typing) = self.typing.take() {
            typing.cancel();
        }
    }

    fn close(mut self) -> Option<Arc<Draft<P>>> {
        self.stop_typing();
        if let Some(draft) = &self.draft {
            draft.closed.cancel();
        }
        self.draft
    }
}

impl<P: Platform> Default for LiveRuns<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Platform> LiveRuns<P> {
    pub fn new() -> Self {
        Self {
            state: Mutex::new(LiveState { runs: HashMap::new(), finished: RecentIds::new(FINISHED_KEPT) }),
            typing_interval: P::TYPING_INTERVAL,
        }
    }

    /// Repeats typing this often instead of the platform's default (tests use a short interval).
    pub fn with_typing_interval(mut self, interval: Duration) -> Self {
        self.typing_interval = interval;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LiveState<P>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The reply for run `key` is being delivered: typing stops, later events of the run are
    /// ignored, and its draft (if one was started) is handed over, its editor stopped.
    pub fn finish(&self, key: &str) -> Option<Arc<Draft<P>>> {
        let mut state = self.lock();
        state.finished.insert(key);
        state.runs.remove(key).and_then(RunEntry::close)
    }

    /// Runs currently followed (for tests and diagnostics).
    pub fn active_runs(&self) -> usize {
        self.lock().runs.len()
    }

    /// The entry of a run that has not finished yet, created if needed.
    fn with_entry<R>(&self, key: &str, f: impl FnOnce(&mut RunEntry<P>) -> R) -> Option<R> {
        let mut state = self.lock();
        if state.finished.contains(key) {
            return None;
        }
        Some(f(state.runs.entry(key.to_owned()).or_insert_with(RunEntry::new)))
    }

    /// The run ended without its reply delivered yet: typing stops; a draft stays for the reply.
    fn end(&self, key: &str) {
        let mut state = self.lock();
        let Some(entry) = state.runs.get_mut(key) else { return };
        entry.stop_typing();
        if entry.draft.is_none() {
            state.runs.remove(key);
        }
    }

    fn sweep(&self, max_age: Duration) {
        let mut state = self.lock();
        let stale: Vec<String> =
            state.runs.iter().filter(|(_, run)| run.started.elapsed() > max_age).map(|(key, _)| key.clone()).collect();
        for key in stale {
            tracing::debug!(run = %key, "forgetting a run that never got its reply");
            if let Some(entry) = state.runs.remove(&key) {
                entry.close();
            }
        }
    }

    fn close_all(&self) {
        let mut state = self.lock();
        for (_, entry) in state.runs.drain() {
            entry.close();
        }
    }
}

/// The streamed text of one run, shown in one message while it grows.
pub struct Draft<P: Platform> {
    target: P::Target,
    text: Mutex<String>,
    changed: Notify,
    closed: CancellationToken,
    /// Held by the editor during each platform call, so that [`Draft::settle`] waits for it.
    shown: tokio::sync::Mutex<Shown<P::MessageId>>,
}

struct Shown<M> {
    message: Option<M>,
    text: String,
    broken: bool,
}

/// What a draft left in the chat when its run's reply arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftState<M> {
    /// No message was shown.
    Nothing,
    /// This message shows the streamed text.
    Shown(M),
    /// Streaming failed after this message (if any) was shown.
    Broken(Option<M>),
}

impl<P: Platform> Draft<P> {
    fn new(target: P::Target) -> Self {
        Self {
            target,
            text: Mutex::new(String::new()),
            changed: Notify::new(),
            closed: CancellationToken::new(),
            shown: tokio::sync::Mutex::new(Shown { message: None, text: String::new(), broken: false }),
        }
    }

    fn append(&self, chunk: &str) {
        let mut text = self.text.lock().unwrap_or_else(PoisonError::into_inner);
        // Only the visible start is ever shown.
        if text.len() < P::DRAFT.kept_bytes {
            text.push_str(chunk);
        }
        drop(text);
        self.changed.notify_one();
    }

    /// The text to show now: what was streamed, cut at the platform's visible limit.
    fn visible_text(&self, platform: &P) -> String {
        let text = self.text.lock().unwrap_or_else(PoisonError::into_inner);
        platform.visible_draft(&text).trim().to_owned()
    }

    /// Waits for an edit in flight, then tells what the chat shows. Call after
    /// [`LiveRuns::finish`], which has stopped the editor.
    pub async fn settle(&self) -> DraftState<P::MessageId> {
        let shown = self.shown.lock().await;
        match (shown.message.clone(), shown.broken) {
            (message, true) => DraftState::Broken(message),
            (Some(message), false) => DraftState::Shown(message),
            (None, false) => DraftState::Nothing,
        }
    }
}

/// Follows the run events of the platform's channel and keeps typing indicators and drafts up
/// to date, until `shutdown` or the end of `events`.
pub async fn run_live<P: Platform>(
    platform: Arc<P>,
    mut events: Events,
    live: Arc<LiveRuns<P>>,
    shutdown: CancellationToken,
) {
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = sweep.tick() => live.sweep(MAX_RUN_AGE),
            event = events.next() => match event {
                Some(event) => on_event(&platform, &live, &shutdown, event),
                None => break,
            },
        }
    }
    live.close_all();
}

fn on_event<P: Platform>(platform: &Arc<P>, live: &LiveRuns<P>, shutdown: &CancellationToken, event: RunEvent) {
    if event.channel != P::CHANNEL {
        return;
    }
    let key = event.run_key();
    let Some(target) = platform.live_target(&event) else {
        tracing::debug!(chat_id = %event.chat_id, "run event for a chat id that is not the platform's");
        return;
    };
    match &event.body {
        RunEventBody::Started if platform.typing_enabled() => {
            start_typing(platform, live, key, target, shutdown.child_token());
        }
        RunEventBody::Chunk { text } if platform.streams_in(&target) => stream_chunk(platform, live, key, text, target),
        RunEventBody::Completed { .. } | RunEventBody::Failed { .. } => live.end(key),
        _ => {}
    }
}

/// Starts the run's typing task, unless it has one or has finished.
fn start_typing<P: Platform>(
    platform: &Arc<P>,
    live: &LiveRuns<P>,
    key: &str,
    target: P::Target,
    stop: CancellationToken,
) {
    let fresh = live.with_entry(key, |entry| {
        let fresh = entry.typing.is_none();
        if fresh {
            entry.typing = Some(stop.clone());
        }
        fresh
    });
    if fresh == Some(true) {
        tokio::spawn(keep_typing(Arc::clone(platform), target, live.typing_interval, stop));
    }
}

/// Adds a chunk to the run's draft; the first chunk creates the draft and its editor task.
fn stream_chunk<P: Platform>(platform: &Arc<P>, live: &LiveRuns<P>, key: &str, text: &str, target: P::Target) {
    let draft = live.with_entry(key, |entry| match &entry.draft {
        Some(draft) => (Arc::clone(draft), false),
        None => {
            let draft = Arc::new(Draft::new(target));
            entry.draft = Some(Arc::clone(&draft));
            (draft, true)
        }
    });
    let Some((draft, fresh)) = draft else { return };
    draft.append(text);
    if fresh {
        tokio::spawn(edit_draft(Arc::clone(platform), draft));
    }
}

/// Sends typing every `interval` until `stop` is cancelled or the safety cap passes.
/// Failures are not worth more than a debug line: the next round tries again.
///
/// A call under way when typing stops is left to finish. It is on the wire by then, so
/// giving it up would not take it back; over HTTP/1.1 (a local Bot API server, a proxy) it
/// would only make hyper close the connection, and the next call, often the reply itself,
/// would wait for a new one.
async fn keep_typing<P: Platform>(platform: Arc<P>, target: P::Target, interval: Duration, stop: CancellationToken) {
    let deadline = Instant::now() + MAX_RUN_AGE;
    while Instant::now() < deadline && !stop.is_cancelled() {
        if let Err(err) = platform.typing(&target).await {
            tracing::debug!(?target, error = %platform.describe(&err), "typing indicator failed");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// Shows the draft's text and edits it as it grows, at most once per edit interval, until the
/// draft is closed or a call fails. Chunks arriving in between are coalesced into one edit.
/// A platform may ask to wait instead (flood control); any other failure stops streaming:
/// it is a nicety, the reply is not.
async fn edit_draft<P: Platform>(platform: Arc<P>, draft: Arc<Draft<P>>) {
    let interval = platform.edit_interval();
    tokio::select! {
        _ = draft.closed.cancelled() => return,
        _ = tokio::time::sleep(FIRST_DRAFT_AFTER) => {}
    }
    loop {
        tokio::select! {
            _ = draft.closed.cancelled() => return,
            _ = draft.changed.notified() => {}
        }
        let pause = {
            let mut shown = draft.shown.lock().await;
            if draft.closed.is_cancelled() {
                return;
            }
            match show(&*platform, &draft, &mut shown).await {
                Ok(()) => interval,
                Err(err) => match platform.draft_pause(&err) {
                    Some(wait) => {
                        // Intermediate edits are skipped; the latest text is shown after the wait.
                        draft.changed.notify_one();
                        wait.max(interval)
                    }
                    None => {
                        let error = platform.describe(&err);
                        tracing::info!(target = ?draft.target, %error, "streaming stopped for a run");
                        shown.broken = true;
                        return;
                    }
                },
            }
        };
        tokio::select! {
            _ = draft.closed.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// Posts the draft's first message, or edits it to the current text. Plain text: a half
/// streamed reply is rarely valid Markdown.
async fn show<P: Platform>(platform: &P, draft: &Draft<P>, shown: &mut Shown<P::MessageId>) -> Result<(), P::Error> {
    let text = draft.visible_text(platform);
    if text.is_empty() || text == shown.text {
        return Ok(());
    }
    match &shown.message {
        None => shown.message = Some(platform.post_draft(&draft.target, &text).await?),
        Some(message) => platform.edit_draft(&draft.target, message, &text).await?,
    }
    shown.text = text;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::testing::Nowhere;

    #[test]
    fn finished_runs_are_not_started_again() {
        let live = LiveRuns::<Nowhere>::new();
        assert!(live.with_entry("in-1", |_| ()).is_some());
        assert!(live.finish("in-1").is_none());
        assert_eq!(live.active_runs(), 0);
        assert!(live.with_entry("in-1", |_| ()).is_none());
    }

    #[test]
    fn a_draft_keeps_a_bounded_text() {
        let draft = Draft::<Nowhere>::new(());
        for _ in 0..3000 {
            draft.append("ab😀");
        }
        assert!(draft.text.lock().unwrap().len() <= Nowhere::DRAFT.kept_bytes + 8);
        assert_eq!(draft.visible_text(&Nowhere).chars().count(), 10);
    }
}
