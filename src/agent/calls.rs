//! One step's calls: the model call (with its span, metrics and usage) and the tool calls it
//! asked for, run in parallel.

use std::borrow::Cow;
use std::sync::Arc;

use futures_util::future::join_all;
use switchboard_channels::contract::RunEventBody;
use switchboard_channels::meters::meters;
use tracing::Instrument;

use super::{Agent, EventSink, count_unreported_usage};
use crate::provider::{ChatMessage, ChatRequest, ChatResponse, ProviderError, ToolCall, ToolChoice};
use crate::tools::{ToolContext, ToolFilter};

/// What one model call of a turn is made with, besides the messages.
#[derive(Clone, Copy)]
pub(super) struct ModelCall<'a> {
    pub tools: &'a ToolFilter,
    pub iteration: u32,
    pub name_speakers: bool,
    /// The model asked for: the agent's, or the chain entry the session picked (`/model`).
    pub model: &'a str,
    pub max_tokens: Option<u32>,
    pub cache_key: Option<&'a str>,
}

/// What a step's tools run with.
#[derive(Clone, Copy)]
pub(super) struct Step<'a> {
    pub ctx: &'a ToolContext,
    pub filter: &'a ToolFilter,
    pub events: &'a dyn EventSink,
}

impl Agent {
    pub(super) async fn call_model(
        &self,
        messages: &[ChatMessage],
        call: ModelCall<'_>,
        events: &dyn EventSink,
    ) -> Result<ChatResponse, ProviderError> {
        let ModelCall { tools, iteration, name_speakers, model, max_tokens, cache_key } = call;
        let tools = self.tools.specs(tools);
        let tool_choice =
            if iteration == 1 { first_call_choice(&self.settings.tool_choice, &tools) } else { ToolChoice::Auto };
        // Rendered here, not stored: the transcript keeps the author apart from the text.
        let messages = if name_speakers {
            Cow::Owned(messages.iter().map(ChatMessage::with_speaker).collect())
        } else {
            Cow::Borrowed(messages)
        };
        let request = ChatRequest {
            model: model.to_owned(),
            messages,
            tools,
            max_tokens,
            temperature: self.settings.temperature,
            tool_choice,
            cache_key: cache_key.map(str::to_owned),
        };
        // What streams is cleaned as the final reply will be: no leaked block shows meanwhile.
        let chunk =
            crate::hygiene::stream::cleaning(|text: &str| events.emit(RunEventBody::Chunk { text: text.to_owned() }));
        let stream = self.settings.stream.then_some(&chunk as &(dyn Fn(&str) + Send + Sync));
        let span = tracing::info_span!(
            "llm_call",
            provider = self.provider.name(),
            model = %model,
            iteration,
            answered_by = tracing::field::Empty,
            input_tokens = tracing::field::Empty,
            output_tokens = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let started = std::time::Instant::now();
        let mut response = self.provider.complete(&request, stream).instrument(span.clone()).await;
        span.record("duration_ms", started.elapsed().as_millis() as u64);
        let took = started.elapsed().as_secs_f64();
        meters().model_call(self.provider.name(), model, response.is_ok(), took);
        if let Ok(answer) = &mut response {
            let _entered = span.enter();
            count_unreported_usage(&request, answer);
        }
        match &response {
            Ok(response) => {
                span.record("answered_by", response.model.as_str());
                span.record("input_tokens", response.usage.input_tokens);
                span.record("output_tokens", response.usage.output_tokens);
            }
            Err(err) => {
                span.record("error", tracing::field::display(err));
            }
        }
        response
    }

    /// One model call that starts as a turn's first call does (its messages, the schemas of
    /// `tools`, the first call's tool choice, speakers named in a group), for housekeeping after
    /// a turn: a provider's prompt cache, or a local server's one slot, serves what it repeats.
    /// It runs no tool: a call the model asks for comes back in the response for the caller.
    pub async fn call_as_turn(
        &self,
        messages: &[ChatMessage],
        tools: &ToolFilter,
        name_speakers: bool,
        max_tokens: u32,
        cache_key: Option<&str>,
    ) -> Result<ChatResponse, ProviderError> {
        let max_tokens = Some(self.housekeeping_limit(max_tokens));
        let model = self.settings.model.as_str();
        let call = ModelCall { tools, iteration: 1, name_speakers, model, max_tokens, cache_key };
        self.call_model(messages, call, &Unwatched).await
    }

    /// Runs `calls` in parallel, except those at `held` (indexes), which get `note` instead;
    /// their results come back in call order.
    pub(super) async fn run_tools(
        &self,
        calls: &[ToolCall],
        held: &[usize],
        note: &str,
        step: Step<'_>,
    ) -> Vec<ChatMessage> {
        let Step { ctx, filter, events } = step;
        let to_run: Vec<&ToolCall> =
            calls.iter().enumerate().filter(|(at, _)| !held.contains(at)).map(|(_, call)| call).collect();
        for call in &to_run {
            events.emit(RunEventBody::ToolCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        let outputs = join_all(to_run.iter().map(|call| {
            let span = tracing::info_span!("tool_call", tool = %call.name, call_id = %call.id,
                error = tracing::field::Empty, duration_ms = tracing::field::Empty);
            async move {
                let started = std::time::Instant::now();
                let output = self.tools.call(call, ctx, filter).await;
                let span = tracing::Span::current();
                span.record("error", output.is_error);
                span.record("duration_ms", started.elapsed().as_millis() as u64);
                output
            }
            .instrument(span)
        }))
        .await;
        for (call, output) in to_run.iter().zip(&outputs) {
            events.emit(RunEventBody::ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: output.content.clone(),
                is_error: output.is_error,
            });
        }
        let mut outputs = outputs.into_iter();
        let result = |(at, call): (usize, &ToolCall)| {
            let content = if held.contains(&at) {
                note.to_owned()
            } else {
                outputs.next().map(|output| output.content).unwrap_or_default()
            };
            ChatMessage::tool_result(call, content)
        };
        calls.iter().enumerate().map(result).collect()
    }
}

/// The configured choice, unless it names a tool this run does not offer (a sender whose level
/// lacks it): then the model decides.
fn first_call_choice(choice: &ToolChoice, offered: &[Arc<crate::provider::ToolSpec>]) -> ToolChoice {
    match choice {
        ToolChoice::Named(name) if !offered.iter().any(|spec| &spec.name == name) => ToolChoice::Auto,
        _ if offered.is_empty() => ToolChoice::Auto,
        other => other.clone(),
    }
}

/// The events of a call or run nobody watches (housekeeping: a compaction's calls).
pub struct Unwatched;

impl EventSink for Unwatched {
    fn emit(&self, _: RunEventBody) {}
}
