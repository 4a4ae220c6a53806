//! The model chain's [`Fitting`]: when the chain fails over to a model whose window is smaller
//! than the request, the request is cut to fit it before the call, as the agent cuts one after
//! an overflow (the oldest half of the history, then half of the rest, …), and the answer's room
//! is lowered to what that model's budgets keep. The system prompt, the tools and the turn's own
//! messages stay: a request that does not fit even then is sent as it is, and the server's
//! refusal is handled as any overflow.

use std::borrow::Cow;

use super::ContextEngine;
use crate::config::output_reserve;
use crate::provider::failover::Fitting;
use crate::provider::history::{drop_oldest_history, turn_start};
use crate::provider::{ChatMessage, ChatRequest};
use crate::tokens;

impl Fitting for ContextEngine {
    fn refit(&self, model: &str, configured: u64, request: &ChatRequest<'_>) -> Option<ChatRequest<'static>> {
        let window = self.windows.of(model, configured);
        let tools = self.calibration.correct(tokens::raw_tools(&request.tools));
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
        tracing::info!(
            model,
            window,
            dropped = sent - messages.len(),
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
    use super::*;
    use crate::context::ContextSettings;

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
        assert_eq!(refitted.max_tokens, Some(1024), "a quarter of the smaller window");
        let texts: Vec<&str> = refitted.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts.first(), Some(&"You are terse."));
        assert_eq!(texts.last(), Some(&"and now?"));
        assert!(!texts.iter().any(|text| text.starts_with("question 0:")), "the oldest went first");
        assert!(texts.iter().any(|text| text.starts_with("question 19:")), "the newest stayed");
        let sent = engine.calibration().messages(&refitted.messages) + 1024;
        assert!(sent <= 4096, "{sent} tokens");
        // A window its server named counts too, and only for that model.
        Fitting::learn(&engine, "local/tiny", 8192, 2048);
        let tiny = engine.refit("local/tiny", 8192, &request(4)).expect("over the named 2048");
        assert!(engine.calibration().messages(&tiny.messages) + 512 <= 2048);
        assert_eq!(engine.refit("local/small", 8192, &request(4)), None);
    }
}
