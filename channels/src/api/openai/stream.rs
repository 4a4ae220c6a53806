//! `stream: true`: the answer as server-sent events in OpenAI's chunk shape, the text as the
//! model writes it (from the run's `chunk` events), then a chunk with `finish_reason`, a
//! usage-only chunk when `stream_options.include_usage` asks for it (else the usage rides on
//! the finish chunk), and `[DONE]`.
//!
//! Run events are best effort; the reply is not. When the reply arrives, whatever of it the
//! events did not carry is sent before the stream ends, so the client always ends up with the
//! whole answer.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Completion, completion_id, switchboard_fields, usage_json};
use crate::api::exchange::{self, Sent, Waiting};
use crate::api::feed::Watch;
use crate::api::replies::Fingerprint;
use crate::api::state::AppState;
use crate::contract::{InboundMessage, OutboundMessage, reply};

/// A comment line this often keeps proxies from closing a stream while the model thinks.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events buffered for a client that reads slowly; the run's text is kept in full elsewhere.
const BUFFERED_EVENTS: usize = 32;

/// Publishes `msg` and answers with its reply as an event stream.
pub(super) async fn respond(
    state: Arc<AppState>,
    msg: InboundMessage,
    fingerprint: Option<Fingerprint>,
    completion: Completion,
) -> Response {
    let deadline = Instant::now() + state.settings.reply_timeout;
    // Watched before publishing, so no event of the run comes before the watch.
    let watch = state.feed.watch(&msg.id);
    let sent = match exchange::send(&state, &msg, fingerprint, deadline).await {
        Ok(sent) => sent,
        Err(response) => return response,
    };
    let (tx, rx) = mpsc::channel::<Event>(BUFFERED_EVENTS);
    let writer = Writer { msg, completion, tx, sent_text: String::new() };
    // The writer ends when the client goes away (the body, and with it `rx`, is dropped).
    tokio::spawn(writer.run(state, sent, watch, deadline));
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|event| (Ok::<Event, Infallible>(event), rx))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response()
}

/// Writes one answer's events.
struct Writer {
    msg: InboundMessage,
    completion: Completion,
    tx: mpsc::Sender<Event>,
    /// The text sent so far.
    sent_text: String,
}

impl Writer {
    async fn run(mut self, state: Arc<AppState>, sent: Sent, watch: Arc<Watch>, deadline: Instant) {
        if !self.send(self.chunk(json!({"role": "assistant", "content": ""}), None)).await {
            return;
        }
        let reply = match sent {
            Sent::Replayed(reply) => Some(reply),
            Sent::Waiting(waiting) => {
                match self.follow(waiting, &watch, deadline, state.settings.reply_timeout).await {
                    Followed::Reply(reply) => reply,
                    Followed::TimedOut => {
                        let secs = state.settings.reply_timeout.as_secs();
                        let text =
                            format!("no reply within {secs} s; the message was accepted and may still be answered");
                        self.fail("reply_timeout", &text).await;
                        return;
                    }
                    Followed::ClientGone => return,
                }
            }
        };
        match reply {
            // The chat's queue was full: the stream ends with the error a plain request gets
            // as a 429, not with the notice as if it were the answer.
            Some(reply) if reply::is_not_kept(&reply) => {
                let text =
                    format!("this chat has too many messages waiting; the message was not kept: {}", reply.content);
                self.fail("queue_full", &text).await;
            }
            Some(reply) => self.finish(&reply).await,
            None => {
                self.fail("shutting_down", "switchboard is stopping; the message will be answered after restart").await
            }
        }
    }

