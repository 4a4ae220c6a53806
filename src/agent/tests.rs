//! Agent loop tests against a scripted provider (standing in for the model vendor).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_channels::contract::{RunEventBody, Usage};

use super::run::failure_reply;
use super::*;
use crate::provider::history::drop_oldest_history;
use crate::provider::pricing::PriceTable;
use crate::provider::{ChatResponse, ProviderError, Role, TextSink, ToolCall};
use crate::tools::{Tool, ToolError, ToolFilter};

#[derive(Default)]
pub(super) struct Scripted {
    answers: Mutex<VecDeque<Result<ChatResponse, ProviderError>>>,
    pub requests: Mutex<Vec<ChatRequest<'static>>>,
}

#[async_trait]
impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn complete(
        &self,
        request: &ChatRequest<'_>,
        stream: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        self.requests.lock().unwrap().push(request.clone().into_owned());
        let answer = self.answers.lock().unwrap().pop_front().expect("script ran out");
        if let (Some(sink), Ok(response)) = (stream, &answer) {
            sink(&response.content);
        }
        answer
    }
}

pub(super) fn text(content: &str) -> Result<ChatResponse, ProviderError> {
    Ok(ChatResponse {
        content: content.into(),
        usage: Usage::new(10, 2),
        model: "m-1".into(),
        ..ChatResponse::default()
    })
}

pub(super) fn calls(names: &[(&str, Value)]) -> Result<ChatResponse, ProviderError> {
    let tool_calls = names
        .iter()
        .enumerate()
        .map(|(i, (name, args))| ToolCall { id: format!("call_{i}"), name: (*name).into(), arguments: args.clone() })
        .collect();
    Ok(ChatResponse { tool_calls, usage: Usage::new(5, 1), ..ChatResponse::default() })
}

/// Sleeps for the given milliseconds, then echoes them: lets a test see call order.
struct Nap;

#[async_trait]
impl Tool for Nap {
    fn name(&self) -> &str {
        "nap"
    }
    fn description(&self) -> &str {
        "naps"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}})
    }
    async fn execute(&self, args: Value, _: &ToolContext) -> Result<String, ToolError> {
        let ms = args["ms"].as_u64().ok_or_else(|| ToolError::InvalidArguments("ms".into()))?;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(format!("napped {ms}"))
    }
}

#[derive(Default)]
pub(super) struct Recorder(Mutex<Vec<RunEventBody>>);

impl EventSink for Recorder {
    fn emit(&self, body: RunEventBody) {
        self.0.lock().unwrap().push(body);
    }
}

pub(super) fn agent(script: Vec<Result<ChatResponse, ProviderError>>, max_iterations: u32) -> (Agent, Arc<Scripted>) {
    agent_with_prices(script, max_iterations, PriceTable::default())
}

/// An agent whose first call of a turn is told `choice`.
pub(super) fn scripted_agent(
    script: Vec<Result<ChatResponse, ProviderError>>,
    choice: ToolChoice,
) -> (Agent, Arc<Scripted>) {
    let (agent, provider) = agent(script, 5);
    let Agent { provider: dyn_provider, tools, settings, .. } = agent;
    (Agent::new(dyn_provider, tools, AgentSettings { tool_choice: choice, ..settings }), provider)
}

fn agent_with_prices(
    script: Vec<Result<ChatResponse, ProviderError>>,
    max_iterations: u32,
    prices: PriceTable,
) -> (Agent, Arc<Scripted>) {
    let provider = Arc::new(Scripted { answers: Mutex::new(script.into()), ..Scripted::default() });
    let mut tools = ToolRegistry::with_builtins(crate::tools::ToolLimits::default());
    tools.register(Arc::new(Nap));
    let settings = AgentSettings {
        name: "main".into(),
        system_prompt: "be brief".into(),
        model: "m".into(),
        max_iterations,
        loop_detection: 3,
        max_tokens: None,
        temperature: None,
        stream: true,
        tool_choice: Default::default(),
        prices,
        workspace: std::env::temp_dir(),
        skills: Default::default(),
        protected: Default::default(),
        heartbeat_ack_max_chars: 300,
        models: Vec::new(),
        context_windows: Default::default(),
    };
    (Agent::new(provider.clone(), tools, settings), provider)
}

