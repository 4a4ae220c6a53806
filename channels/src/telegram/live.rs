//! Live feedback while a run goes on: the typing indicator and edit-in-place streaming.
//!
//! [`run_live`] follows the channel's run events. `run.started` starts a typing task for the
//! chat; `chunk` events grow a draft, a message that an editor task shows and edits at most
//! once per `stream.edit_interval`. The run's final reply, delivered by
//! [`run_outbound`](super::outbound::run_outbound), takes the draft over through
//! `LiveRuns::finish` and turns it into the rendered reply; finishing also stops typing.
//!
//! Runs are keyed by the inbound message id they answer (a reply's `in_reply_to`), or by the
//! run id when an event has no inbound id. Keys of finished runs are remembered for a while, so
//! that events arriving after the reply (the event stream and the reply queue are not ordered
//! with each other) cannot start typing or a new draft again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use teloxide::prelude::*;
use teloxide::types::{ChatAction, MessageId, ReplyParameters, ThreadId};
use teloxide::{ApiError, RequestError};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::outbound::Target;
use super::retry::describe;
use super::{CHANNEL, TelegramSettings};
use crate::bus::Events;
use crate::contract::{RunEvent, RunEventBody};
use crate::delivery::RecentIds;

/// How often `typing` is repeated by default (Telegram shows it for about 5 s).
const TYPING_INTERVAL: Duration = Duration::from_secs(4);
/// Runs older than this lose their typing indicator and draft, whatever happened to them.
const MAX_RUN_AGE: Duration = Duration::from_secs(600);
/// How often stale runs are looked for.
const SWEEP_INTERVAL: Duration = Duration::from_secs(30);
/// How many finished run keys are remembered.
const FINISHED_KEPT: usize = 1024;
/// A streamed draft shows at most this much text (UTF-16 units, as Telegram counts), a bit
/// under the message limit; the final reply shows everything.
const DRAFT_VISIBLE_UNITS: usize = 4000;
/// Streamed text kept per draft: more than the visible part can need.
const DRAFT_KEPT_BYTES: usize = 16 * 1024;

/// Runs in progress in Telegram chats, shared by the event follower and the reply sender.
pub struct LiveRuns {
    state: Mutex<LiveState>,
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

impl Default for LiveRuns {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveRuns {
    pub fn new() -> Self {
        Self {
            state: Mutex::new(LiveState { runs: HashMap::new(), finished: RecentIds::new(FINISHED_KEPT) }),
            typing_interval: TYPING_INTERVAL,
        }
    }

    /// Repeats `typing` this often instead of every 4 s (tests use a short interval).
    pub fn with_typing_interval(mut self, interval: Duration) -> Self {
        self.typing_interval = interval;
        self
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

    /// Runs currently followed (for tests and diagnostics).
    pub fn active_runs(&self) -> usize {
        self.lock().runs.len()
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
    /// Held by the editor during each Bot API call, so that [`Draft::settle`] waits for it.
    shown: tokio::sync::Mutex<Shown>,
}

#[derive(Default)]
struct Shown {
    message: Option<MessageId>,
    text: String,
    broken: bool,
}

/// What a draft left in the chat when its run's reply arrived.
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
        // Only the visible start is ever shown, and 4000 UTF-16 units take at most 12 KB.
        if text.len() < DRAFT_KEPT_BYTES {
            text.push_str(chunk);
        }
        drop(text);
        self.changed.notify_one();
    }

    /// The text to show now: what was streamed, cut at the visible limit.
    fn visible_text(&self) -> String {
        let text = self.text.lock().unwrap_or_else(PoisonError::into_inner);
        let mut units = 0;
        let visible: String = text
            .chars()
            .take_while(|c| {
                units += c.len_utf16();
                units <= DRAFT_VISIBLE_UNITS
            })
            .collect();
        visible.trim().to_owned()
    }

    /// Waits for an edit in flight, then tells what the chat shows. Call after
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
pub async fn run_live(
    bot: Bot,
    settings: Arc<TelegramSettings>,
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
                Some(event) => on_event(&bot, &settings, &live, &shutdown, event),
                None => break,
            },
        }
    }
    live.close_all();
}

fn on_event(bot: &Bot, settings: &TelegramSettings, live: &LiveRuns, shutdown: &CancellationToken, event: RunEvent) {
    if event.channel != CHANNEL {
        return;
    }
    let key = event.run_key();
    let Ok(chat) = event.chat_id.parse::<i64>().map(ChatId) else {
        tracing::debug!(chat_id = %event.chat_id, "run event for a chat id that is not numeric");
        return;
    };
    match &event.body {
        RunEventBody::Started if settings.typing => {
            start_typing(bot, live, key, chat, topic_of(&event), shutdown.child_token());
        }
        RunEventBody::Chunk { text } if streams_in(settings, chat) => {
            let target = || draft_target(settings, chat, &event);
            stream_chunk(bot, live, key, text, target, settings.stream.edit_interval);
        }
        RunEventBody::Completed { .. } | RunEventBody::Failed { .. } => live.end(key),
        _ => {}
    }
}

/// Starts the run's typing task, unless it has one or has finished.
fn start_typing(
    bot: &Bot,
    live: &LiveRuns,
    key: &str,
    chat: ChatId,
    thread: Option<ThreadId>,
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
        tokio::spawn(keep_typing(bot.clone(), chat, thread, live.typing_interval, stop));
    }
}

/// Adds a chunk to the run's draft; the first chunk creates the draft and its editor task.
fn stream_chunk(
    bot: &Bot,
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
        tokio::spawn(edit_draft(bot.clone(), draft, edit_interval));
    }
}

fn streams_in(settings: &TelegramSettings, chat: ChatId) -> bool {
    if chat.0 > 0 { settings.stream.private } else { settings.stream.groups }
}