    /// Sends the run's text as it grows, until its reply comes. It is given up on `timeout`
    /// after the request, or after the run's last event if that came later: an answer that is
    /// still being written never times out.
    async fn follow(&mut self, mut waiting: Waiting, watch: &Watch, deadline: Instant, timeout: Duration) -> Followed {
        let mut streamed = watch.subscribe();
        let mut deadline = deadline;
        loop {
            tokio::select! {
                reply = waiting.reply() => return Followed::Reply(reply),
                changed = streamed.changed() => {
                    if changed.is_err() {
                        continue;
                    }
                    deadline = deadline.max(Instant::now() + timeout);
                    let text = streamed.borrow_and_update().text.clone();
                    if let Some(new) = text.strip_prefix(self.sent_text.as_str()).filter(|new| !new.is_empty())
                        && !self.send_text(new.to_owned()).await
                    {
                        return Followed::ClientGone;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return Followed::TimedOut,
                _ = self.tx.closed() => return Followed::ClientGone,
            }
        }
    }

    /// Sends what the events missed of the reply, the finish and usage chunks, and `[DONE]`.
    async fn finish(&mut self, reply: &OutboundMessage) {
        let missing = missing_text(&self.sent_text, &reply.content);
        if !missing.is_empty() && !self.send_text(missing).await {
            return;
        }
        let usage = usage_json(reply);
        let mut last = self.chunk(json!({}), Some("stop"));
        // Usage once: in its own chunk when asked for (as OpenAI sends it; clients that add up
        // the usage of every chunk would count it twice otherwise), else on the finish chunk.
        last["usage"] = if self.completion.include_usage { Value::Null } else { usage.clone() };
        last["switchboard"] = switchboard_fields(&self.msg, reply);
        if !self.send(last).await {
            return;
        }
        if self.completion.include_usage {
            let mut usage_chunk = self.chunk(Value::Null, None);
            usage_chunk["choices"] = json!([]);
            usage_chunk["usage"] = usage;
            if !self.send(usage_chunk).await {
                return;
            }
        }
        let _ = self.tx.send(Event::default().data("[DONE]")).await;
    }

    /// An error event (OpenAI's clients raise it as an `APIError`), then `[DONE]`.
    async fn fail(&mut self, code: &str, message: &str) {
        let body = json!({"error": {"code": code, "message": message, "type": "api_error", "message_id": self.msg.id}});
        if self.send(body).await {
            let _ = self.tx.send(Event::default().data("[DONE]")).await;
        }
    }

    async fn send_text(&mut self, text: String) -> bool {
        let chunk = self.chunk(json!({"content": text}), None);
        self.sent_text.push_str(&text);
        self.send(chunk).await
    }

    /// False when the client has gone away.
    async fn send(&self, data: Value) -> bool {
        self.tx.send(Event::default().data(data.to_string())).await.is_ok()
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": completion_id(&self.msg),
            "object": "chat.completion.chunk",
            "created": self.msg.received_at.timestamp(),
            "model": self.completion.agent,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": null}],
        })
    }
}

enum Followed {
    Reply(Option<Arc<OutboundMessage>>),
    TimedOut,
    ClientGone,
}

/// What of `reply` still has to be sent after `sent`: the rest after the longest end of `sent`
/// that starts the reply (text the model wrote before a tool call precedes the final answer in
/// `sent`). When nothing of the reply was sent, all of it, after a paragraph break.
fn missing_text(sent: &str, reply: &str) -> String {
    if sent.is_empty() {
        return reply.to_owned();
    }
    let earliest = sent.len().saturating_sub(reply.len());
    for (start, _) in sent.char_indices().filter(|(start, _)| *start >= earliest) {
        if reply.starts_with(&sent[start..]) {
            return reply[sent.len() - start..].to_owned();
        }
    }
    if reply.is_empty() { String::new() } else { format!("\n\n{reply}") }
}

#[cfg(test)]
mod tests {
    use super::missing_text;

    #[test]
    fn only_what_the_events_missed_is_sent_again() {
        assert_eq!(missing_text("", "It is noon."), "It is noon.");
        assert_eq!(missing_text("It is", "It is noon."), " noon.");
        assert_eq!(missing_text("It is noon.", "It is noon."), "");
        // Text before a tool call, then the answer, partly streamed.
        assert_eq!(missing_text("Let me check.\n\nIt is", "It is noon."), " noon.");
        assert_eq!(missing_text("Let me check.", "Noon."), "\n\nNoon.");
        assert_eq!(missing_text("Grüße, ", "Grüße, Welt"), "Welt");
    }
}
