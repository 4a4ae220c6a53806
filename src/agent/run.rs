//! One turn of the agent loop, from the prompt to the reply.

use std::ops::ControlFlow;

use switchboard_channels::meters::{LoopOutcome, meters};

use super::calls::{ModelCall, Step};
use super::fit::shorten_to_fit;
use super::loops::{LoopDetector, Verdict, stopped_reply};
use super::{Agent, SteerReceiver, Turn, TurnResult};
use crate::provider::history::drop_oldest_history;
use crate::provider::pricing::CostTally;
use crate::provider::{ChatMessage, ChatResponse, ProviderError, Role, ToolCall};
use crate::tokens::raw_messages;

impl Agent {
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
            budget,
        } = turn;
        let max_tokens = max_tokens.or(self.settings.max_tokens);
        let model = model.unwrap_or_else(|| self.settings.model.clone());
        let max_iterations = max_iterations.unwrap_or(self.settings.max_iterations);
        let mut run = Running::new(system_prompt, history, input, &model);
        let mut cost = CostTally::new(&self.settings.prices);
        let mut loops = LoopDetector::new(self.settings.loop_detection);
        let tool_tokens = self.tools.raw_tokens(&tools);
        let step = Step { ctx: &ctx, filter: &tools, events };
        while run.result.iterations < max_iterations {
            if let Some(steer) = steer.as_deref_mut() {
                steer_in(steer, &mut run.messages);
            }
            if let Some(budget) = budget {
                run.fit(&self.settings.name, tool_tokens, budget);
            }
            run.result.iterations += 1;
            let call = ModelCall {
                tools: &tools,
                iteration: run.result.iterations,
                name_speakers,
                model: &model,
                max_tokens,
                cache_key: cache_key.as_deref(),
            };
            let response = match self.call_model(&run.messages, call, events).await {
                Ok(response) => response,
                Err(err) => match run.failed(err) {
                    ControlFlow::Continue(()) => continue,
                    ControlFlow::Break(()) => break,
                },
            };
            cost.add(&self.settings.prices, &response.model, response.usage);
            let calls = run.answered(response);
            if calls.is_empty() || self.act(&calls, loops.check(&calls), step, &mut run).await.is_break() {
                break;
            }
        }
        run.finish(max_iterations, cost.total())
    }

    /// Runs a step's tool calls as the loop detection says; `Break` when the run ends here.
    async fn act(&self, calls: &[ToolCall], verdict: Verdict, step: Step<'_>, run: &mut Running) -> ControlFlow<()> {
        let agent = self.settings.name.as_str();
        let results = match verdict {
            Verdict::Run => self.run_tools(calls, &[], "", step).await,
            Verdict::Warn { looping, note } => {
                let tools: Vec<&str> =
                    looping.iter().filter_map(|&at| calls.get(at)).map(|c| c.name.as_str()).collect();
                tracing::info!(agent, tools = %tools.join(","), "the model is looping on tool calls: not run, and told so");
                meters().tool_loop(agent, LoopOutcome::warned);
                self.run_tools(calls, &looping, &note, step).await
            }
            Verdict::Stop { note, tools } => {
                tracing::warn!(agent, %tools, "the model went on looping on tool calls after it was told; run stopped");
                meters().tool_loop(agent, LoopOutcome::stopped);
                // Every call gets its result, so the next turn's history is one providers accept.
                run.messages.extend(calls.iter().map(|call| ChatMessage::tool_result(call, note.clone())));
                run.result.reply = stopped_reply();
                run.result.error = Some(format!("the model kept asking for the same tool calls ({tools})"));
                return ControlFlow::Break(());
            }
        };
        run.messages.extend(results);
        ControlFlow::Continue(())
    }
}

/// A turn while it runs.
struct Running {
    /// The system prompt, the history, then the turn's own messages from `first_new` on.
    messages: Vec<ChatMessage>,
    first_new: usize,
    /// Times the provider refused a call as too long.
    overflows: u32,
    /// Heuristic tokens of the history dropped after those refusals: each later call sends
    /// that much less than the turn's prepared request.
    dropped: u64,
    result: TurnResult,
}

impl Running {
    fn new(system_prompt: String, history: Vec<ChatMessage>, input: ChatMessage, model: &str) -> Self {
        let mut messages = Vec::with_capacity(history.len() + 2);
        messages.push(ChatMessage::system(system_prompt));
        messages.extend(history);
        let first_new = messages.len();
        messages.push(input);
        let result = TurnResult {
            reply: String::new(),
            transcript: Vec::new(),
            history: Vec::new(),
            usage: Default::default(),
            model: model.to_owned(),
            cost_usd: None,
            iterations: 0,
            context_tokens: 0,
            error: None,
            context_limit: None,
            overflowed: false,
            shortened_tokens_sent: 0,
            unsent_history_tokens: 0,
        };
        Self { messages, first_new, overflows: 0, dropped: 0, result }
    }