pub(super) fn turn<'a>(history: Vec<ChatMessage>, input: &str, events: &'a Recorder) -> Turn<'a> {
    Turn {
        system_prompt: "be brief".into(),
        history,
        input: ChatMessage::user(input),
        ctx: ToolContext::default(),
        tools: ToolFilter::All,
        events,
        steer: None,
        max_iterations: None,
        name_speakers: false,
        model: None,
        max_tokens: None,
        cache_key: None,
        budget: None,
    }
}

#[tokio::test]
async fn plain_answer_is_the_reply() {
    let (agent, provider) = agent(vec![text("hello there")], 5);
    let events = Recorder::default();
    let history = vec![ChatMessage::user("earlier"), ChatMessage::assistant("ok", vec![])];
    let result = agent.run(turn(history, "hi", &events)).await;
    assert_eq!(result.reply, "hello there");
    assert_eq!(result.error, None);
    assert_eq!(result.model, "m-1");
    assert_eq!(result.transcript, vec![ChatMessage::user("hi"), ChatMessage::assistant("hello there", vec![])]);
    let sent = &provider.requests.lock().unwrap()[0];
    let roles: Vec<Role> = sent.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::User]);
    assert_eq!(sent.messages[0].content, "be brief");
    assert!(events.0.lock().unwrap().contains(&RunEventBody::Chunk { text: "hello there".into() }));
}

#[tokio::test]
async fn parallel_tool_results_come_back_in_call_order() {
    let script = vec![calls(&[("nap", json!({"ms": 80})), ("nap", json!({"ms": 1}))]), text("done")];
    let (agent, provider) = agent(script, 5);
    let events = Recorder::default();
    let started = std::time::Instant::now();
    let result = agent.run(turn(vec![], "nap twice", &events)).await;
    assert!(started.elapsed() < Duration::from_millis(160), "tools did not run in parallel");
    assert_eq!(result.reply, "done");
    assert_eq!(result.usage, Usage::new(15, 3));
    let roles: Vec<Role> = result.transcript.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Tool, Role::Assistant]);
    assert_eq!(result.transcript[2].content, "napped 80");
    assert_eq!(result.transcript[2].tool_call_id.as_deref(), Some("call_0"));
    assert_eq!(result.transcript[3].content, "napped 1");
    let second = &provider.requests.lock().unwrap()[1];
    assert_eq!(second.messages.last().unwrap().content, "napped 1");
    let kinds: Vec<_> =
        events.0.lock().unwrap().iter().filter(|e| !matches!(e, RunEventBody::Chunk { .. })).cloned().collect();
    assert!(matches!(kinds[0], RunEventBody::ToolCall { .. }));
    assert!(matches!(&kinds[2], RunEventBody::ToolResult { content, is_error: false, .. } if content == "napped 80"));
}

#[tokio::test]
async fn tool_errors_go_back_to_the_model() {
    let (agent, provider) = agent(vec![calls(&[("no_such_tool", json!({}))]), text("sorry, no such tool")], 5);
    let result = agent.run(turn(vec![], "go", &Recorder::default())).await;
    assert_eq!(result.reply, "sorry, no such tool");
    assert_eq!(result.error, None);
    let second = &provider.requests.lock().unwrap()[1];
    assert!(second.messages.last().unwrap().content.contains("unknown tool `no_such_tool`"));
}

#[tokio::test]
async fn iteration_limit_stops_the_loop_with_an_explanation() {
    let script = (0..3).map(|_| calls(&[("current_time", json!({}))])).collect();
    let (agent, provider) = agent(script, 3);
    let result = agent.run(turn(vec![], "loop forever", &Recorder::default())).await;
    assert_eq!(provider.requests.lock().unwrap().len(), 3);
    assert!(result.reply.contains("stopped after 3 steps"), "{}", result.reply);
    assert!(result.error.is_some());
}

#[tokio::test]
async fn a_context_line_the_model_copied_reaches_neither_the_chat_nor_the_history() {
    let answer = "Paris.\n[context: Tuesday 3 July 2020, 5:14 (UTC, UTC+01:00) | from API, level guest]";
    let (agent, _) = agent(vec![text(answer)], 5);
    let result = agent.run(turn(vec![], "capital of France?", &Recorder::default())).await;
    assert_eq!(result.reply, "Paris.");
    assert_eq!(result.transcript.last().unwrap().content, "Paris.");
}

