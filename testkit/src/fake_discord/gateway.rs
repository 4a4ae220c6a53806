//! The gateway: one websocket session at a time speaking Discord's v10 JSON protocol (no
//! compression; serenity reads text frames as they are).
//!
//! Sequence numbers belong to a session: READY is `s = 1` and every later dispatch takes the
//! next number and is logged. A RESUME naming the current session replays the logged dispatches
//! after the client's `seq`, then sends RESUMED; any other RESUME gets op 9 INVALID_SESSION
//! (`d: false`). Dispatches made while no session exists wait and follow the next READY.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::wire::{self, frame};
use super::{APPLICATION_ID, FakeDiscord, Shared};

const OP_DISPATCH: u8 = 0;
const OP_HEARTBEAT: u8 = 1;
const OP_IDENTIFY: u8 = 2;
const OP_RESUME: u8 = 6;
const OP_INVALID_SESSION: u8 = 9;
const OP_HELLO: u8 = 10;
const OP_HEARTBEAT_ACK: u8 = 11;
/// Discord's "Authentication failed." close code (serenity stops the shard on it).
const CLOSE_AUTHENTICATION_FAILED: u16 = 4004;
/// Discord's "Unknown error" close code: serenity resumes after it.
const CLOSE_UNKNOWN_ERROR: u16 = 4000;

/// What a connection's writer sends next.
pub(super) enum Outgoing {
    Text(String),
    Close(u16, &'static str),
}

/// One dispatch of the current session.
struct Logged {
    seq: u64,
    event: String,
    data: Value,
    /// Whether a live connection was handed it (else a new session inherits it).
    sent: bool,
}

impl Logged {
    fn text(&self) -> String {
        frame(OP_DISPATCH, self.data.clone(), Some(&self.event), Some(self.seq))
    }
}

/// The connection currently receiving dispatches.
struct Live {
    connection: u64,
    tx: UnboundedSender<Outgoing>,
}

/// The gateway's session state, shared by all connections.
pub(super) struct Gateway {
    pub(super) heartbeat_interval_ms: u64,
    session_id: Option<String>,
    sessions_started: u64,
    seq: u64,
    /// The current session's dispatches, for RESUME.
    log: Vec<Logged>,
    /// Dispatches made while no session existed.
    pending: Vec<(String, Value)>,
    live: Option<Live>,
    next_connection: u64,
    pub(super) identifies: usize,
    pub(super) resumes: usize,
    pub(super) heartbeats: usize,
}

impl Gateway {
    pub(super) fn new() -> Gateway {
        Gateway {
            heartbeat_interval_ms: 41_250,
            session_id: None,
            sessions_started: 0,
            seq: 0,
            log: Vec::new(),
            pending: Vec::new(),
            live: None,
            next_connection: 1,
            identifies: 0,
            resumes: 0,
            heartbeats: 0,
        }
    }

    /// Logs a dispatch and sends it to the live connection; without a session, queues it.
    /// Returns its sequence number (for a queued one, the number it will get after READY).
    pub(super) fn dispatch(&mut self, event: &str, data: Value) -> u64 {
        if self.session_id.is_none() {
            self.pending.push((event.to_owned(), data));
            let inherited = self.log.iter().filter(|logged| inherits(logged)).count();
            return 1 + (inherited + self.pending.len()) as u64;
        }
        self.seq += 1;
        let mut logged = Logged { seq: self.seq, event: event.to_owned(), data, sent: false };
        if let Some(live) = &self.live {
            logged.sent = live.tx.send(Outgoing::Text(logged.text())).is_ok();
            if !logged.sent {
                self.live = None;
            }
        }
        self.log.push(logged);
        self.seq
    }

    /// Starts a new session on `tx`: READY (`s = 1`), then the queued dispatches and those of
    /// the previous session that no connection was handed.
    fn identify(&mut self, connection: u64, tx: UnboundedSender<Outgoing>, ready: Value) {
        let unsent =
            std::mem::take(&mut self.log).into_iter().filter(inherits).map(|logged| (logged.event, logged.data));
        let mut pending: Vec<(String, Value)> = unsent.collect();
        pending.append(&mut self.pending);
        self.pending = pending;
        self.sessions_started += 1;
        self.session_id = Some(format!("fake-session-{}", self.sessions_started));
        self.seq = 0;
        self.live = Some(Live { connection, tx });
        let mut ready = ready;
        ready["session_id"] = json!(self.session_id);
        self.dispatch("READY", ready);
        for (event, data) in std::mem::take(&mut self.pending) {
            self.dispatch(&event, data);
        }
        self.identifies += 1;
    }

