//! Builds a [`ChatResponse`] from the Messages API's stream events: `message_start` (model,
//! input usage), `content_block_start` / `_delta` / `_stop` per block index, `message_delta`
//! (stop reason, output usage), `message_stop`; `ping` is ignored and `error` fails the call.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use switchboard_channels::contract::Usage;

use super::wire::{WireUsage, decode_input, error_from_event};
use crate::provider::http_provider::StreamDecoder;
use crate::provider::sse::{SseEvent, StreamEnd};
use crate::provider::{ChatResponse, ProviderError, TextSink, ToolCall};

/// One content block being received.
#[derive(Debug)]
enum Block {
    Text(String),
    /// The input arrives as `input_json_delta` pieces of one JSON document.
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    /// Block types we do not use (thinking, …): received and dropped.
    Other,
}

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    message: Option<StartMessage>,
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default)]
    delta: Option<Value>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct StartMessage {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Default)]
pub struct StreamAccumulator {
    blocks: BTreeMap<usize, Block>,
    usage: Usage,
    model: String,
    stop_reason: Option<String>,
    started: bool,
    stopped: bool,
}

impl StreamAccumulator {
    /// Applies one event's data. `Ok(true)` once `message_stop` arrived.
    pub fn apply(
        &mut self,
        data: &str,
        sink: Option<TextSink<'_>>,
        secret: Option<&str>,
    ) -> Result<bool, ProviderError> {
        let event: Event =
            serde_json::from_str(data).map_err(|e| ProviderError::Decode(format!("stream event: {e}")))?;
        let index = event.index.unwrap_or(0);
        match event.kind.as_str() {
            "message_start" => self.start(event.message),
            "content_block_start" => {
                self.blocks.insert(index, new_block(event.content_block.as_ref()));
            }
            "content_block_delta" => self.delta(index, event.delta.as_ref(), sink),
            "message_delta" => {
                if let Some(reason) = event.delta.as_ref().and_then(|d| d["stop_reason"].as_str()) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = event.usage {
                    self.add_usage(usage);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => return Err(error_from_event(data, secret)),
            // `ping`, `content_block_stop` and event types added later carry nothing we need.
            _ => {}
        }
        Ok(self.stopped)
    }

    fn start(&mut self, message: Option<StartMessage>) {
        self.started = true;
        let Some(message) = message else { return };
        if let Some(model) = message.model.filter(|m| !m.is_empty()) {
            self.model = model;
        }
        if let Some(usage) = message.usage {
            self.add_usage(usage);
        }
    }

    /// `message_start` carries the input tokens, `message_delta` the (cumulative) output
    /// tokens: keep the latest of each.
    fn add_usage(&mut self, usage: WireUsage) {
        if let Some(input) = usage.input().filter(|&n| n > 0) {
            let (read, written) = usage.cache();
            self.usage =
                Usage { output_tokens: self.usage.output_tokens, ..Usage::new(input, 0).with_cache(read, written) };
        }
        if let Some(output) = usage.output() {
            self.usage.output_tokens = output;
        }
    }

    fn delta(&mut self, index: usize, delta: Option<&Value>, sink: Option<TextSink<'_>>) {
        let Some(delta) = delta else { return };
        // A delta for a block that never started: treat it as text, the common case.
        let block = self.blocks.entry(index).or_insert_with(|| Block::Text(String::new()));
        match (block, delta["type"].as_str()) {
            (Block::Text(text), Some("text_delta")) => {
                let piece = delta["text"].as_str().unwrap_or_default();
                if !piece.is_empty() {
                    if let Some(sink) = sink {
                        sink(piece);
                    }
                    text.push_str(piece);
                }
            }
            (Block::ToolUse { json, .. }, Some("input_json_delta")) => {
                json.push_str(delta["partial_json"].as_str().unwrap_or_default());
            }
            _ => {}
        }
    }

    pub fn finish(self) -> ChatResponse {
        let mut content = String::new();
        let mut tool_calls = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(text) => content.push_str(&text),
                Block::ToolUse { id, name, json } => {
                    tool_calls.push(ToolCall { id, name, arguments: decode_input(&json) })
                }
                Block::Other => {}
            }
        }
        ChatResponse { content, tool_calls, usage: self.usage, model: self.model, finish_reason: self.stop_reason }
    }
}