#[tokio::test]
async fn provider_failure_is_an_apology_not_silence() {
    let failure = Err(ProviderError::Http { status: 500, message: "boom".into(), retry_after: None });
    let (agent, _) = agent(vec![failure], 3);
    let result = agent.run(turn(vec![], "hi", &Recorder::default())).await;
    assert!(result.reply.starts_with("Sorry, I could not answer"), "{}", result.reply);
    assert!(result.reply.contains("HTTP 500"));
    assert!(result.error.as_deref().is_some_and(|e| e.contains("boom")));
    assert_eq!(result.transcript, vec![ChatMessage::user("hi")]);
}

fn overflow() -> Result<ChatResponse, ProviderError> {
    Err(ProviderError::ContextOverflow("prompt is too long: 9000 tokens > 8192 maximum".into()))
}

/// Eight history messages: a plain exchange, a tool turn, a plain exchange.
fn long_history() -> Vec<ChatMessage> {
    let call = ToolCall { id: "c1".into(), name: "current_time".into(), arguments: json!({}) };
    vec![
        ChatMessage::user("old question"),
        ChatMessage::assistant("old answer", vec![]),
        ChatMessage::user("what time?"),
        ChatMessage::assistant("", vec![call.clone()]),
        ChatMessage::tool_result(&call, "noon"),
        ChatMessage::assistant("It is noon.", vec![]),
        ChatMessage::user("and the day?"),
        ChatMessage::assistant("Friday.", vec![]),
    ]
}

#[tokio::test]
async fn context_overflow_drops_the_oldest_history_once_and_retries() {
    let (agent, provider) = agent(vec![overflow(), text("short enough now")], 5);
    let result = agent.run(turn(long_history(), "and now?", &Recorder::default())).await;
    assert_eq!(result.reply, "short enough now");
    assert_eq!(result.error, None);
    assert_eq!(result.iterations, 1, "the retry does not count as a step");
    let requests = provider.requests.lock().unwrap();
    assert_eq!(requests.len(), 2);
    let retried: Vec<&str> = requests[1].messages.iter().map(|m| m.content.as_str()).collect();
    // Half of eight is four; the cut then goes on past the tool turn to the next user message,
    // so the history still starts with the user's words.
    assert_eq!(retried, ["be brief", "and the day?", "Friday.", "and now?"]);
    // The transcript holds this turn only, whatever was dropped from the prompt.
    assert_eq!(result.transcript[0], ChatMessage::user("and now?"));
}

#[test]
fn the_cut_never_starts_with_a_tool_result_or_a_reply() {
    let call = ToolCall { id: "c".into(), name: "t".into(), arguments: json!({}) };
    let mut messages = vec![
        ChatMessage::system("s"),
        ChatMessage::user("q"),
        ChatMessage::assistant("", vec![call.clone(), call.clone()]),
        ChatMessage::tool_result(&call, "r1"),
        ChatMessage::tool_result(&call, "r2"),
        ChatMessage::assistant("a", vec![]),
        ChatMessage::user("now"),
    ];
    let dropped = drop_oldest_history(&mut messages, 6);
    // No user message after the cut: the whole history goes rather than start with a reply.
    assert_eq!(dropped, 5);
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User]);
}

#[tokio::test]
async fn a_second_overflow_drops_all_history_so_the_message_is_answered() {
    let (agent, provider) = agent(vec![overflow(), overflow(), text("fits alone")], 5);
    let result = agent.run(turn(long_history(), "and now?", &Recorder::default())).await;
    assert_eq!((result.reply.as_str(), result.error), ("fits alone", None));
    let requests = provider.requests.lock().unwrap();
    let last: Vec<&str> = requests[2].messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(last, ["be brief", "and now?"]);
}