/// The forum topic a run's chat is in, as the worker addressed the event.
fn topic_of(event: &RunEvent) -> Option<ThreadId> {
    let topic = event.thread_id.as_deref()?;
    topic.parse::<i32>().ok().map(|id| ThreadId(MessageId(id)))
}

/// Where a draft goes: the run's chat and topic, quoting the triggering message as the reply
/// would.
fn draft_target(settings: &TelegramSettings, chat: ChatId, event: &RunEvent) -> Target {
    let trigger = event.reply_to.as_deref().and_then(|message| message.parse::<i32>().ok()).map(MessageId);
    let reply_to = trigger.filter(|_| chat.0 < 0 && settings.quote_in_groups);
    Target { chat, thread: topic_of(event), reply_to }
}

/// Sends `typing` every `interval` until `stop` is cancelled or the safety cap passes.
/// Failures are not worth more than a debug line: the next round tries again.
async fn keep_typing(bot: Bot, chat: ChatId, thread: Option<ThreadId>, interval: Duration, stop: CancellationToken) {
    let deadline = Instant::now() + MAX_RUN_AGE;
    while Instant::now() < deadline {
        let mut action = bot.send_chat_action(chat, ChatAction::Typing);
        if let Some(thread) = thread {
            action = action.message_thread_id(thread);
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            result = action.send() => if let Err(err) = result {
                tracing::debug!(chat = chat.0, error = %describe(&err), "typing indicator failed");
            },
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// What showing the draft once came to.
enum Step {
    Shown,
    /// Flood control: nothing more for this long.
    Wait(Duration),
    Failed(RequestError),
}

/// Shows the draft's text and edits it as it grows, at most once per `interval`, until the
/// draft is closed or an edit fails. Chunks arriving in between are coalesced into one edit.
async fn edit_draft(bot: Bot, draft: Arc<Draft>, interval: Duration) {
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
            match show(&bot, &draft, &mut shown).await {
                Step::Shown => interval,
                Step::Wait(wait) => {
                    // Intermediate edits are skipped; the latest text is shown after the wait.
                    draft.changed.notify_one();
                    wait.max(interval)
                }
                Step::Failed(err) => {
                    tracing::info!(chat = draft.target.chat.0, error = %describe(&err), "streaming stopped for a run");
                    shown.broken = true;
                    return;
                }
            }
        };
        tokio::select! {
            _ = draft.closed.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// Sends the draft's first message, or edits it to the current text. Plain text: a half
/// streamed reply is rarely valid Markdown.
async fn show(bot: &Bot, draft: &Draft, shown: &mut Shown) -> Step {
    let text = draft.visible_text();
    if text.is_empty() || text == shown.text {
        return Step::Shown;
    }
    let target = &draft.target;
    let result = match shown.message {
        None => {
            let mut request = bot.send_message(target.chat, text.clone());
            if let Some(thread) = target.thread {
                request = request.message_thread_id(thread);
            }
            if let Some(message) = target.reply_to {
                request = request.reply_parameters(ReplyParameters::new(message).allow_sending_without_reply());
            }
            request.send().await.map(|sent| shown.message = Some(sent.id))
        }
        Some(message) => bot.edit_message_text(target.chat, message, text.clone()).send().await.map(drop),
    };
    match result {
        Ok(()) | Err(RequestError::Api(ApiError::MessageNotModified)) => {
            shown.text = text;
            Step::Shown
        }
        Err(RequestError::RetryAfter(wait)) => Step::Wait(wait.duration()),
        Err(err) => Step::Failed(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_runs_are_not_started_again() {
        let live = LiveRuns::new();
        assert!(live.with_entry("in-1", |_| ()).is_some());
        assert!(live.finish("in-1").is_none());
        assert_eq!(live.active_runs(), 0);
        assert!(live.with_entry("in-1", |_| ()).is_none());
    }

    #[test]
    fn a_draft_shows_at_most_the_visible_limit() {
        let draft = Draft::new(Target { chat: ChatId(1), thread: None, reply_to: None });
        for _ in 0..3000 {
            draft.append("ab😀");
        }
        let visible = draft.visible_text();
        assert!(visible.encode_utf16().count() <= DRAFT_VISIBLE_UNITS);
        assert!(visible.encode_utf16().count() > DRAFT_VISIBLE_UNITS - 4);
        assert!(draft.text.lock().unwrap().len() <= DRAFT_KEPT_BYTES + 8);
    }

    #[test]
    fn drafts_quote_the_trigger_in_groups_only() {
        let settings = TelegramSettings::default();
        let event = |chat: &str| RunEvent {
            v: 1,
            run_id: "r".into(),
            session_key: format!("telegram:{chat}:topic:3"),
            channel: "telegram".into(),
            chat_id: chat.into(),
            inbound_id: Some(format!("telegram:{chat}:42")),
            thread_id: Some("3".into()),
            reply_to: Some("42".into()),
            at: chrono::Utc::now(),
            body: RunEventBody::Started,
        };
        let group = draft_target(&settings, ChatId(-100), &event("-100"));
        assert_eq!(group.reply_to, Some(MessageId(42)));
        assert_eq!(group.thread, Some(ThreadId(MessageId(3))));
        assert_eq!(draft_target(&settings, ChatId(5), &event("5")).reply_to, None);
        let no_topic = RunEvent { thread_id: None, ..event("-100") };
        assert_eq!(draft_target(&settings, ChatId(-100), &no_topic).thread, None);
        let not_a_topic = RunEvent { thread_id: Some("x".into()), ..event("-100") };
        assert_eq!(draft_target(&settings, ChatId(-100), &not_a_topic).thread, None);
    }
}
