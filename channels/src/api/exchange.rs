//! One request's message on its way: published until the bus confirms it, then its reply
//! awaited, within the request's deadline. Retries of an idempotent request join the first.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::errors::{error, error_with};
use super::replies::{self, Claim, Fingerprint, Replies};
use super::state::AppState;
use crate::bus::{BusError, BusExt};
use crate::contract::{InboundMessage, OutboundMessage, reply};

/// First pause between two publishes of a message the bus did not confirm, and the longest.
const PUBLISH_RETRY_MIN: Duration = Duration::from_millis(100);
const PUBLISH_RETRY_MAX: Duration = Duration::from_secs(2);
/// What `Retry-After` suggests when the bus stayed unavailable.
const RETRY_AFTER_SECS: u64 = 5;
/// What `Retry-After` suggests when the chat's queue was full: a few turns' time.
const NOT_KEPT_RETRY_AFTER_SECS: u64 = 5;
/// Marks a reply served again to a retry of an idempotent request.
const REPLAYED_HEADER: &str = "idempotent-replayed";

/// A request's claim on its reply; letting go of it (the client went away) releases it.
pub(super) struct Waiting {
    id: String,
    receiver: Option<watch::Receiver<Option<Arc<OutboundMessage>>>>,
    replies: Arc<Replies>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(receiver) = self.receiver.take() {
            self.replies.release(&self.id, receiver);
        }
    }
}

impl Waiting {
    /// The reply, once it is there; `None` when the channel is stopping.
    pub(super) async fn reply(&mut self) -> Option<Arc<OutboundMessage>> {
        match self.receiver.as_mut() {
            Some(receiver) => replies::wait(receiver).await,
            None => None,
        }
    }
}

/// The reply was not there in time.
#[derive(Debug)]
pub(super) struct TimedOut;

/// Waits for `waiting`'s reply until `deadline`, or `timeout` after the last event of its run
/// (`watch`: a chunk of text, a tool call) when that is later: an answer that is still being
/// written is never given up on. `Ok(None)`: the channel is stopping.
pub(super) async fn reply_while_alive(
    waiting: &mut Waiting,
    watch: &super::feed::Watch,
    deadline: Instant,
    timeout: Duration,
) -> Result<Option<Arc<OutboundMessage>>, TimedOut> {
    let activity = watch.subscribe();
    let mut deadline = deadline;
    loop {
        tokio::select! {
            reply = waiting.reply() => return Ok(reply),
            () = tokio::time::sleep_until(deadline) => {
                // One look when the time is up, rather than a wake-up for every piece of text.
                let last_event = activity.borrow().last_event;
                match last_event.map(|at| at + timeout).filter(|&later| later > Instant::now()) {
                    Some(later) => deadline = later,
                    None => return Err(TimedOut),
                }
            }
        }
    }
}

/// What sending a message gave.
pub(super) enum Sent {
    /// A retry of a message already answered: its reply, served again.
    Replayed(Arc<OutboundMessage>),
    /// The bus has the message; its reply is awaited.
    Waiting(Waiting),
}

/// Publishes `msg` (unless a request for it is under way already) by `deadline`.
pub(super) async fn send(
    state: &AppState,
    msg: &InboundMessage,
    fingerprint: Option<Fingerprint>,
    deadline: Instant,
) -> Result<Sent, Response> {
    let (receiver, publish) = match state.replies.claim(&msg.id, fingerprint) {
        Claim::Replied(reply) => return Ok(Sent::Replayed(reply)),
        Claim::Conflict => return Err(key_reused(state)),
        Claim::First(receiver) => (receiver, true),
        Claim::Joined { receiver, accepted } => (receiver, !accepted),
    };
    let waiting = Waiting { id: msg.id.clone(), receiver: Some(receiver), replies: Arc::clone(&state.replies) };
    if publish {
        if let Err(err) = publish_until(state, msg, deadline).await {
            return Err(unconfirmed(state, msg, &err));
        }
        state.replies.accepted(&msg.id);
    }
    Ok(Sent::Waiting(waiting))
}

/// A reply and whether it was served again to a retry.
pub(super) struct Answer {
    pub(super) reply: Arc<OutboundMessage>,
    pub(super) replayed: bool,
}

/// Publishes `msg` (unless a request for it is under way already) and waits for its reply.
pub(super) async fn exchange(
    state: &AppState,
    msg: &InboundMessage,
    fingerprint: Option<Fingerprint>,
) -> Result<Answer, Response> {
    let timeout = state.settings.reply_timeout;
    let deadline = Instant::now() + timeout;
    // Watched before publishing, so no event of the run comes before the watch.
    let watch = state.feed.watch(&msg.id);
    let answer = match send(state, msg, fingerprint, deadline).await? {
        Sent::Replayed(reply) => Answer { reply, replayed: true },
        Sent::Waiting(mut waiting) => match reply_while_alive(&mut waiting, &watch, deadline, timeout).await {
            Ok(Some(reply)) => Answer { reply, replayed: false },
            Ok(None) => return Err(stopping(msg)),
            Err(TimedOut) => return Err(timed_out(state, msg)),
        },
    };
    if reply::is_not_kept(&answer.reply) {
        return Err(not_kept(msg, &answer));
    }
    Ok(answer)
}