#[tokio::test]
async fn an_overflow_without_history_says_what_helps() {
    let (agent, provider) = agent(vec![overflow(), overflow(), overflow()], 5);
    let result = agent.run(turn(long_history(), "and now?", &Recorder::default())).await;
    assert!(result.reply.contains("does not fit in the model's context window"), "{}", result.reply);
    assert!(!result.reply.contains("try again in a moment"), "{}", result.reply);
    assert!(result.error.as_deref().is_some_and(|e| e.contains("prompt is too long")));
    assert_eq!(provider.requests.lock().unwrap().len(), 3);
}

#[test]
fn only_failures_that_pass_say_to_try_again() {
    let http = |status| ProviderError::Http { status, message: "x".into(), retry_after: None };
    let again = |err: ProviderError| failure_reply(&err).contains("try again");
    assert!(again(http(500)) && again(http(429)) && again(ProviderError::Network("down".into())));
    for err in [http(401), http(403), http(404), ProviderError::Config("bad".into())] {
        let reply = failure_reply(&err);
        assert!(reply.contains("owner") && reply.contains("will not help"), "{reply}");
    }
    assert!(failure_reply(&http(401)).contains("API key"));
}

#[tokio::test]
async fn overflow_without_history_is_not_retried() {
    let (agent, provider) = agent(vec![overflow()], 5);
    let result = agent.run(turn(vec![], "huge", &Recorder::default())).await;
    assert!(result.error.is_some());
    assert_eq!(provider.requests.lock().unwrap().len(), 1);
}

fn prices(model: &str) -> PriceTable {
    let price =
        crate::config::ModelPrice { input_per_mtok: 1_000_000.0, output_per_mtok: 2_000_000.0, ..Default::default() };
    PriceTable::new([(model.to_owned(), price)].into())
}

#[tokio::test]
async fn cost_is_summed_over_calls_by_the_model_that_answered() {
    // `calls` answers leave the model empty: priced under "m-1" they would be unknown, so
    // give every answer the priced model.
    let mut tool_step = calls(&[("current_time", json!({}))]).unwrap();
    tool_step.model = "m-1".into();
    let (agent, _) = agent_with_prices(vec![Ok(tool_step), text("done")], 5, prices("m-1"));
    let result = agent.run(turn(vec![], "time?", &Recorder::default())).await;
    // (5 in × $1 + 1 out × $2) + (10 in × $1 + 2 out × $2) per token.
    assert_eq!(result.cost_usd, Some(7.0 + 14.0));
}

#[tokio::test]
async fn unknown_price_means_unknown_cost() {
    let (priced, _) = agent_with_prices(vec![text("hi")], 5, prices("another-model"));
    let result = priced.run(turn(vec![], "hi", &Recorder::default())).await;
    assert_eq!(result.cost_usd, None);
    let (unpriced, _) = agent(vec![text("hi")], 5);
    assert_eq!(unpriced.run(turn(vec![], "hi", &Recorder::default())).await.cost_usd, None);
}

mod fit;
mod loops;
mod models;

fn by(id: &str, name: &str, text: &str) -> ChatMessage {
    ChatMessage::user_by(crate::provider::Author { id: id.into(), name: name.into() }, text)
}

#[tokio::test]
async fn a_group_turn_names_every_speaker_and_the_transcript_keeps_the_text_apart() {
    let (agent, provider) = agent(vec![text("six works"), text("sure")], 5);
    let events = Recorder::default();
    let history = vec![by("111", "Alice", "meet at six?"), ChatMessage::assistant("ok", vec![])];
    let group =
        Turn { input: by("222", "Bob", "fine by me"), name_speakers: true, ..turn(history.clone(), "", &events) };
    let result = agent.run(group).await;
    let sent: Vec<String> = provider.requests.lock().unwrap()[0].messages.iter().map(|m| m.content.clone()).collect();
    assert_eq!(sent[1..], ["[Alice (id 111)] meet at six?", "ok", "[Bob (id 222)] fine by me"]);
    assert_eq!(result.transcript[0], by("222", "Bob", "fine by me"), "stored without the prefix, with the author");
    // A direct chat's request has no prefix.
    let direct = Turn { input: by("111", "Alice", "and you?"), ..turn(history, "", &events) };
    agent.run(direct).await;
    let sent = &provider.requests.lock().unwrap()[1].messages;
    assert_eq!((sent[1].content.as_str(), sent[3].content.as_str()), ("meet at six?", "and you?"));
}