impl StreamDecoder for StreamAccumulator {
    fn apply_event(
        &mut self,
        event: &SseEvent,
        sink: Option<TextSink<'_>>,
        secret: Option<&str>,
    ) -> Result<Option<StreamEnd>, ProviderError> {
        if event.data.trim().is_empty() || !self.apply(&event.data, sink, secret)? {
            return Ok(None);
        }
        Ok(Some(StreamEnd::Complete(std::mem::take(self).finish())))
    }

    /// Without `message_stop` the answer may be cut short; a body without `message_start` is
    /// no answer at all.
    fn body_closed(self) -> StreamEnd {
        let what = if self.started { "before message_stop" } else { "before any event" };
        self.unfinished(format!("the stream ended {what}"))
    }

    /// The stream broke off (`why`) before `message_stop`.
    fn unfinished(self, why: String) -> StreamEnd {
        let streamed = self.blocks.values().any(|block| matches!(block, Block::Text(text) if !text.is_empty()));
        StreamEnd::Unfinished { streamed, why }
    }
}

fn new_block(start: Option<&Value>) -> Block {
    let Some(start) = start else { return Block::Text(String::new()) };
    let text = |key: &str| start[key].as_str().unwrap_or_default().to_owned();
    match start["type"].as_str() {
        Some("text") => Block::Text(text("text")),
        Some("tool_use") => {
            // The start carries `input: {}`; a non-empty one (rare) is the whole input.
            let json = match &start["input"] {
                Value::Object(map) if !map.is_empty() => start["input"].to_string(),
                _ => String::new(),
            };
            Block::ToolUse { id: text("id"), name: text("name"), json }
        }
        _ => Block::Other,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;

    fn run(events: &[Value], sink: Option<TextSink<'_>>) -> Result<(ChatResponse, bool), ProviderError> {
        let mut acc = StreamAccumulator::default();
        let mut stopped = false;
        for event in events {
            stopped = acc.apply(&event.to_string(), sink, Some("sk-secret"))?;
        }
        Ok((acc.finish(), stopped))
    }

    #[test]
    fn text_and_tool_use_blocks() {
        let events = [
            json!({"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 25, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "look."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "th\": \"a.txt\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 40}}),
            json!({"type": "message_stop"}),
        ];
        let pieces = Mutex::new(Vec::new());
        let sink = |p: &str| pieces.lock().unwrap().push(p.to_owned());
        let (response, stopped) = run(&events, Some(&sink)).unwrap();
        assert!(stopped);
        assert_eq!(pieces.into_inner().unwrap(), ["Let me ", "look."]);
        assert_eq!(response.content, "Let me look.");
        assert_eq!(
            response.tool_calls,
            [ToolCall { id: "toolu_1".into(), name: "read_file".into(), arguments: json!({"path": "a.txt"}) }]
        );
        assert_eq!(response.usage, Usage::new(25, 40));
        assert_eq!((response.model.as_str(), response.finish_reason.as_deref()), ("claude-x", Some("tool_use")));
    }

    #[test]
    fn cache_reads_and_writes_are_input_counted_apart() {
        let usage = json!({"input_tokens": 12, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 4000,
            "output_tokens": 1});
        let events = [
            json!({"type": "message_start", "message": {"model": "claude-x", "usage": usage}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ];
        let (response, _) = run(&events, None).unwrap();
        assert_eq!(response.usage, Usage::new(4312, 9).with_cache(4000, 300));
    }

    #[test]
    fn tool_use_without_input_deltas_has_empty_arguments() {
        let events = [
            json!({"type": "message_start", "message": {}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "current_time", "input": {}}}),
            json!({"type": "message_stop"}),
        ];
        let (response, _) = run(&events, None).unwrap();
        assert_eq!(response.tool_calls[0].arguments, json!({}));
    }

    #[test]
    fn error_event_maps_its_type_and_hides_the_key() {
        let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        let error = run(&[overloaded], None).unwrap_err();
        assert!(matches!(&error, ProviderError::Http { status: 529, .. }) && error.is_transient(), "{error:?}");
        let echo = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad key sk-secret"}});
        let error = run(&[echo], None).unwrap_err();
        assert!(matches!(&error, ProviderError::Http { status: 400, message, .. } if !message.contains("sk-secret")));
    }
}
