//! Token estimates: a cheap heuristic (about four characters a token), corrected by what the
//! provider reports.
//!
//! A real tokenizer per model would be exact but heavy and model-specific; the budget only
//! needs to be roughly right, and the provider tells us after each turn how far off we were.
//! That correction is one ratio per agent (one per worker process), kept in memory: it is a
//! property of the model's tokenizer and of the kind of text, not of a session, so sharing it
//! learns faster; a restart starts again from 1.0, which only makes the first budgets rougher.

use std::borrow::Borrow;
use std::sync::Mutex;

use switchboard_channels::contract::Usage;

use crate::provider::{ChatMessage, ChatRequest, ChatResponse, ToolSpec};

/// Tokens every message costs beyond its text (role, separators).
const MESSAGE_OVERHEAD: u64 = 4;
/// What an attached image is counted as: roughly what a photo costs a vision model (OpenAI:
/// 765 tokens for a 1024×1024 image in high detail; Anthropic: width×height/750, about 1,600
/// at most). Counted on every message that has images, although only the newest one's are
/// sent, so budgets of chats with photos are on the generous side.
pub const IMAGE_TOKENS: u64 = 1_000;
/// The correction ratio stays within these bounds, so one odd report cannot wreck budgets.
const MIN_RATIO: f64 = 0.5;
const MAX_RATIO: f64 = 3.0;
/// Weight of the newest observation in the smoothed ratio.
const SMOOTHING: f64 = 0.3;

fn chars_to_tokens(chars: usize) -> u64 {
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
}

