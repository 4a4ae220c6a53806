//! Streamed answers of the chat-completions API: chunks of deltas, tool calls assembled from
//! their pieces, the usage chunk at the end.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use switchboard_channels::contract::Usage;

use super::{Timings, WireUsage, arguments_text, content_text, decode_arguments, error_from_stream, fallback_call_id};
use crate::provider::http_provider::StreamDecoder;
use crate::provider::sse::{SseEvent, StreamEnd};
use crate::provider::{ChatResponse, ProviderError, TextSink, ToolCall};

#[derive(Debug, Deserialize)]
pub(super) struct StreamChunk {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Option<Vec<StreamChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    timings: Option<Timings>,
    /// Errors that happen after the 200 arrive as a chunk with an `error` object.
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct StreamChoice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<DeltaToolCall>>,
}

#[derive(Debug, Deserialize)]
struct DeltaToolCall {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<DeltaFunction>,
}

#[derive(Debug, Deserialize)]
struct DeltaFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Builds a [`ChatResponse`] from streamed chunks.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    content: String,
    /// By the `index` the deltas carry: a call's id and name come in its first delta, its
    /// arguments in pieces over the following ones.
    calls: BTreeMap<usize, PartialCall>,
    usage: Option<Usage>,
    model: String,
    finish_reason: Option<String>,
    chunks: usize,
}

impl StreamAccumulator {
    pub(super) fn apply(&mut self, chunk: StreamChunk, sink: Option<TextSink<'_>>) {
        self.chunks += 1;
        if let Some(model) = chunk.model.filter(|m| !m.is_empty()) {
            self.model = model;
        }
        // The usage chunk comes last (`stream_options.include_usage`); keep the latest.
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into_usage(chunk.timings));
        }
        for choice in chunk.choices.unwrap_or_default() {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            let text = content_text(delta.content);
            if !text.is_empty() {
                if let Some(sink) = sink {
                    sink(&text);
                }
                self.content.push_str(&text);
            }
            for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                self.apply_call_delta(call.index.unwrap_or(position), call);
            }
        }
    }

    fn apply_call_delta(&mut self, index: usize, delta: DeltaToolCall) {
        let call = self.calls.entry(index).or_default();
        if let Some(id) = delta.id.filter(|id| !id.is_empty())
            && call.id.is_empty()
        {
            call.id = id;
        }
        let Some(function) = delta.function else {
            return;
        };
        if let Some(name) = function.name.filter(|n| !n.is_empty())
            && call.name.is_empty()
        {
            call.name = name;
        }
        call.arguments.push_str(&arguments_text(function.arguments));
    }

    /// The stream is over, with `[DONE]` (`done`) or by the body closing. Whole when the server
    /// said why the answer finished, or sent `[DONE]` after some of it; anything else was cut
    /// short or is no answer at all (llama.cpp-style servers send an empty stream for a request
    /// over their context window).
    pub fn end(self, done: bool) -> StreamEnd {
        let answered = !self.content.is_empty() || !self.calls.is_empty();
        if self.finish_reason.is_some() || (done && answered) {
            return StreamEnd::Complete(self.finish());
        }
        let why = if self.chunks == 0 { crate::provider::sse::NO_DATA } else { "the stream carried no answer" };
        self.unfinished(why.to_owned())
    }

    pub fn finish(self) -> ChatResponse {
        let tool_calls = self
            .calls
            .into_iter()
            .map(|(index, call)| ToolCall {
                id: if call.id.is_empty() { fallback_call_id(index) } else { call.id },
                name: call.name,
                arguments: decode_arguments(&call.arguments),
            })
            .collect();
        ChatResponse {
            content: self.content,
            tool_calls,
            usage: self.usage.unwrap_or_default(),
            model: self.model,
            finish_reason: self.finish_reason,
        }
    }
}

impl StreamDecoder for StreamAccumulator {
    fn apply_event(
        &mut self,
        event: &SseEvent,
        sink: Option<TextSink<'_>>,
        secret: Option<&str>,
    ) -> Result<Option<StreamEnd>, ProviderError> {
        if event.is_done() {
            return Ok(Some(std::mem::take(self).end(true)));
        }
        self.apply_data(event, sink, secret)?;
        Ok(None)
    }

    /// A `[DONE]` without its blank line is no end marker: the answer must be whole by itself.
    fn apply_trailing_event(
        &mut self,
        event: &SseEvent,
        sink: Option<TextSink<'_>>,
        secret: Option<&str>,
    ) -> Result<Option<StreamEnd>, ProviderError> {
        if !event.is_done() {
            self.apply_data(event, sink, secret)?;
        }
        Ok(None)
    }

    fn body_closed(self) -> StreamEnd {
        self.end(false)
    }

    fn unfinished(self, why: String) -> StreamEnd {
        StreamEnd::Unfinished { streamed: !self.content.is_empty(), why }
    }
}

impl StreamAccumulator {
    fn apply_data(
        &mut self,
        event: &SseEvent,
        sink: Option<TextSink<'_>>,
        secret: Option<&str>,
    ) -> Result<(), ProviderError> {
        if event.data.trim().is_empty() {
            // A keep-alive written as an empty `data:` line.
            return Ok(());
        }
        let chunk: StreamChunk = match event.event.as_deref() {
            None | Some("message") | Some("error") => {
                serde_json::from_str(&event.data).map_err(|e| ProviderError::Decode(format!("stream chunk: {e}")))?
            }
            // Named events (pings and the like) are not part of the OpenAI format.
            Some(_) => return Ok(()),
        };
        if let Some(error) = &chunk.error {
            return Err(error_from_stream(error, secret));
        }
        self.apply(chunk, sink);
        Ok(())
    }
}