    /// Replays what the client missed and sends RESUMED, or INVALID_SESSION. Returns success.
    fn resume(&mut self, connection: u64, tx: UnboundedSender<Outgoing>, session_id: &str, seq: u64) -> bool {
        if self.session_id.as_deref() != Some(session_id) {
            let _ = tx.send(Outgoing::Text(frame(OP_INVALID_SESSION, json!(false), None, None)));
            return false;
        }
        for logged in self.log.iter_mut().filter(|logged| logged.seq > seq) {
            logged.sent = tx.send(Outgoing::Text(logged.text())).is_ok();
        }
        self.live = Some(Live { connection, tx });
        self.dispatch("RESUMED", json!({}));
        self.resumes += 1;
        true
    }

    /// Sends `text` as it is on the live connection (not logged, not numbered): for frames
    /// Discord would never send. False when no connection is live.
    pub(super) fn send_raw(&mut self, text: &str) -> bool {
        self.live.as_ref().is_some_and(|live| live.tx.send(Outgoing::Text(text.to_owned())).is_ok())
    }

    /// Closes the live connection with 4000 (serenity resumes); later dispatches are logged.
    pub(super) fn drop_connection(&mut self) {
        if let Some(live) = self.live.take() {
            let _ = live.tx.send(Outgoing::Close(CLOSE_UNKNOWN_ERROR, "Unknown error."));
        }
    }

    /// Forgets the session and closes the live connection: the next RESUME gets INVALID_SESSION.
    pub(super) fn invalidate_session(&mut self) {
        self.session_id = None;
        self.drop_connection();
    }