/// The characters of `value`'s JSON text, counted as it is written instead of built: every
/// turn estimates its whole history, tool-call arguments included.
fn json_chars(value: &serde_json::Value) -> usize {
    struct CharCount(usize);
    impl std::io::Write for CharCount {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            // UTF-8 continuation bytes (0b10xxxxxx) do not start a character.
            self.0 += buf.iter().filter(|byte| **byte & 0xC0 != 0x80).count();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = CharCount(0);
    // A `Value` always serialises (its keys are strings) and the counter never fails.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The heuristic estimate of one message: its text, its tool calls' names and arguments.
pub fn raw_message(message: &ChatMessage) -> u64 {
    let calls: usize =
        message.tool_calls.iter().map(|call| call.id.len() + call.name.len() + json_chars(&call.arguments)).sum();
    // A group chat shows the author in a prefix (`[Alice (id 111)] `): counted wherever it is
    // set, so budgets never fall short (in a direct chat they are a few tokens generous).
    let author = message.author.as_ref().map_or(0, |author| author.label_chars() + 3);
    let images = IMAGE_TOKENS * u64::try_from(message.images.len()).unwrap_or(u64::MAX);
    // What `text_for_model` joins, counted without building it (this runs for every message
    // of the history on every turn).
    let extras = [&message.context, &message.recalled].into_iter().flatten().map(|part| part.chars().count() + 2);
    let text = message.content.chars().count() + extras.sum::<usize>();
    MESSAGE_OVERHEAD + chars_to_tokens(text + calls + author) + images
}

/// The heuristic estimate of a message of plain `text` (a system prompt), without building it.
pub fn raw_text(text: &str) -> u64 {
    MESSAGE_OVERHEAD + chars_to_tokens(text.chars().count())
}

/// The heuristic estimate of several messages.
pub fn raw_messages(messages: &[ChatMessage]) -> u64 {
    messages.iter().map(raw_message).sum()
}

/// The heuristic estimate of the tool schemas offered to the model, from their JSON.
pub fn raw_tools<T: Borrow<ToolSpec>>(tools: &[T]) -> u64 {
    tools
        .iter()
        .map(Borrow::borrow)
        .map(|spec: &ToolSpec| {
            chars_to_tokens(spec.name.len() + spec.description.chars().count() + spec.parameters.to_string().len())
        })
        .sum()
}

/// The usage of one model call whose provider reported none: the request's messages and tool
/// schemas in, the answer out. Marked estimated, so records and `/status` can say so.
pub fn estimate_usage(request: &ChatRequest<'_>, response: &ChatResponse) -> Usage {
    let answer = ChatMessage::assistant(response.content.clone(), response.tool_calls.clone());
    Usage::estimate(raw_messages(&request.messages) + raw_tools(&request.tools), raw_message(&answer))
}

fn corrected(raw: u64, ratio: f64) -> u64 {
    // Token counts are far below 2^52, where f64 stays exact.
    (raw as f64 * ratio).ceil() as u64
}

/// Estimates corrected by the provider's reported usage. Shared by a worker's sessions.
#[derive(Debug)]
pub struct Calibration {
    ratio: Mutex<f64>,
}

impl Default for Calibration {
    fn default() -> Self {
        Self { ratio: Mutex::new(1.0) }
    }
}

impl Calibration {
    /// The current reported/estimated ratio.
    pub fn ratio(&self) -> f64 {
        *self.ratio.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A raw estimate scaled by the ratio, rounded up.
    pub fn correct(&self, raw: u64) -> u64 {
        corrected(raw, self.ratio())
    }

    /// [`Calibration::correct`] at the ratio of now, for many estimates in a row (one lock).
    pub fn corrector(&self) -> impl Fn(u64) -> u64 + Copy {
        let ratio = self.ratio();
        move |raw| corrected(raw, ratio)
    }

    pub fn messages(&self, messages: &[ChatMessage]) -> u64 {
        self.correct(raw_messages(messages))
    }

    /// Learns from one turn: `estimated` raw tokens were sent, the provider counted
    /// `reported`. Ignored when either is zero (no usage reported, or nothing sent).
    pub fn observe(&self, estimated: u64, reported: u64) {
        if estimated == 0 || reported == 0 {
            return;
        }
        let seen = (reported as f64 / estimated as f64).clamp(MIN_RATIO, MAX_RATIO);
        let mut ratio = self.ratio.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *ratio = ((1.0 - SMOOTHING) * *ratio + SMOOTHING * seen).clamp(MIN_RATIO, MAX_RATIO);
    }
}

/// The raw estimate of all the input a turn sent: each model call sent `base` (system prompt,
/// history, tools) plus the turn's messages before that call's answer. `transcript` is the
/// turn's own messages (its input first); one call was made per assistant message in it.
pub fn turn_input(base: u64, transcript: &[ChatMessage]) -> u64 {
    let mut sent = base;
    let mut total = 0;
    for message in transcript {
        if message.role == crate::provider::Role::Assistant {
            total += sent;
        }
        sent += raw_message(message);
    }
    total
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::provider::ToolCall;

    #[test]
    fn text_and_tool_arguments_are_counted() {
        assert_eq!(raw_message(&ChatMessage::user("abcdefgh")), MESSAGE_OVERHEAD + 2);
        assert_eq!(raw_message(&ChatMessage::user("abcdefghi")), MESSAGE_OVERHEAD + 3);
        let call = ToolCall { id: "c1".into(), name: "read_file".into(), arguments: json!({"path": "x".repeat(400)}) };
        let with_call = raw_message(&ChatMessage::assistant("", vec![call]));
        assert!(with_call > 100, "{with_call}");
        let image = crate::provider::ImageRef { path: "media/a.jpg".into(), mime_type: None };
        let photo = ChatMessage::user("abcdefgh").with_images(vec![image.clone(), image]);
        assert_eq!(raw_message(&photo), MESSAGE_OVERHEAD + 2 + 2 * IMAGE_TOKENS);
    }

    #[test]
    fn a_text_counts_as_a_message_of_it() {
        for text in ["", "You are a helpful assistant.", "Zoë's 日本語 prompt\n\n## Rules"] {
            assert_eq!(raw_text(text), raw_message(&ChatMessage::system(text)), "{text:?}");
        }
    }

    #[test]
    fn arguments_count_as_the_characters_of_their_json() {
        for arguments in [json!({}), json!({"path": "notes/é.md", "n": 3, "q": "日本語 \"quoted\"\n"}), json!("raw")]
        {
            assert_eq!(json_chars(&arguments), arguments.to_string().chars().count(), "{arguments}");
        }
    }

    #[test]
    fn reported_usage_corrects_later_estimates_within_bounds() {
        let calibration = Calibration::default();
        let history = vec![ChatMessage::user("x".repeat(4000))];
        let raw = calibration.messages(&history);
        // The provider counts twice as many tokens as we guessed, turn after turn.
        for _ in 0..30 {
            calibration.observe(raw, raw * 2);
        }
        let corrected = calibration.messages(&history);
        assert!((corrected as f64 / raw as f64 - 2.0).abs() < 0.01, "{raw} → {corrected}");
        // A wild report moves the ratio only part of the way, and never past the bound.
        for _ in 0..30 {
            calibration.observe(raw, raw * 100);
        }
        let high = calibration.ratio();
        assert!(high <= MAX_RATIO && high > MAX_RATIO - 0.01, "{high}");
        calibration.observe(0, 500);
        assert_eq!(calibration.ratio(), high, "a turn without usage teaches nothing");
    }

    #[test]
    fn turn_input_counts_every_call_of_the_turn() {
        let call = ToolCall { id: "c1".into(), name: "t".into(), arguments: json!({}) };
        let transcript = vec![
            ChatMessage::user("hi"),
            ChatMessage::assistant("", vec![call.clone()]),
            ChatMessage::tool_result(&call, "result"),
            ChatMessage::assistant("done", vec![]),
        ];
        let first = 100 + raw_message(&transcript[0]);
        let second = first + raw_message(&transcript[1]) + raw_message(&transcript[2]);
        assert_eq!(turn_input(100, &transcript), first + second);
    }
}
