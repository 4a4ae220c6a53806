//! The agent loop: think (call the model), act (run the tools it asked for), observe (give it
//! the results), until it answers in words or the iteration limit is reached.

use std::borrow::Cow;
use std::sync::Arc;

use futures_util::future::join_all;
use switchboard_channels::contract::{RunEventBody, Usage};
use switchboard_channels::meters::meters;
use tracing::Instrument;

use crate::provider::pricing::{CostTally, PriceTable};
use crate::provider::{ChatMessage, ChatRequest, ChatResponse, Provider, ProviderError, Role, ToolChoice};
use crate::tools::memory::MemorySearcher;
use crate::tools::{ToolContext, ToolFilter, ToolRegistry};

/// How an agent talks to its model.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The agent's name in logs, spans and run records (`main` until named agents exist).
    pub name: String,
    /// The operator's instructions (`agent.system_prompt`): one section of the prompt the
    /// worker assembles per run (see [`crate::prompt`]), not the whole prompt.
    pub system_prompt: String,
    pub model: String,
    pub max_iterations: u32,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// Stream the model's text as `chunk` events while it is generated.
    pub stream: bool,
    /// What the first model call of a turn is told about tools (`agent.tool_choice`); later
    /// calls let the model decide, so it can answer after the tool's result.
    pub tool_choice: ToolChoice,
    /// For each run's estimated cost.
    pub prices: PriceTable,
    /// The directory file tools and `exec` work in.
    pub workspace: std::path::PathBuf,
    /// Its model chain, `provider/model` each, in the order tried (what `/model` offers).
    pub models: Vec<String>,
    /// Which of the workspace's skills it uses, and how they are offered.
    pub skills: crate::workspace::skills::SkillSettings,
    /// The workspace files only an admin or the owner may change (`[workspace] protected`).
    pub protected: std::sync::Arc<crate::workspace::protected::ProtectedFiles>,
}

/// Where a run reports what it does (`tool.call`, `chunk`, …). Must not block.
pub trait EventSink: Send + Sync {
    fn emit(&self, body: RunEventBody);
}

/// One turn of a conversation to run.
pub struct Turn<'a> {
    /// The system prompt of this run, assembled by the caller (see [`crate::prompt`]).
    pub system_prompt: String,
    /// Earlier messages of the session, oldest first.
    pub history: Vec<ChatMessage>,
    /// The message being answered.
    pub input: ChatMessage,
    pub ctx: ToolContext,
    /// The tools this run may use (from the sender's permissions).
    pub tools: ToolFilter,
    pub events: &'a dyn EventSink,
    /// Messages the user sent while this turn runs (queue mode `steer`); each is added as a
    /// user message before the next model call. What is left unread when the turn ends is
    /// still in the receiver for the caller to handle.
    pub steer: Option<&'a mut SteerReceiver>,
    /// This turn's own iteration limit (a sub-agent's), instead of the agent's.
    pub max_iterations: Option<u32>,
    /// A group chat: every user message with an author is shown to the model with its
    /// author's name ([`ChatMessage::with_speaker`]), so it can tell who said what. Direct
    /// chats have one person and stay unprefixed.
    pub name_speakers: bool,
    /// The chain entry to try first (`provider/model`, picked with `/model`); `None` = the
    /// chain's own order.
    pub model: Option<String>,
    /// The longest answer of each model call, in tokens: the output reserve the prompt was
    /// fitted with. `None` = the agent's own `max_tokens`, if any.
    pub max_tokens: Option<u32>,
    /// What the provider may group this conversation's requests by for its prompt cache (the
    /// session, hashed): OpenAI's `prompt_cache_key`. `None`: nothing to group by.
    pub cache_key: Option<String>,
}

/// The receiving end of a run's steering messages (user messages, with their authors).
pub type SteerReceiver = tokio::sync::mpsc::UnboundedReceiver<ChatMessage>;

/// What a turn produced.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnResult {
    /// The text for the user: the model's answer, or a short explanation of what went wrong.
    pub reply: String,
    /// The input and every message the turn added, in order, for the transcript.
    pub transcript: Vec<ChatMessage>,
    pub usage: Usage,
    /// The model that answered last.
    pub model: String,
    /// Estimated cost in USD, summed over the calls by the model that answered each; `None`
    /// when a model that used tokens has no price.
    pub cost_usd: Option<f64>,
    pub iterations: u32,
    /// What the conversation weighs after the turn: its last model call's input and output
    /// tokens, about what the session's next turn sends.
    pub context_tokens: u64,
    /// Set when the turn failed; `reply` then explains it to the user.
    pub error: Option<String>,
    /// The context window the provider named when it refused a call as too long, if it did.
    pub context_limit: Option<u64>,
    /// The turn failed because even its input alone did not fit the context window.
    pub overflowed: bool,
}

