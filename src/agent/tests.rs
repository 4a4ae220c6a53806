//! Agent loop tests against a scripted provider (standing in for the model vendor).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_channels::contract::{RunEventBody, Usage};

use super::*;
use crate::provider::{ChatResponse, ProviderError, Role, TextSink, ToolCall};
use crate::tools::{Tool, ToolError, ToolFilter};

#[derive(Default)]
struct Scripted {
    answers: Mutex<VecDeque<Result<ChatResponse, ProviderError>>>,
    requests: Mutex<Vec<ChatRequest>>,
}

#[async_trait]
impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn complete(
        &self,
        request: &ChatRequest,
        stream: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        self.requests.lock().unwrap().push(request.clone());
        let answer = self.answers.lock().unwrap().pop_front().expect("script ran out");
        if let (Some(sink), Ok(response)) = (stream, &answer) {
            sink(&response.content);
        }
        answer
    }
}

fn text(content: &str) -> Result<ChatResponse, ProviderError> {
    Ok(ChatResponse {
        content: content.into(),
        usage: Usage { input_tokens: 10, output_tokens: 2 },
        model: "m-1".into(),
        ..ChatResponse::default()
    })
}

fn calls(names: &[(&str, Value)]) -> Result<ChatResponse, ProviderError> {
    let tool_calls = names
        .iter()
        .enumerate()
        .map(|(i, (name, args))| ToolCall { id: format!("call_{i}"), name: (*name).into(), arguments: args.clone() })
        .collect();
    Ok(ChatResponse { tool_calls, usage: Usage { input_tokens: 5, output_tokens: 1 }, ..ChatResponse::default() })
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
struct Recorder(Mutex<Vec<RunEventBody>>);

impl EventSink for Recorder {
    fn emit(&self, body: RunEventBody) {
        self.0.lock().unwrap().push(body);
    }
}

fn agent(script: Vec<Result<ChatResponse, ProviderError>>, max_iterations: u32) -> (Agent, Arc<Scripted>) {
    let provider = Arc::new(Scripted { answers: Mutex::new(script.into()), ..Scripted::default() });
    let mut tools = ToolRegistry::with_builtins(crate::tools::ToolLimits::default());
    tools.register(Arc::new(Nap));
    let settings = AgentSettings {
        system_prompt: "be brief".into(),
        model: "m".into(),
        max_iterations,
        max_tokens: None,
        temperature: None,
        stream: true,
        retry: RetryPolicy { max_retries: 0, ..RetryPolicy::default() },
        workspace: std::env::temp_dir(),
    };
    (Agent::new(provider.clone(), tools, settings), provider)
}

fn turn<'a>(history: Vec<ChatMessage>, input: &str, events: &'a Recorder) -> Turn<'a> {
    Turn { history, input: ChatMessage::user(input), ctx: ToolContext::default(), tools: ToolFilter::All, events }
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
    assert_eq!(result.usage, Usage { input_tokens: 15, output_tokens: 3 });
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
async fn provider_failure_is_an_apology_not_silence() {
    let failure = Err(ProviderError::Http { status: 500, message: "boom".into(), retry_after: None });
    let (agent, _) = agent(vec![failure], 3);
    let result = agent.run(turn(vec![], "hi", &Recorder::default())).await;
    assert!(result.reply.starts_with("Sorry, I could not answer"), "{}", result.reply);
    assert!(result.reply.contains("HTTP 500"));
    assert!(result.error.as_deref().is_some_and(|e| e.contains("boom")));
    assert_eq!(result.transcript, vec![ChatMessage::user("hi")]);
}
