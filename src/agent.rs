//! The agent loop: think (call the model), act (run the tools it asked for), observe (give it
//! the results), until it answers in words or the iteration limit is reached.
//!
//! [`run`] is the loop itself; [`loops`] stops a model that asks for the same tool calls over
//! and over; [`fit`] shortens the run's older tool results when the next call would not fit
//! the model's context window.

mod calls;
mod fit;
mod loops;
mod run;

pub use calls::Unwatched;
pub use fit::{Shortened, shorten_to_fit};

use std::sync::Arc;

use switchboard_channels::contract::{RunEventBody, Usage};

use crate::provider::pricing::PriceTable;
use crate::provider::{ChatMessage, ChatRequest, ChatResponse, Provider, ProviderError, ToolChoice};
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
    /// The same tool call asked for this many times in a run is a loop (`agent.loop_detection`,
    /// see [`loops`]); 0 = no detection.
    pub loop_detection: u32,
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
    /// The context window of each of `models` as configured; a turn is fitted to the window of
    /// the model it calls first (see [`crate::context::Target`]).
    pub context_windows: std::collections::HashMap<String, u64>,
    /// Which of the workspace's skills it uses, and how they are offered.
    pub skills: crate::workspace::skills::SkillSettings,
    /// The workspace files only an admin or the owner may change (`[workspace] protected`).
    pub protected: std::sync::Arc<crate::workspace::protected::ProtectedFiles>,
    /// A heartbeat's reply of `HEARTBEAT_OK` with at most this many other characters is
    /// suppressed (its own `[agents.<name>.heartbeat] ack_max_chars`, else `[heartbeat]`'s).
    pub heartbeat_ack_max_chars: usize,
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
    /// The tools this run offers the model (from the sender's permissions). It may call those
    /// of them that `ctx.tools` allows too: the memory flush offers the turn's tools, so that its
    /// requests start as the turn's did and the provider's cache serves them, and may call only
    /// the file tools.
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
    /// The most one model call of this run may send (messages and tool schemas), in the
    /// heuristic tokens of [`crate::tokens`]: the model's context window less the answer's
    /// reserve, with the estimate's correction taken out. A call that would send more first
    /// shortens the run's older tool results ([`fit`]). `None`: not checked; the provider's
    /// refusal is then the only limit.
    pub budget: Option<u64>,
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
    /// The history the turn's last call sent before the input (its prepared history, less what
    /// a refused call dropped): what a memory flush after the turn starts with, so that its
    /// requests repeat the turn's.
    pub history: Vec<ChatMessage>,
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
    /// Heuristic tokens that the turn's calls sent of tool results the transcript holds
    /// shortened ([`fit`]): what [`crate::tokens::turn_input`] cannot see in the transcript.
    pub shortened_tokens_sent: u64,
    /// Heuristic tokens of history that the turn's answered calls did not send: dropped after
    /// the provider refused a call as too long. [`crate::tokens::turn_input`] counts the whole
    /// prepared history for every call; this much of it never reached the provider.
    pub unsent_history_tokens: u64,
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
    /// The answer limit of a housekeeping call asking for at most `max_tokens`: the agent's own
    /// `max_tokens` when lower.
    fn housekeeping_limit(&self, max_tokens: u32) -> u32 {
        self.settings.max_tokens.map_or(max_tokens, |own| own.min(max_tokens))
    }

    pub async fn complete(&self, messages: Vec<ChatMessage>, max_tokens: u32) -> Result<ChatResponse, ProviderError> {
        let request = ChatRequest {
            model: self.settings.model.clone(),
            messages: messages.into(),
            max_tokens: Some(self.housekeeping_limit(max_tokens)),
            temperature: self.settings.temperature,
            ..ChatRequest::default()
        };
        let mut response = self.provider.complete(&request, None).await;
        if let Ok(answer) = &mut response {
            count_unreported_usage(&request, answer);
        }
        response
    }
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

#[cfg(test)]
mod tests;