/// A configured agent: a provider, its tools and its settings.
///
/// The agent calls its provider once per step and does not retry: retries (and failover to
/// other models) belong to the provider, [`crate::provider::failover::FailoverProvider`], so
/// they happen in exactly one place.
pub struct Agent {
    provider: Arc<dyn Provider>,
    tools: ToolRegistry,
    settings: AgentSettings,
    /// Searches the memory of a run's scope, for recall (`[memory] recall`); `None`: no recall.
    memory: Option<Arc<MemorySearcher>>,
}

impl Agent {
    pub fn new(provider: Arc<dyn Provider>, tools: ToolRegistry, settings: AgentSettings) -> Self {
        Self { provider, tools, settings, memory: None }
    }

    /// The agent with a memory search for recall.
    pub fn with_memory(self, searcher: Arc<MemorySearcher>) -> Self {
        Self { memory: Some(searcher), ..self }
    }

    pub fn memory(&self) -> Option<&Arc<MemorySearcher>> {
        self.memory.as_ref()
    }

    pub fn settings(&self) -> &AgentSettings {
        &self.settings
    }

    /// The names of this agent's tools, from which a run's [`ToolFilter`] is chosen.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools.names()
    }

    /// The tools `filter` offers, as the model sees them (for the prompt's tool list).
    pub fn tool_specs(&self, filter: &ToolFilter) -> Vec<Arc<crate::provider::ToolSpec>> {
        self.tools.specs(filter)
    }

    /// The heuristic token count of the schemas `filter` offers (see [`crate::tokens`]).
    pub fn tool_tokens(&self, filter: &ToolFilter) -> u64 {
        self.tools.raw_tokens(filter)
    }

    /// The tools `filter` offers with each one's heuristic token count, in name order.
    pub fn tool_tokens_each(&self, filter: &ToolFilter) -> Vec<(String, u64)> {
        self.tools.raw_tokens_each(filter)
    }

    /// One model call without tools and without streaming, for housekeeping such as
    /// compaction summaries, answering in at most `max_tokens` (or the agent's own
    /// `max_tokens`, when lower). Retries and failover are the provider's, as for turns.
    pub async fn complete(&self, messages: Vec<ChatMessage>, max_tokens: u32) -> Result<ChatResponse, ProviderError> {
        let request = ChatRequest {
            model: self.settings.model.clone(),
            messages: messages.into(),
            max_tokens: Some(self.settings.max_tokens.map_or(max_tokens, |own| own.min(max_tokens))),
            temperature: self.settings.temperature,
            ..ChatRequest::default()
        };
        let mut response = self.provider.complete(&request, None).await;
        if let Ok(answer) = &mut response {
            count_unreported_usage(&request, answer);
        }
        response
    }

    /// Runs one turn to its end. Never fails: a provider failure becomes an apologetic reply
    /// with `error` set, so the user always hears back.
    pub async fn run(&self, turn: Turn<'_>) -> TurnResult {
        let Turn {
            system_prompt,
            history,
            input,
            ctx,
            tools,
            events,
            mut steer,
            max_iterations,
            name_speakers,
            model,
            max_tokens,
            cache_key,
        } = turn;
        let max_tokens = max_tokens.or(self.settings.max_tokens);
        let model = model.unwrap_or_else(|| self.settings.model.clone());
        let max_iterations = max_iterations.unwrap_or(self.settings.max_iterations);
        let mut messages = Vec::with_capacity(history.len() + 2);
        messages.push(ChatMessage::system(system_prompt));
        messages.extend(history);
        let mut first_new = messages.len();
        messages.push(input);
        let mut result = TurnResult {
            reply: String::new(),
            transcript: Vec::new(),
            usage: Usage::default(),
            model: model.clone(),
            cost_usd: None,
            iterations: 0,
            context_tokens: 0,
            error: None,
            context_limit: None,
            overflowed: false,
        };
        let mut cost = CostTally::new(&self.settings.prices);
        let mut overflows = 0;
        let mut repeats = Repeats::default();
        while result.iterations < max_iterations {
            if let Some(steer) = steer.as_deref_mut() {
                steer_in(steer, &mut messages);
            }
            result.iterations += 1;
            let call = ModelCall {
                tools: &tools,
                iteration: result.iterations,
                name_speakers,
                model: &model,
                max_tokens,
                cache_key: cache_key.as_deref(),
            };
            let response = self.call_model(&messages, call, events).await;
            if let Err(err) = &response {
                result.context_limit = err.context_limit().or(result.context_limit);
            }
            let response = match response {
                Ok(response) => response,
                // The history is what can go: the oldest half, then the rest, so a message that
                // fits on its own is always answered. An overflow without history is reported.
                Err(ProviderError::ContextOverflow(why)) if first_new > 1 => {
                    overflows += 1;
                    let dropped = if overflows == 1 {
                        drop_oldest_history(&mut messages, first_new)
                    } else {
                        messages.drain(1..first_new).count()
                    };
                    first_new -= dropped;
                    result.iterations -= 1;
                    tracing::warn!(dropped, left = first_new - 1, %why, "context overflow; dropped history, trying again");
                    continue;
                }
                Err(err) => {
                    tracing::warn!(error = %err, "model call failed");
                    result.overflowed = matches!(err, ProviderError::ContextOverflow(_));
                    result.reply = failure_reply(&err);
                    result.error = Some(err.to_string());
                    break;
                }
            };
            result.usage.add(response.usage);
            result.context_tokens = response.usage.total();
            cost.add(&self.settings.prices, &response.model, response.usage);
            if !response.model.is_empty() {
                result.model.clone_from(&response.model);
            }
            let calls = response.tool_calls.clone();
            let content = match calls.is_empty() {
                true => crate::prompt::context::without_copied_lines(&response.content).into_owned(),
                false => response.content,
            };
            messages.push(ChatMessage::assistant(content.clone(), response.tool_calls));
            if calls.is_empty() {
                result.reply = content;
                break;
            }
            match repeats.note(&calls) {
                Repeated::New => self.run_tools(&calls, &ctx, &tools, events, &mut messages).await,
                Repeated::Again => not_run(&calls, REPEATED_CALL, &mut messages),
                Repeated::Stuck => {
                    not_run(&calls, REPEATED_CALL, &mut messages);
                    result.reply = STUCK_REPLY.to_owned();
                    result.error = Some("the model kept asking for the same tool calls".to_owned());
                    break;
                }
            }
        }
        if result.reply.is_empty() && result.error.is_none() && last_is_tool_result(&messages) {
            result.reply = format!(
                "I stopped after {max_iterations} steps without reaching an answer. Ask me to continue if you want me to go on."
            );
            result.error = Some(format!("iteration limit of {max_iterations} reached"));
        }
        result.cost_usd = cost.total();
        result.transcript = messages.split_off(first_new);
        // What the input recalled was for this turn only: the transcript keeps the message as
        // later turns will send it.
        for message in &mut result.transcript {
            message.recalled = None;
        }
        result
    }

    async fn call_model(
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

    /// Runs the calls of one model response in parallel; results go back in call order.
    async fn run_tools(
        &self,
        calls: &[crate::provider::ToolCall],
        ctx: &ToolContext,
        filter: &ToolFilter,
        events: &dyn EventSink,
        messages: &mut Vec<ChatMessage>,
    ) {
        for call in calls {
            events.emit(RunEventBody::ToolCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        let outputs = join_all(calls.iter().map(|call| {
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
        for (call, output) in calls.iter().zip(outputs) {
            events.emit(RunEventBody::ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: output.content.clone(),
                is_error: output.is_error,
            });
            messages.push(ChatMessage::tool_result(call, output.content));
        }
    }
}

/// What one model call of a turn is made with, besides the messages.
#[derive(Clone, Copy)]
struct ModelCall<'a> {
    tools: &'a ToolFilter,
    iteration: u32,
    name_speakers: bool,
    /// The model asked for: the agent's, or the chain entry the session picked (`/model`).
    model: &'a str,
    max_tokens: Option<u32>,
    cache_key: Option<&'a str>,
}

/// Every request has input, so zero input tokens means the provider reported no usage (local
/// servers often send none when streaming): an estimate is counted rather than nothing, so
/// budgets are charged and `/status` tells the truth.
fn count_unreported_usage(request: &ChatRequest<'_>, answer: &mut ChatResponse) {
    if answer.usage.input_tokens == 0 {
        answer.usage = crate::tokens::estimate_usage(request, answer);
        tracing::debug!(
            input = answer.usage.input_tokens,
            output = answer.usage.output_tokens,
            "the provider reported no usage; counting an estimate"
        );
    }
}

/// Small local models repeat one tool call until the iteration limit, each step re-sending the
/// whole conversation. The third time a step asks for the same calls (names and arguments)
/// they are not run: the model is told it has their results. The fourth time the turn ends.
/// Nothing else changes in the request (no `tool_choice: none`, which makes llama-cpp-python
/// render another prompt head and re-read all of it), so the provider's cache holds.
const SAME_CALLS_NOT_RUN: u32 = 3;

/// What a call the model already asked for twice gets instead of running again.
const REPEATED_CALL: &str = "not run: you asked for exactly this twice already in this turn, and its result is above. \
     Answer the user with what you have, or try something different.";

/// The reply of a turn that ends because the model kept asking for the same calls.
const STUCK_REPLY: &str = "I kept repeating the same step without getting further, so I stopped. \
     Ask me again, perhaps more precisely.";

/// How often a step's tool calls were asked for in this turn.
enum Repeated {
    New,
    /// The third time: not run.
    Again,
    /// More: the turn ends.
    Stuck,
}

/// The steps' tool calls of a turn, counted by what they ask for.
#[derive(Default)]
struct Repeats {
    seen: Vec<(String, u32)>,
}

impl Repeats {
    fn note(&mut self, calls: &[crate::provider::ToolCall]) -> Repeated {
        let asked: String = calls.iter().map(|call| format!("{}({})\n", call.name, call.arguments)).collect();
        let count = match self.seen.iter_mut().find(|(seen, _)| *seen == asked) {
            Some((_, count)) => {
                *count += 1;
                *count
            }
            None => {
                self.seen.push((asked, 1));
                1
            }
        };
        match count {
            count if count < SAME_CALLS_NOT_RUN => Repeated::New,
            SAME_CALLS_NOT_RUN => {
                tracing::info!(count, "the model asked for the same tool calls again; not run");
                Repeated::Again
            }
            _ => Repeated::Stuck,
        }
    }
}

/// Answers `calls` with `why` instead of running them (every call needs its result).
fn not_run(calls: &[crate::provider::ToolCall], why: &str, messages: &mut Vec<ChatMessage>) {
    messages.extend(calls.iter().map(|call| ChatMessage::tool_result(call, format!("error: {why}"))));
}

/// Adds the steering messages that arrived since the last model call (at a tool boundary:
/// after the tool results, before the model sees them).
fn steer_in(steer: &mut SteerReceiver, messages: &mut Vec<ChatMessage>) {
    while let Ok(message) = steer.try_recv() {
        tracing::info!("adding a message the user sent during the run");
        messages.push(message);
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

fn last_is_tool_result(messages: &[ChatMessage]) -> bool {
    messages.last().is_some_and(|m| m.role == Role::Tool)
}

/// Drops the oldest half of the history, `messages[1..first_new]` (after the system prompt,
/// before this turn), and on up to the next user message, so the history left starts as every
/// provider accepts (Anthropic refuses one that starts with the assistant, and a tool result
/// without its call is refused everywhere). Returns how many messages went.
fn drop_oldest_history(messages: &mut Vec<ChatMessage>, first_new: usize) -> usize {
    let history = first_new.saturating_sub(1);
    let mut cut = 1 + history.div_ceil(2);
    while cut < first_new && messages[cut].role != Role::User {
        cut += 1;
    }
    messages.drain(1..cut);
    cut - 1
}

/// What the user reads when the model could not answer: what happened, and what helps. Only
/// failures that pass by themselves say to try again; a bad key or an overflow never do. An
/// overflow reaches here only once the turn has no history left to drop.
fn failure_reply(err: &ProviderError) -> String {
    let what = match err {
        ProviderError::Http { status: 429, .. } => {
            "the model provider is rate-limiting us. Please try again in a minute.".to_owned()
        }
        ProviderError::Http { status: status @ (401 | 403), .. } => format!(
            "the model provider refused switchboard's credentials (HTTP {status}). The owner needs to \
             fix the API key; trying again will not help."
        ),
        ProviderError::Http { status, .. } if *status >= 500 => {
            format!("the model provider had an error (HTTP {status}). Please try again in a moment.")
        }
        ProviderError::Http { status, .. } => format!(
            "the model provider rejected the request (HTTP {status}). The owner needs to check the model \
             settings; trying again will not help."
        ),
        ProviderError::ContextOverflow(_) => "this message does not fit in the model's context window, even \
             without the earlier conversation. Send a shorter message; the owner can also choose a model \
             with a larger window (agent.context_window)."
            .to_owned(),
        ProviderError::Network(_) => "the model provider cannot be reached. Please try again in a moment.".to_owned(),
        ProviderError::Timeout(limit) => {
            format!("the model did not answer within {} seconds. Please try again in a moment.", limit.as_secs())
        }
        ProviderError::Decode(_) => "the model provider sent an answer I could not read. Please try again; if \
             it keeps happening, the owner should check the model server."
            .to_owned(),
        ProviderError::Config(_) => {
            "the model settings are invalid. The owner needs to fix them; trying again will not help.".to_owned()
        }
        ProviderError::Interrupted(_) => "the model's answer broke off midway. Please try again.".to_owned(),
    };
    format!("Sorry, I could not answer: {what}")
}

#[cfg(test)]
mod tests;