    /// Shortens older tool results of the run when the next call would send more than
    /// `budget` (see [`super::fit`]).
    fn fit(&mut self, agent: &str, tool_tokens: u64, budget: u64) {
        let Some(done) = shorten_to_fit(&mut self.messages, self.first_new, tool_tokens, budget) else {
            return;
        };
        tracing::info!(
            agent,
            results = done.results,
            freed_tokens = done.freed,
            budget,
            "shortened older tool results of the run to fit the context window"
        );
        meters().run_compacted(agent);
        self.result.shortened_tokens_sent += done.sent_before;
    }

    /// A failed model call: `Continue` to call again (the history is what can go: the oldest
    /// half, then the rest, so a message that fits on its own is always answered), `Break`
    /// when the turn ends with the failure explained.
    fn failed(&mut self, err: ProviderError) -> ControlFlow<()> {
        self.result.context_limit = err.context_limit().or(self.result.context_limit);
        if let ProviderError::ContextOverflow(why) = &err
            && self.first_new > 1
        {
            self.overflows += 1;
            let history_before = raw_messages(&self.messages[1..self.first_new]);
            let dropped = if self.overflows == 1 {
                drop_oldest_history(&mut self.messages, self.first_new)
            } else {
                self.messages.drain(1..self.first_new).count()
            };
            self.first_new -= dropped;
            self.dropped += history_before.saturating_sub(raw_messages(&self.messages[1..self.first_new]));
            self.result.iterations -= 1;
            let left = self.first_new - 1;
            tracing::warn!(dropped, left, %why, "context overflow; dropped history, trying again");
            return ControlFlow::Continue(());
        }
        tracing::warn!(error = %err, "model call failed");
        self.result.overflowed = matches!(err, ProviderError::ContextOverflow(_));
        self.result.reply = failure_reply(&err);
        self.result.error = Some(err.to_string());
        ControlFlow::Break(())
    }

    /// Takes the model's answer into the conversation; returns the tool calls it asks for (none:
    /// it is the reply).
    fn answered(&mut self, response: ChatResponse) -> Vec<ToolCall> {
        self.result.usage.add(response.usage);
        self.result.unsent_history_tokens += self.dropped;
        self.result.context_tokens = response.usage.total();
        if !response.model.is_empty() {
            self.result.model.clone_from(&response.model);
        }
        let calls = response.tool_calls.clone();
        let content = match calls.is_empty() {
            true => crate::prompt::context::without_copied_lines(&response.content).into_owned(),
            false => response.content,
        };
        if calls.is_empty() {
            self.result.reply.clone_from(&content);
        }
        self.messages.push(ChatMessage::assistant(content, response.tool_calls));
        calls
    }

    fn finish(mut self, max_iterations: u32, cost_usd: Option<f64>) -> TurnResult {
        let mut result = self.result;
        if result.reply.is_empty() && result.error.is_none() && last_is_tool_result(&self.messages) {
            result.reply = format!(
                "I stopped after {max_iterations} steps without reaching an answer. Ask me to continue if you want me to go on."
            );
            result.error = Some(format!("iteration limit of {max_iterations} reached"));
        }
        result.cost_usd = cost_usd;
        result.transcript = self.messages.split_off(self.first_new);
        // The system prompt out, the history kept in place: no second buffer per turn.
        if !self.messages.is_empty() {
            self.messages.remove(0);
        }
        result.history = self.messages;
        // What the input recalled was for this turn only: the transcript keeps the message as
        // later turns will send it.
        for message in &mut result.transcript {
            message.recalled = None;
        }
        result
    }
}

/// Adds the steering messages that arrived since the last model call (at a tool boundary:
/// after the tool results, before the model sees them).
fn steer_in(steer: &mut SteerReceiver, messages: &mut Vec<ChatMessage>) {
    while let Ok(message) = steer.try_recv() {
        tracing::info!("adding a message the user sent during the run");
        messages.push(message);
    }
}

fn last_is_tool_result(messages: &[ChatMessage]) -> bool {
    messages.last().is_some_and(|m| m.role == Role::Tool)
}

/// What the user reads when the model could not answer: what happened, and what helps. Only
/// failures that pass by themselves say to try again; a bad key or an overflow never do. An
/// overflow reaches here only once the turn has no history left to drop.
pub(super) fn failure_reply(err: &ProviderError) -> String {
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
