//! The model fakes' script: the answers a test queued, played one per request, and the
//! server-sent events streamed answers are written as.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use super::{json_status, lock};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// A plain assistant reply.
    Text(String),
    /// The assistant asks for these tools (name, arguments). Ids are `call_1`, `call_2`, …
    /// counted over the server's lifetime, so they stay unique across turns.
    ToolCalls(Vec<(String, Value)>),
    /// An error answer, e.g. 429 with `retry_after`, 500, or 400 `context_length_exceeded`.
    Status { code: u16, retry_after: Option<u64>, body: Value },
    /// Wait, then answer.
    Delay(Duration, Box<Scripted>),
    /// Never answer (for timeouts).
    Hang,
    /// A streamed request is cut short the way llama-cpp-python cuts the stream a newer request
    /// interrupts: the role chunk, then `[DONE]`, no text and no finish reason. A request that
    /// is not streamed gets the echo.
    Interrupted,
}

/// What a request gets once delays are waited out: an answer for the fake to write in its
/// wire format, or a response already made.
#[derive(Debug)]
pub(crate) enum Settled {
    Text(String),
    ToolCalls(Vec<(String, Value)>),
    /// Only for streamed requests.
    Interrupted,
    Response(Response),
}

pub(crate) struct ModelScript {
    queue: Mutex<VecDeque<Scripted>>,
    next_call_id: AtomicU64,
    /// Set when the fake is dropped: releases `Hang` handlers, which would otherwise keep
    /// their connection tasks alive after the accept loop is gone.
    stopped: watch::Sender<bool>,
}

impl ModelScript {
    pub(crate) fn new() -> Self {
        Self { queue: Mutex::new(VecDeque::new()), next_call_id: AtomicU64::new(1), stopped: watch::Sender::new(false) }
    }

    pub(crate) fn push(&self, step: Scripted) {
        lock(&self.queue).push_back(step);
    }

    /// Numbers tool calls over the fake's life, from 1.
    pub(crate) fn next_call_id(&self) -> u64 {
        self.next_call_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn release_hangs(&self) {
        self.stopped.send_replace(true);
    }

    /// Plays `chosen` (an answer picked by the request's content), else the queue's next
    /// answer, else an echo of `echoed`, the request's last user text, without the context line
    /// switchboard starts it with (as a model told not to repeat it leaves it out).
    pub(crate) async fn play(&self, chosen: Option<Scripted>, streamed: bool, echoed: &str) -> Settled {
        let next = chosen.or_else(|| lock(&self.queue).pop_front());
        let echoed = without_context_line(echoed);
        let echo = || Scripted::Text(format!("echo: {echoed}"));
        let mut step = next.unwrap_or_else(echo);
        loop {
            match step {
                Scripted::Delay(wait, then) => {
                    tokio::time::sleep(wait).await;
                    step = *then;
                }
                Scripted::Hang => {
                    let _ = self.stopped.subscribe().wait_for(|stopped| *stopped).await;
                    return Settled::Response(StatusCode::SERVICE_UNAVAILABLE.into_response());
                }
                Scripted::Status { code, retry_after, body } => {
                    return Settled::Response(json_status(code, retry_after, body));
                }
                Scripted::Interrupted if streamed => return Settled::Interrupted,
                Scripted::Interrupted => step = echo(),
                Scripted::Text(text) => return Settled::Text(text),
                Scripted::ToolCalls(calls) => return Settled::ToolCalls(calls),
            }
        }
    }
}

/// Frames of server-sent events, with a short pause before each, so the client really sees
/// them arrive one by one.
pub(crate) fn event_stream(frames: Vec<String>) -> Response {
    event_stream_paced(frames, Duration::from_millis(2))
}

/// Server-sent events, `pace` apart. The body ends `pace` after the last event, as a
/// server's does when its generator finishes after writing `[DONE]`: a client that stops
/// reading at the last event leaves the body unfinished (and hyper its connection unusable).
pub(crate) fn event_stream_paced(frames: Vec<String>, pace: Duration) -> Response {
    let events = futures_util::stream::iter(frames).then(move |frame| async move {
        tokio::time::sleep(pace).await;
        Ok::<_, Infallible>(frame)
    });
    let end = futures_util::stream::once(tokio::time::sleep(pace)).filter_map(|()| async { None });
    let body = events.chain(end);
    let mut response = Body::from_stream(body).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    with_event_stream_type(response)
}

/// Server-sent events written all at once.
pub(crate) fn event_stream_at_once(text: String) -> Response {
    with_event_stream_type(Body::from(text).into_response())
}

fn with_event_stream_type(mut response: Response) -> Response {
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response
}

/// Splits text into at most `parts` non-empty pieces on character boundaries.
pub fn split_text(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(parts.max(1));
    chars.chunks(size).map(|piece| piece.iter().collect()).collect()
}

/// `text` without the `[context: …]` line switchboard starts a user message with.
pub fn without_context_line(text: &str) -> &str {
    split_context_line(text).1
}

/// The `[context: …]` line a user message starts with (if it does), and the rest.
pub fn split_context_line(text: &str) -> (Option<&str>, &str) {
    if !text.starts_with("[context:") {
        return (None, text);
    }
    match text.split_once("]\n\n") {
        Some((line, message)) => (Some(&text[..line.len() + 1]), message),
        None => (Some(text), ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_text_keeps_characters_whole() {
        assert_eq!(split_text("héllo wörld", 4), ["hél", "lo ", "wör", "ld"]);
        assert_eq!(split_text("ab", 4), ["a", "b"]);
        assert!(split_text("", 4).is_empty());
        assert_eq!(split_text("héllo wörld", 4).concat(), "héllo wörld");
    }
}
