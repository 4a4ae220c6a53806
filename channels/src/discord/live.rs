//! Live feedback while a run goes on: the typing indicator and edit-in-place streaming.
//!
//! `run_live` follows the channel's run events. `run.started` starts a typing task for the
//! channel (the thread, for a thread's session); `chunk` events grow a draft, a message that an
//! editor task shows and edits at most once per `stream.edit_interval`. The run's final reply,
//! delivered by `run_outbound`, takes the draft over through [`LiveRuns::finish`] and turns it
//! into the reply's first part; finishing also stops typing.
//!
//! Runs are keyed by the inbound message id they answer (a reply's `in_reply_to`), or by the
//! run id when an event has no inbound id. Keys of finished runs are remembered for a while, so
//! that events arriving after the reply (the event stream and the reply queue are not ordered
//! with each other) cannot start typing or a new draft again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use serenity::all::{ChannelId, EditMessage, MessageId};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::directory::Directory;
use super::outbound::{Target, allowed_mentions, parse_id};
use super::rest::{Rest, RestError};
use super::{CHANNEL, DiscordSettings, MESSAGE_LIMIT};
use crate::bus::Events;
use crate::contract::{RunEvent, RunEventBody};
use crate::delivery::RecentIds;

/// How often typing is repeated by default (Discord shows it for about 10 s).
const TYPING_INTERVAL: Duration = Duration::from_secs(8);
/// Runs older than this lose their typing indicator and draft, whatever happened to them.
const MAX_RUN_AGE: Duration = Duration::from_secs(600);
/// How often stale runs are looked for.
const SWEEP_INTERVAL: Duration = Duration::from_secs(30);
/// How many finished run keys are remembered.
const FINISHED_KEPT: usize = 1024;
/// Streamed text kept per draft: enough for the visible 2000 characters.
const DRAFT_KEPT_BYTES: usize = 4 * MESSAGE_LIMIT;

/// Runs in progress in Discord channels, shared by the event follower and the reply sender.
pub(crate) struct LiveRuns {
    state: Mutex<LiveState>,
    directory: Arc<Directory>,
    typing_interval: Duration,
}

struct LiveState {
    runs: HashMap<String, RunEntry>,
    finished: RecentIds,
}

struct RunEntry {
    typing: Option<CancellationToken>,
    draft: Option<Arc<Draft>>,
    started: Instant,
}

impl RunEntry {
    fn new() -> Self {
        Self { typing: None, draft: None, started: Instant::now() }
    }

    fn stop_typing(&mut self) {
        if let Some(typing) = self.typing.take() {
            typing.cancel();
        }
    }

    fn close(mut self) -> Option<Arc<Draft>> {
        self.stop_typing();
        if let Some(draft) = &self.draft {
            draft.closed.cancel();
        }
        self.draft
    }
}

impl LiveRuns {
    pub(crate) fn new(directory: Arc<Directory>) -> Self {
        Self {
            state: Mutex::new(LiveState { runs: HashMap::new(), finished: RecentIds::new(FINISHED_KEPT) }),
            directory,
            typing_interval: TYPING_INTERVAL,
        }
    }

    /// Repeats typing this often instead of every 8 s (tests use a short interval).
    pub(crate) fn with_typing_interval(mut self, interval: Duration) -> Self {
        self.typing_interval = interval;
        self
    }

