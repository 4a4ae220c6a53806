//! Live run events for the API's streaming answers and WebSockets: one subscription to the
//! `api` channel's run events per process, handed to the requests that watch a run (by the
//! inbound id the run answers) and to every WebSocket (which picks its chats' events). The chat
//! channels' events are subscribed to only once an admin's socket asks to watch every session
//! (the console's live feed): until then their turns cost this process nothing.
//!
//! Events are best effort (a slow process may miss some) and are not ordered with the reply, so
//! a watcher keeps the streamed text and the reply remains the authority: what the events
//! missed is sent from the reply when it arrives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures_util::StreamExt;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::CHANNEL;
use crate::bus::{Bus, BusError, Events};
use crate::contract::{RunEvent, RunEventBody};

/// Text streamed for one run so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Streamed {
    pub(super) text: String,
    /// A tool call came after the last text: the next text starts a new paragraph.
    tool_since_text: bool,
    /// Tools called so far, by name, in order.
    pub(super) tools: Vec<String>,
    /// When the last piece of text or tool call came: the run is alive.
    pub(super) last_event: Option<tokio::time::Instant>,
}

impl Streamed {
    fn apply(&mut self, body: &RunEventBody) -> bool {
        match body {
            RunEventBody::Chunk { text } if !text.is_empty() => {
                if self.tool_since_text && !self.text.is_empty() {
                    self.text.push_str("\n\n");
                }
                self.tool_since_text = false;
                self.text.push_str(text);
                true
            }
            RunEventBody::ToolCall { name, .. } => {
                self.tool_since_text = true;
                self.tools.push(name.clone());
                true
            }
            _ => false,
        }
    }
}

/// A run some request watches.
pub(super) struct Watch {
    key: String,
    feed: Weak<RunFeed>,
    state: watch::Sender<Streamed>,
}

impl Watch {
    pub(super) fn subscribe(&self) -> watch::Receiver<Streamed> {
        self.state.subscribe()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(feed) = self.feed.upgrade() {
            let mut watched = feed.lock();
            // A new watch of the same run may have replaced this one since it was let go.
            if watched.get(&self.key).is_some_and(|entry| entry.strong_count() == 0) {
                watched.remove(&self.key);
            }
        }
    }
}

/// Events a WebSocket may fall behind by before it is closed as too slow: the buffer is one
/// for every socket, so a client that stops reading costs no more than this.
const SOCKET_BACKLOG: usize = 1024;

/// The runs watched in this process.
pub(super) struct RunFeed {
    watched: Mutex<HashMap<String, Weak<Watch>>>,
    all: broadcast::Sender<Arc<RunEvent>>,
    /// The chat channels' events, not subscribed to yet: taken by the first `watch_all`.
    others: tokio::sync::Mutex<Option<Others>>,
}

/// What subscribing to the chat channels' events takes.
struct Others {
    bus: Arc<dyn Bus>,
    channels: Vec<String>,
    stop: CancellationToken,
}

impl Default for RunFeed {
    fn default() -> Self {
        Self { watched: Mutex::default(), all: broadcast::channel(SOCKET_BACKLOG).0, others: Default::default() }
    }
}

impl RunFeed {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<Watch>>> {
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes to the run events of the `api` channel and follows them until `stop`; those
    /// of the chat channels in `others` wait for [`RunFeed::follow_every_channel`].
    pub(super) async fn start(
        bus: &Arc<dyn Bus>,
        others: &[String],
        stop: CancellationToken,
    ) -> Result<Arc<RunFeed>, BusError> {
        let events = bus.events(CHANNEL, None).await?;
        let feed = Arc::new(RunFeed::default());
        let channels: Vec<String> = others.iter().filter(|channel| *channel != CHANNEL).cloned().collect();
        if !channels.is_empty() {
            *feed.others.lock().await = Some(Others { bus: Arc::clone(bus), channels, stop: stop.clone() });
        }
        tokio::spawn(follow(events, Arc::downgrade(&feed), stop));
        Ok(feed)
    }

    /// Follows the chat channels' run events too, from now on (once; later calls return at
    /// once, after the first has subscribed). A channel that cannot be subscribed to is logged
    /// and left out: its sessions are then missing from the live feed.
    pub(super) async fn follow_every_channel(self: &Arc<Self>) {
        let Some(others) = self.others.lock().await.take() else { return };
        let mut streams = Vec::new();
        for channel in &others.channels {
            match others.bus.events(channel, None).await {
                Ok(events) => streams.push(events),
                Err(err) => tracing::warn!(%channel, %err, "cannot follow a channel's run events for the live feed"),
            }
        }
        let events: Events = Box::pin(futures_util::stream::select_all(streams));
        tokio::spawn(follow(events, Arc::downgrade(self), others.stop));
    }

    /// Watches the run answering inbound message `inbound_id`; call it before publishing the
    /// message, so no event is missed. Two requests for one message share the watch.
    pub(super) fn watch(self: &Arc<Self>, inbound_id: &str) -> Arc<Watch> {
        let mut watched = self.lock();
        if let Some(existing) = watched.get(inbound_id).and_then(Weak::upgrade) {
            return existing;
        }
        let (state, _) = watch::channel(Streamed::default());
        let watch = Arc::new(Watch { key: inbound_id.to_owned(), feed: Arc::downgrade(self), state });
        watched.insert(inbound_id.to_owned(), Arc::downgrade(&watch));
        watch
    }

    /// Every event of the `api` channel from now on.
    pub(super) fn subscribe_all(&self) -> broadcast::Receiver<Arc<RunEvent>> {
        self.all.subscribe()
    }

    /// Runs watched now, for the metrics endpoint.
    pub(super) fn watched(&self) -> usize {
        self.lock().len()
    }

    fn deliver(&self, event: RunEvent) {
        let event = Arc::new(event);
        if self.all.receiver_count() > 0 {
            let _ = self.all.send(Arc::clone(&event));
        }
        let Some(key) = event.inbound_id.as_deref() else { return };
        let Some(watch) = self.lock().get(key).and_then(Weak::upgrade) else { return };
        watch.state.send_if_modified(|streamed| {
            let applied = streamed.apply(&event.body);
            if applied {
                streamed.last_event = Some(tokio::time::Instant::now());
            }
            applied
        });
    }
}

async fn follow(mut events: Events, feed: Weak<RunFeed>, stop: CancellationToken) {
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            event = events.next() => event,
        };
        let (Some(event), Some(feed)) = (event, feed.upgrade()) else { return };
        feed.deliver(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_after_a_tool_call_starts_a_new_paragraph() {
        let mut streamed = Streamed::default();
        let chunk = |text: &str| RunEventBody::Chunk { text: text.into() };
        let call = RunEventBody::ToolCall { call_id: "1".into(), name: "clock".into(), arguments: Default::default() };
        for body in [chunk("Let me "), chunk("check."), call, chunk("It is noon.")] {
            streamed.apply(&body);
        }
        assert_eq!(streamed.text, "Let me check.\n\nIt is noon.");
        assert_eq!(streamed.tools, ["clock"]);
        assert!(!streamed.apply(&RunEventBody::Started));
    }

    #[tokio::test]
    async fn a_watch_is_forgotten_when_its_last_holder_lets_go() {
        let feed = Arc::new(RunFeed::default());
        let first = feed.watch("m");
        let second = feed.watch("m");
        assert!(Arc::ptr_eq(&first, &second));
        drop(first);
        assert_eq!(feed.watched(), 1);
        drop(second);
        assert_eq!(feed.watched(), 0);
    }
}