/// 429: the chat's queue was full and the worker did not keep the message. Final for this
/// message (a retry with its Idempotency-Key gets the same); sending it again later is the way.
fn not_kept(msg: &InboundMessage, answer: &Answer) -> Response {
    let again = if super::idempotency::is_keyed(&msg.id) {
        "send it again later with a new Idempotency-Key (this one keeps this answer)"
    } else {
        "send it again later"
    };
    let text =
        format!("this chat has too many messages waiting; the message was not kept and will not be answered: {again}");
    let extra = json!({"message_id": msg.id, "notice": answer.reply.content});
    let mut response = error_with(StatusCode::TOO_MANY_REQUESTS, "queue_full", &text, extra);
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(NOT_KEPT_RETRY_AFTER_SECS));
    if answer.replayed {
        mark_replayed(&mut response);
    }
    response
}

/// 503: the channel stopped before the reply came.
pub(super) fn stopping(msg: &InboundMessage) -> Response {
    error_with(
        StatusCode::SERVICE_UNAVAILABLE,
        "shutting_down",
        "switchboard is stopping; the message was accepted and will be answered after restart",
        json!({"message_id": msg.id}),
    )
}

/// 504: no reply within the reply timeout.
pub(super) fn timed_out(state: &AppState, msg: &InboundMessage) -> Response {
    let secs = state.settings.reply_timeout.as_secs();
    let text = format!("no reply within {secs} s; the message was accepted and may still be answered");
    error_with(StatusCode::GATEWAY_TIMEOUT, "reply_timeout", &text, json!({"message_id": msg.id}))
}

/// Publishes until the bus confirms or the deadline passes. A publish whose confirmation did
/// not come may still have been stored; publishing again with the same id is safe, as the
/// bus drops a second message with an id it has seen.
async fn publish_until(state: &AppState, msg: &InboundMessage, deadline: Instant) -> Result<(), BusError> {
    let mut pause = PUBLISH_RETRY_MIN;
    let mut attempt = 1u32;
    loop {
        let err = match tokio::time::timeout_at(deadline, state.bus.publish_inbound(msg)).await {
            Ok(Ok(())) => {
                if attempt > 1 {
                    tracing::info!(message_id = %msg.id, attempt, "API message confirmed by the bus after retrying");
                }
                return Ok(());
            }
            Ok(Err(err)) if !worth_retrying(&err) => return Err(err),
            Ok(Err(err)) => err,
            Err(_) => return Err(BusError::Publish { subject: msg.chat_id.clone(), reason: "no confirmation".into() }),
        };
        if Instant::now() + pause >= deadline {
            return Err(err);
        }
        tracing::warn!(%err, message_id = %msg.id, attempt, retry_in_ms = pause.as_millis(),
            "the bus did not confirm an API message; publishing it again");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(PUBLISH_RETRY_MAX);
        attempt = attempt.saturating_add(1);
    }
}

/// Errors that another try cannot fix: the message itself cannot be sent.
fn worth_retrying(err: &BusError) -> bool {
    !err.is_permanent() && !matches!(err, BusError::Closed)
}

/// The answer of `POST /v1/messages`.
pub(super) fn replied(msg: &InboundMessage, reply: &OutboundMessage, replayed: bool) -> Response {
    let mut body = json!({
        "reply": reply.content,
        "kind": reply.kind,
        "message_id": msg.id,
        "reply_id": reply.id,
        "session_key": msg.session_key(),
        "attachments": super::files::attachments(&reply.media),
    });
    // `suppressed`: the model chose not to answer (`reply` is then empty).
    for key in reply::API_FIELDS {
        if let Some(value) = reply.metadata.get(key) {
            body[key] = value.clone();
        }
    }
    let mut response = (StatusCode::OK, axum::Json(body)).into_response();
    if replayed {
        mark_replayed(&mut response);
    }
    response
}

/// Marks a response that serves a reply again to a retry.
pub(super) fn mark_replayed(response: &mut Response) {
    response.headers_mut().insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
}

fn key_reused(state: &AppState) -> Response {
    let secs = state.settings.replay.ttl.as_secs();
    let text = format!(
        "this Idempotency-Key was used for a request with other content in the last {secs} s; \
         send a new key for a new message"
    );
    error(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused", &text)
}

/// 503: the bus never confirmed the message. It may have been stored all the same.
fn unconfirmed(state: &AppState, msg: &InboundMessage, err: &BusError) -> Response {
    if err.is_permanent() {
        // The bus refused the message itself (its size or ids): a retry cannot help.
        let status = match err {
            BusError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        };
        return error_with(status, "invalid_body", &format!("the message cannot be sent: {err}"), Value::Null);
    }
    tracing::error!(%err, message_id = %msg.id, "the bus did not confirm an API message before the deadline");
    let secs = state.settings.reply_timeout.as_secs();
    let advice = if super::idempotency::is_keyed(&msg.id) {
        "retry with the same Idempotency-Key: it will not run twice"
    } else {
        "a retry without an Idempotency-Key may run it twice"
    };
    let text =
        format!("the message bus did not confirm the message within {secs} s; it may have been accepted ({advice})");
    let extra = json!({"message_id": msg.id, "may_have_been_accepted": true});
    let mut response = error_with(StatusCode::SERVICE_UNAVAILABLE, "bus_unavailable", &text, extra);
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    response
}