    pub(crate) fn directory(&self) -> &Directory {
        &self.directory
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LiveState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The reply for run `key` is being delivered: typing stops, later events of the run are
    /// ignored, and its draft (if one was started) is handed over, its editor stopped.
    pub(crate) fn finish(&self, key: &str) -> Option<Arc<Draft>> {
        let mut state = self.lock();
        state.finished.insert(key);
        state.runs.remove(key).and_then(RunEntry::close)
    }

    /// The entry of a run that has not finished yet, created if needed.
    fn with_entry<R>(&self, key: &str, f: impl FnOnce(&mut RunEntry) -> R) -> Option<R> {
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
pub(crate) struct Draft {
    target: Target,
    text: Mutex<String>,
    changed: Notify,
    closed: CancellationToken,
    /// Held by the editor during each REST call, so that [`Draft::settle`] waits for it.
    shown: tokio::sync::Mutex<Shown>,
}

#[derive(Default)]
struct Shown {
    message: Option<MessageId>,
    text: String,
    broken: bool,
}

/// What a draft left in the channel when its run's reply arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DraftState {
    /// No message was shown.
    Nothing,
    /// This message shows the streamed text.
    Shown(MessageId),
    /// Streaming failed after this message (if any) was shown.
    Broken(Option<MessageId>),
}

impl Draft {
    fn new(target: Target) -> Self {
        Self {
            target,
            text: Mutex::new(String::new()),
            changed: Notify::new(),
            closed: CancellationToken::new(),
            shown: tokio::sync::Mutex::new(Shown::default()),
        }
    }

    fn append(&self, chunk: &str) {
        let mut text = self.text.lock().unwrap_or_else(PoisonError::into_inner);
        if text.len() < DRAFT_KEPT_BYTES {
            text.push_str(chunk);
        }
        drop(text);
        self.changed.notify_one();
    }

    /// The text to show now: what was streamed, cut at the message limit (the draft stops
    /// growing there; the final reply shows everything).
    fn visible_text(&self) -> String {
        let text = self.text.lock().unwrap_or_else(PoisonError::into_inner);
        let visible: String = text.chars().take(MESSAGE_LIMIT).collect();
        visible.trim().to_owned()
    }

    /// Waits for an edit in flight, then tells what the channel shows. Call after
    /// [`LiveRuns::finish`], which has stopped the editor.
    pub(crate) async fn settle(&self) -> DraftState {
        let shown = self.shown.lock().await;
        match (shown.message, shown.broken) {
            (message, true) => DraftState::Broken(message),
            (Some(message), false) => DraftState::Shown(message),
            (None, false) => DraftState::Nothing,
        }
    }
}

/// Follows the run events of the channel and keeps typing indicators and drafts up to date,
/// until `shutdown` or the end of `events`.
pub(crate) async fn run_live(
    rest: Arc<Rest>,
    settings: Arc<DiscordSettings>,
    mut events: Events,
    live: Arc<LiveRuns>,
    shutdown: CancellationToken,
) {
    let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = sweep.tick() => live.sweep(MAX_RUN_AGE),
            event = events.next() => match event {
                Some(event) => on_event(&rest, &settings, &live, &shutdown, event),
                None => break,
            },
        }
    }
    live.close_all();
}

fn on_event(
    rest: &Arc<Rest>,
    settings: &DiscordSettings,
    live: &LiveRuns,
    shutdown: &CancellationToken,
    event: RunEvent,
) {
    if event.channel != CHANNEL {
        return;
    }
    let key = event.run_key();
    let Some(channel) = channel_of(&event) else {
        tracing::debug!(chat_id = %event.chat_id, "run event for a channel id that is not numeric");
        return;
    };
    match &event.body {
        RunEventBody::Started if settings.typing => start_typing(rest, live, key, channel, shutdown.child_token()),
        RunEventBody::Chunk { text } if streams_in(settings, live.directory(), channel) => {
            let target = || draft_target(live.directory(), channel, &event);
            stream_chunk(rest, live, key, text, target, settings.stream.edit_interval);
        }
        RunEventBody::Completed { .. } | RunEventBody::Failed { .. } => live.end(key),
        _ => {}
    }
}

/// The channel a run shows in: its thread if it is in one, else the chat.
fn channel_of(event: &RunEvent) -> Option<ChannelId> {
    event.thread_id.as_deref().and_then(parse_id).or_else(|| parse_id(&event.chat_id)).map(ChannelId::new)
}

fn streams_in(settings: &DiscordSettings, directory: &Directory, channel: ChannelId) -> bool {
    if directory.is_direct(channel.get()) { settings.stream.private } else { settings.stream.groups }
}

/// Where a draft goes: the run's channel, referencing the triggering message as the reply
/// would (in guild channels).
fn draft_target(directory: &Directory, channel: ChannelId, event: &RunEvent) -> Target {
    let trigger = event.reply_to.as_deref().and_then(parse_id).filter(|_| !directory.is_direct(channel.get()));
    Target { channel, reply_to: trigger.map(MessageId::new) }
}

/// Starts the run's typing task, unless it has one or has finished.
fn start_typing(rest: &Arc<Rest>, live: &LiveRuns, key: &str, channel: ChannelId, stop: CancellationToken) {
    let fresh = live.with_entry(key, |entry| {
        let fresh = entry.typing.is_none();
        if fresh {
            entry.typing = Some(stop.clone());
        }
        fresh
    });
    if fresh == Some(true) {
        tokio::spawn(keep_typing(Arc::clone(rest), channel, live.typing_interval, stop));
    }
}

