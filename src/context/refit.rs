//! The model chain's [`Fitting`]: when the chain fails over to a model whose window is smaller
//! than the request, the request is cut to fit it before the call, as the agent cuts one after
//! an overflow (the oldest half of the history, then half of the rest, …), and the answer's room
//! is lowered to what that model's budgets keep. When no history is left to drop and the turn's
//! own tool results still overflow (a tool-heavy run failing over mid-run), the older of them
//! are shortened as the agent shortens them inside a run ([`shorten_to_fit`]). The system
//! prompt, the tools and the turn's other messages stay: a request that does not fit even then
//! is sent as it is, and the server's refusal is handled as any overflow. Only the request to
//! that model changes; the run keeps its messages whole.

use std::borrow::Cow;

use super::ContextEngine;
use crate::agent::shorten_to_fit;
use crate::config::output_reserve;
use crate::provider::failover::Fitting;
use crate::provider::history::{drop_oldest_history, turn_start};
use crate::provider::{ChatMessage, ChatRequest};
use crate::tokens;

impl Fitting for ContextEngine {
    fn refit(&self, model: &str, configured: u64, request: &ChatRequest<'_>) -> Option<ChatRequest<'static>> {
        let window = self.windows.of(model, configured);
        let raw_tools = tokens::raw_tools(&request.tools);
        let tools = self.calibration.correct(raw_tools);
        let input = |messages: &[ChatMessage]| self.calibration.messages(messages) + tools;
        if input(&request.messages) + request.max_tokens.map_or(0, u64::from) <= window {
            return None;
        }
        let reserve = output_reserve(window, None);
        let max_tokens = request.max_tokens.map(|asked| asked.min(u32::try_from(reserve).unwrap_or(u32::MAX)));
        let answer = max_tokens.map_or(reserve, u64::from);
        let mut messages = request.messages.to_vec();
        let mut first_new = turn_start(&messages);
        let sent = messages.len();
        while first_new > 1 && input(&messages) + answer > window {
            first_new -= drop_oldest_history(&mut messages, first_new);
        }
        // The shortening counts raw (heuristic) tokens: the room left, uncalibrated.
        let raw_room = (window.saturating_sub(answer) as f64 / self.calibration.ratio()).floor() as u64;
        let shortened = shorten_to_fit(&mut messages, first_new, raw_tools, raw_room).map_or(0, |done| done.results);
        tracing::info!(
            model,
            window,
            dropped = sent - messages.len(),
            shortened,
            ?max_tokens,
            "refitted the request to the window of the model failed over to"
        );
        Some(ChatRequest {
            model: request.model.clone(),
            messages: Cow::Owned(messages),
            tools: request.tools.clone(),
            max_tokens,
            temperature: request.temperature,
            tool_choice: request.tool_choice.clone(),
            cache_key: request.cache_key.clone(),
        })
    }

    fn learn(&self, model: &str, configured: u64, named: u64) {
        self.windows.learn(model, configured, named);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::context::ContextSettings;
    use crate::provider::ToolCall;

    /// A system prompt, `exchanges` earlier exchanges of about 250 tokens each, and the input.
    fn request(exchanges: usize) -> ChatRequest<'static> {
        let mut messages = vec![ChatMessage::system("You are terse.")];
        for n in 0..exchanges {
            messages.push(ChatMessage::user(format!("question {n}: {}", "word ".repeat(200))));
            messages.push(ChatMessage::assistant(format!("answer {n}"), Vec::new()));
        }
        messages.push(ChatMessage::user("and now?"));
        ChatRequest { model: "big".into(), messages: messages.into(), max_tokens: Some(4096), ..Default::default() }
    }

    #[test]
    fn a_request_over_a_smaller_window_loses_its_oldest_history_and_keeps_the_turn() {
        let engine = ContextEngine::new(ContextSettings::default());
        assert_eq!(engine.refit("local/small", 128_000, &request(20)), None, "it fits: sent as it is");
        let refitted = engine.refit("local/small", 4096, &request(20)).expect("over 4096 tokens");
        assert_eq!(refitted.max_tokens, Some(512), "an eighth of the smaller window");
        let texts: Vec<&str> = refitted.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts.first(), Some(&"You are terse."));
        assert_eq!(texts.last(), Some(&"and now?"));
        assert!(!texts.iter().any(|text| text.starts_with("question 0:")), "the oldest went first");
        assert!(texts.iter().any(|text| text.starts_with("question 19:")), "the newest stayed");
        let sent = engine.calibration().messages(&refitted.messages) + 512;
        assert!(sent <= 4096, "{sent} tokens");
        // A window its server named counts too, and only for that model.
        Fitting::learn(&engine, "local/tiny", 8192, 2048);
        let tiny = engine.refit("local/tiny", 8192, &request(4)).expect("over the named 2048");
        assert!(engine.calibration().messages(&tiny.messages) + 512 <= 2048);
        assert_eq!(engine.refit("local/small", 8192, &request(4)), None);
    }

    /// A run that read two files of 8,000 characters (about 2,000 tokens each), with no history.
    fn tool_heavy_run() -> ChatRequest<'static> {
        let mut messages = vec![ChatMessage::system("You are terse."), ChatMessage::user("read both")];
        for name in ["a", "b"] {
            let call = ToolCall { id: name.into(), name: "read_file".into(), arguments: json!({"path": name}) };
            messages.push(ChatMessage::assistant("", vec![call.clone()]));
            messages.push(ChatMessage::tool_result(&call, name.repeat(8_000)));
        }
        ChatRequest { model: "big".into(), messages: messages.into(), max_tokens: Some(1024), ..Default::default() }
    }

    #[test]
    fn a_run_with_no_history_left_to_drop_has_its_older_tool_results_shortened() {
        let engine = ContextEngine::new(ContextSettings::default());
        let request = tool_heavy_run();
        let refitted = engine.refit("local/small", 4096, &request).expect("over 4096 tokens");
        let sent = engine.calibration().messages(&refitted.messages) + 512;
        assert!(sent <= 4096, "{sent} tokens");
        assert_eq!(refitted.messages.len(), request.messages.len(), "nothing dropped");
        let (older, latest) = (&refitted.messages[3].content, &refitted.messages[5].content);
        assert!(older.starts_with("aaaa") && older.contains("[shortened to fit the context window:"), "{older}");
        assert_eq!(latest, &request.messages[5].content, "the latest result stays whole");
        assert_eq!(refitted.messages[..3], request.messages[..3], "the prompt, the question and the call stay");
        assert_eq!(request.messages[3].content.len(), 8_000, "the run's own messages are not touched");
    }
}