    fn disconnected(&mut self, connection: u64) {
        if self.live.as_ref().is_some_and(|live| live.connection == connection) {
            self.live = None;
        }
    }
}

/// Whether a new session re-sends this dispatch of the old one: never handed out, not READY/RESUMED.
fn inherits(logged: &Logged) -> bool {
    !logged.sent && logged.event != "READY" && logged.event != "RESUMED"
}

/// `GET /gateway`: upgrades to a websocket (query such as `?v=10&encoding=json` ignored).
pub(super) async fn upgrade(State(shared): State<Arc<Shared>>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(move |socket| connection(shared, socket))
}

/// One websocket: HELLO first, then client ops in, queued frames out, until either side closes.
async fn connection(shared: Arc<Shared>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = unbounded_channel();
    let (id, interval) = {
        let mut gateway = shared.gateway();
        gateway.next_connection += 1;
        (gateway.next_connection - 1, gateway.heartbeat_interval_ms)
    };
    let hello = frame(OP_HELLO, json!({ "heartbeat_interval": interval }), None, None);
    if sink.send(Message::Text(hello.into())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            outgoing = rx.recv() => match outgoing {
                Some(Outgoing::Text(text)) => {
                    if sink.send(Message::Text(text.into())).await.is_err() {
                        break;
                    }
                }
                Some(Outgoing::Close(code, reason)) => {
                    let _ = sink.send(Message::Close(Some(CloseFrame { code, reason: reason.into() }))).await;
                    break;
                }
                None => break,
            },
            incoming = stream.next() => match incoming {
                Some(Ok(Message::Text(text))) => handle_op(&shared, id, &tx, text.as_str()),
                // Discord answers a client's close frame with its own, which serenity waits for
                // before it reports the shard stopped.
                Some(Ok(Message::Close(frame))) => {
                    let _ = sink.send(Message::Close(frame)).await;
                    break;
                }
                Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    shared.gateway().disconnected(id);
}

/// Answers one client payload: heartbeat, IDENTIFY or RESUME (others are ignored).
fn handle_op(shared: &Shared, connection: u64, tx: &UnboundedSender<Outgoing>, text: &str) {
    let Ok(payload) = serde_json::from_str::<Value>(text) else { return };
    let data = &payload["d"];
    match payload["op"].as_u64().and_then(|op| u8::try_from(op).ok()) {
        Some(OP_HEARTBEAT) => {
            shared.gateway().heartbeats += 1;
            let _ = tx.send(Outgoing::Text(frame(OP_HEARTBEAT_ACK, Value::Null, None, None)));
        }
        Some(OP_IDENTIFY) if token_ok(data) => {
            let ready = ready(shared);
            shared.gateway().identify(connection, tx.clone(), ready);
            shared.connected.send_modify(|count| *count += 1);
        }
        Some(OP_RESUME) if token_ok(data) => {
            let session_id = data["session_id"].as_str().unwrap_or_default();
            let seq = data["seq"].as_u64().unwrap_or(0);
            if shared.gateway().resume(connection, tx.clone(), session_id, seq) {
                shared.connected.send_modify(|count| *count += 1);
            }
        }
        Some(OP_IDENTIFY | OP_RESUME) => {
            let _ = tx.send(Outgoing::Close(CLOSE_AUTHENTICATION_FAILED, "Authentication failed."));
        }
        _ => {}
    }
}

/// The token serenity sends is `Bot <token>`; a bare token is accepted too.
fn token_ok(data: &Value) -> bool {
    let token = data["token"].as_str().unwrap_or_default();
    token.strip_prefix("Bot ").unwrap_or(token) == FakeDiscord::TOKEN
}

/// READY's payload (the session id is filled in by [`Gateway::identify`]).
fn ready(shared: &Shared) -> Value {
    let guilds: Vec<Value> =
        shared.rest().guilds.keys().map(|id| json!({ "id": id.to_string(), "unavailable": true })).collect();
    json!({
        "v": 10,
        "user": wire::current_user(),
        "guilds": guilds,
        "session_id": "",
        "resume_gateway_url": shared.rest().gateway_url(),
        "shard": [0, 1],
        "application": { "id": APPLICATION_ID.to_string(), "flags": 0 },
        "private_channels": [],
        "relationships": [],
        "user_settings": {},
        "presences": [],
        "guild_join_requests": [],
        "geo_ordered_rtc_regions": [],
    })
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc::UnboundedReceiver;

    use super::*;

    /// A frame's `t` and `s`.
    type Seen = (Option<String>, Option<u64>);

    /// The (t, s) of every text frame received so far, and whether a close followed.
    fn drain(rx: &mut UnboundedReceiver<Outgoing>) -> (Vec<Seen>, bool) {
        let (mut frames, mut closed) = (Vec::new(), false);
        while let Ok(outgoing) = rx.try_recv() {
            match outgoing {
                Outgoing::Text(text) => {
                    let value: Value = serde_json::from_str(&text).expect("a JSON frame");
                    frames.push((value["t"].as_str().map(str::to_owned), value["s"].as_u64()));
                }
                Outgoing::Close(..) => closed = true,
            }
        }
        (frames, closed)
    }

    fn event(name: &str, seq: u64) -> Seen {
        (Some(name.to_owned()), Some(seq))
    }

    #[test]
    fn queued_dispatches_follow_ready_with_the_numbers_dispatch_returned() {
        let mut gateway = Gateway::new();
        assert_eq!((gateway.dispatch("A", json!({})), gateway.dispatch("B", json!({}))), (2, 3));
        let (tx, mut rx) = unbounded_channel();
        gateway.identify(1, tx, json!({}));
        assert_eq!(drain(&mut rx).0, [event("READY", 1), event("A", 2), event("B", 3)]);
        assert_eq!(gateway.dispatch("C", json!({})), 4);
        assert_eq!(drain(&mut rx).0, [event("C", 4)]);
    }

    #[test]
    fn resume_replays_after_the_client_seq_then_sends_resumed() {
        let mut gateway = Gateway::new();
        let (tx, mut rx) = unbounded_channel();
        gateway.identify(1, tx, json!({}));
        gateway.dispatch("A", json!({}));
        gateway.drop_connection();
        assert_eq!(drain(&mut rx), (vec![event("READY", 1), event("A", 2)], true));
        gateway.dispatch("B", json!({}));
        let (tx, mut rx) = unbounded_channel();
        assert!(gateway.resume(2, tx, "fake-session-1", 1));
        assert_eq!(drain(&mut rx).0, [event("A", 2), event("B", 3), event("RESUMED", 4)]);
        assert_eq!((gateway.identifies, gateway.resumes), (1, 1));
    }

    #[test]
    fn an_unknown_session_gets_invalid_session_and_a_new_session_inherits_unsent_dispatches() {
        let mut gateway = Gateway::new();
        let (tx, _rx) = unbounded_channel();
        gateway.identify(1, tx, json!({}));
        gateway.invalidate_session();
        assert_eq!(gateway.dispatch("A", json!({})), 2);
        let (tx, mut rx) = unbounded_channel();
        assert!(!gateway.resume(2, tx, "fake-session-1", 1));
        let Ok(Outgoing::Text(text)) = rx.try_recv() else { panic!("an INVALID_SESSION frame") };
        assert_eq!(
            serde_json::from_str::<Value>(&text).expect("JSON"),
            json!({ "op": 9, "d": false, "t": null, "s": null })
        );
        let (tx, mut rx) = unbounded_channel();
        gateway.identify(3, tx, json!({}));
        assert_eq!(drain(&mut rx).0, [event("READY", 1), event("A", 2)]);
    }
}
