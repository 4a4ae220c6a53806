//! `GET /v1/ws`: a WebSocket that sends messages and receives, for the chats it subscribed
//! to (or, for an admin that sent `watch_all`, for every session of every channel), their run
//! events as they happen (`run.started`, `chunk`, `tool.call`, `tool.result`,
//! `run.completed`, `run.failed`), the replies to its own messages, and messages that arrive on
//! their own (`message`: a reminder, a heartbeat finding). The protocol is in
//! `docs/channels/api.md`.
//!
//! Every socket reads the process's one event subscription through a shared, bounded buffer;
//! a client that falls a buffer behind, or does not take a frame within [`SEND_TIMEOUT`], or
//! stops answering pings, is disconnected: a slow client never makes memory grow.

mod frames;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::access::Caller;
use super::errors::error;
use super::state::AppState;
use frames::ClientFrame;

/// The subprotocol a socket speaks; a browser names it, with its token as a second one
/// (`bearer.<token>`), as it cannot send an `Authorization` header.
pub const PROTOCOL: &str = "switchboard";
/// How often the server pings, and how long it waits for any sign of life after a ping.
const PING_EVERY: Duration = Duration::from_secs(30);
const PONG_WITHIN: Duration = Duration::from_secs(60);
/// Longest a client may take to take one frame.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Frames from the socket's own sends (acceptances, replies) waiting to go out.
const OWN_FRAMES: usize = 64;
/// Close codes (RFC 6455, 7.4.1).
const GOING_AWAY: u16 = 1001;
const POLICY: u16 = 1008;

pub(super) async fn websocket(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let Some(slot) = state.sockets.admit(state.settings.max_websockets) else {
        let text = format!("{} WebSockets are open, the most this API takes", state.settings.max_websockets);
        return error(StatusCode::SERVICE_UNAVAILABLE, "too_many_websockets", &text);
    };
    let max_frame = state.settings.max_body_bytes;
    upgrade.protocols([PROTOCOL]).max_message_size(max_frame).on_upgrade(move |socket| async move {
        let _slot = slot;
        serve(state, caller, socket).await;
    })
}

/// One socket's state.
struct Connection {
    state: Arc<AppState>,
    caller: Caller,
    /// Chats subscribed to, by their full ids.
    chats: HashSet<String>,
    /// Every session's events (an admin's `watch_all`).
    all: bool,
    own_tx: mpsc::Sender<Value>,
}

/// Why a socket's loop ended.
enum Ended {
    /// The client closed it, or the connection broke.
    Gone,
    /// The server closes it with this code and reason.
    Close(u16, String),
}

/// Runs one socket until it closes.
async fn serve(state: Arc<AppState>, caller: Caller, socket: WebSocket) {
    let (own_tx, mut own_rx) = mpsc::channel(OWN_FRAMES);
    let mut events = state.feed.subscribe_all();
    let shutdown = state.shutdown.clone();
    let mut conn = Connection { state, caller, chats: HashSet::new(), all: false, own_tx };
    let (mut sink, mut stream) = socket.split();
    let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    let mut heard = Instant::now();
    let ended = loop {
        let outgoing = tokio::select! {
            _ = shutdown.cancelled() => break Ended::Close(GOING_AWAY, "switchboard is stopping".into()),
            incoming = stream.next() => {
                heard = Instant::now();
                match incoming {
                    Some(Ok(Message::Text(text))) => conn.handle(text.as_str()),
                    Some(Ok(Message::Binary(_))) => Some(frames::error_frame("binary_frame", "send JSON text frames", None)),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break Ended::Gone,
                    Some(Ok(_)) => None,
                }
            }
            event = events.recv() => match event {
                Ok(event) => frames::event_frame(&conn.caller, &conn.chats, conn.all, &event),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    break Ended::Close(POLICY, format!("too slow: {missed} events were missed; reconnect"));
                }
                Err(broadcast::error::RecvError::Closed) => break Ended::Close(GOING_AWAY, "switchboard is stopping".into()),
            },
            Some(frame) = own_rx.recv() => Some(frame),
            _ = ping.tick() => {
                if heard.elapsed() > PONG_WITHIN {
                    break Ended::Close(POLICY, "no answer to pings".into());
                }
                if send(&mut sink, Message::Ping(Default::default())).await.is_err() {
                    break Ended::Gone;
                }
                None
            }
        };
        if let Some(frame) = outgoing
            && send(&mut sink, Message::Text(frame.to_string().into())).await.is_err()
        {
            break Ended::Close(POLICY, "too slow: a frame was not taken in time".into());
        }
    };
    if let Ended::Close(code, reason) = ended {
        tracing::info!(code, %reason, token = conn.caller.token.as_deref().unwrap_or("-"), "API WebSocket closed by the server");
        let close = Message::Close(Some(CloseFrame { code, reason: reason.into() }));
        let _ = send(&mut sink, close).await;
    }
}

/// Sends one frame, within [`SEND_TIMEOUT`].
async fn send(sink: &mut SplitSink<WebSocket, Message>, message: Message) -> Result<(), ()> {
    match tokio::time::timeout(SEND_TIMEOUT, sink.send(message)).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

impl Connection {
    /// Acts on a client frame; the answer to send at once, if any.
    fn handle(&mut self, text: &str) -> Option<Value> {
        let frame = match serde_json::from_str::<ClientFrame>(text) {
            Ok(frame) => frame,
            Err(err) => return Some(frames::error_frame("invalid_frame", &err.to_string(), None)),
        };
        match frame {
            ClientFrame::Ping => Some(json!({"type": "pong"})),
            ClientFrame::Subscribe { chat_id } => {
                let full = self.caller.chat_id(&chat_id);
                self.chats.insert(full);
                Some(json!({"type": "subscribed", "chat_id": chat_id}))
            }
            ClientFrame::WatchAll if !self.caller.scopes.admin => {
                Some(frames::error_frame("forbidden", "watching every session needs an admin token", None))
            }
            ClientFrame::WatchAll => {
                self.all = true;
                // Answered once the chat channels' events are followed, so none after it is missed.
                let (feed, own_tx) = (Arc::clone(&self.state.feed), self.own_tx.clone());
                tokio::spawn(async move {
                    feed.follow_every_channel().await;
                    let _ = own_tx.send(json!({"type": "watching_all"})).await;
                });
                None
            }
            ClientFrame::Unsubscribe { chat_id } => {
                self.chats.remove(&self.caller.chat_id(&chat_id));
                Some(json!({"type": "unsubscribed", "chat_id": chat_id}))
            }
            ClientFrame::Message(send) => {
                let checked = frames::message_for(&self.state, &self.caller, &send);
                let msg = match checked {
                    Ok(msg) => msg,
                    Err(text) => return Some(frames::error_frame("invalid_message", &text, send.client_id.as_deref())),
                };
                // Its chat's events come to this socket from now on.
                self.chats.insert(msg.chat_id.clone());
                let (state, caller, tx) = (Arc::clone(&self.state), self.caller.clone(), self.own_tx.clone());
                tokio::spawn(frames::exchange(state, caller, msg, send.client_id, tx));
                None
            }
        }
    }
}