/// Triggers typing every `interval` until `stop` is cancelled or the safety cap passes.
/// Failures are not worth more than a debug line: the next round tries again.
async fn keep_typing(rest: Arc<Rest>, channel: ChannelId, interval: Duration, stop: CancellationToken) {
    let deadline = Instant::now() + MAX_RUN_AGE;
    while Instant::now() < deadline {
        tokio::select! {
            _ = stop.cancelled() => return,
            result = rest.typing(channel) => if let Err(err) = result {
                tracing::debug!(%channel, error = %err, "typing indicator failed");
            },
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// Adds a chunk to the run's draft; the first chunk creates the draft and its editor task.
fn stream_chunk(
    rest: &Arc<Rest>,
    live: &LiveRuns,
    key: &str,
    text: &str,
    target: impl FnOnce() -> Target,
    edit_interval: Duration,
) {
    let draft = live.with_entry(key, |entry| match &entry.draft {
        Some(draft) => (Arc::clone(draft), false),
        None => {
            let draft = Arc::new(Draft::new(target()));
            entry.draft = Some(Arc::clone(&draft));
            (draft, true)
        }
    });
    let Some((draft, fresh)) = draft else { return };
    draft.append(text);
    if fresh {
        tokio::spawn(edit_draft(Arc::clone(rest), draft, edit_interval));
    }
}

/// Shows the draft's text and edits it as it grows, at most once per `interval`, until the
/// draft is closed or a call fails (a 429 included: streaming is a nicety, the reply is not,
/// and more edits would only deepen the rate limit). Chunks arriving in between are
/// coalesced into one edit.
async fn edit_draft(rest: Arc<Rest>, draft: Arc<Draft>, interval: Duration) {
    loop {
        tokio::select! {
            _ = draft.closed.cancelled() => return,
            _ = draft.changed.notified() => {}
        }
        {
            let mut shown = draft.shown.lock().await;
            if draft.closed.is_cancelled() {
                return;
            }
            if let Err(err) = show(&rest, &draft, &mut shown).await {
                tracing::info!(channel = %draft.target.channel, error = %err, "streaming stopped for a run");
                shown.broken = true;
                return;
            }
        }
        tokio::select! {
            _ = draft.closed.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// Sends the draft's first message, or edits it to the current text. Once.
async fn show(rest: &Rest, draft: &Draft, shown: &mut Shown) -> Result<(), RestError> {
    let text = draft.visible_text();
    if text.is_empty() || text == shown.text {
        return Ok(());
    }
    let target = &draft.target;
    match shown.message {
        None => {
            shown.message = Some(rest.create_message(target.channel, &target.message(&text, true), &[]).await?);
        }
        Some(message) => {
            let edit = EditMessage::new().content(text.clone()).allowed_mentions(allowed_mentions());
            rest.edit_message(target.channel, message, &edit).await?;
        }
    }
    shown.text = text;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discord::directory::ChannelKind;

    fn event(session_key: &str, chat: &str, inbound_id: Option<&str>) -> RunEvent {
        RunEvent {
            v: 1,
            run_id: "r".into(),
            session_key: session_key.into(),
            channel: "discord".into(),
            chat_id: chat.into(),
            inbound_id: inbound_id.map(str::to_owned),
            thread_id: session_key.rsplit_once(":thread:").map(|(_, thread)| thread.to_owned()),
            reply_to: inbound_id.and_then(|id| id.rsplit_once(':')).map(|(_, message)| message.to_owned()),
            at: chrono::Utc::now(),
            body: RunEventBody::Started,
        }
    }

    #[test]
    fn runs_show_in_their_thread_or_chat() {
        assert_eq!(channel_of(&event("discord:200:thread:201", "200", None)), Some(ChannelId::new(201)));
        assert_eq!(channel_of(&event("ops/discord:200:thread:9", "200", None)), Some(ChannelId::new(9)));
        assert_eq!(channel_of(&event("discord:200", "200", None)), Some(ChannelId::new(200)));
        assert_eq!(channel_of(&event("discord:x", "x", None)), None);
    }

    #[test]
    fn drafts_reference_the_trigger_in_guild_channels_only() {
        let directory = Directory::default();
        directory.insert(7, ChannelKind::Direct);
        let guild = draft_target(&directory, ChannelId::new(200), &event("discord:200", "200", Some("discord:200:42")));
        assert_eq!(guild.reply_to, Some(MessageId::new(42)));
        let dm = draft_target(&directory, ChannelId::new(7), &event("discord:7", "7", Some("discord:7:42")));
        assert_eq!(dm.reply_to, None);
    }

    #[test]
    fn finished_runs_are_not_started_again() {
        let live = LiveRuns::new(Arc::new(Directory::default()));
        assert!(live.with_entry("in-1", |_| ()).is_some());
        assert!(live.finish("in-1").is_none());
        assert!(live.with_entry("in-1", |_| ()).is_none());
    }

    #[test]
    fn a_draft_stops_growing_at_the_message_limit() {
        let draft = Draft::new(Target { channel: ChannelId::new(1), reply_to: None });
        for _ in 0..3000 {
            draft.append("ab😀");
        }
        assert_eq!(draft.visible_text().chars().count(), MESSAGE_LIMIT);
        assert!(draft.text.lock().unwrap().len() <= DRAFT_KEPT_BYTES + 8);
    }
}
