//! The Anthropic provider against the scripted fake, and the failover chain across an
//! OpenAI-compatible fake and an Anthropic one, over real HTTP on loopback.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard::context::pipeline::{Budget, prepare};
use switchboard::provider::anthropic::{API_VERSION, AnthropicConfig, AnthropicProvider};
use switchboard::provider::failover::{FailoverEntry, FailoverProvider};
use switchboard::provider::openai::{OpenAiConfig, OpenAiProvider};
use switchboard::provider::{
    ChatMessage, ChatRequest, Provider, ProviderError, RetryPolicy, ToolCall, ToolSpec, with_retries,
};
use switchboard_testkit::fake_anthropic::{self, FakeAnthropic, Scripted};
use switchboard_testkit::fake_llm::FakeLlm;

fn config(fake: &FakeAnthropic, stream: bool) -> AnthropicConfig {
    AnthropicConfig {
        name: "anthropic".into(),
        base_url: fake.base_url(),
        api_key: Some("sk-ant-test".into()),
        request_timeout: Duration::from_secs(5),
        stream,
        vision: false,
        cache: None,
    }
}

fn provider(fake: &FakeAnthropic, stream: bool) -> AnthropicProvider {
    AnthropicProvider::new(config(fake, stream)).unwrap()
}

fn ask(text: &str) -> ChatRequest<'static> {
    ChatRequest {
        model: "claude-test".into(),
        messages: vec![ChatMessage::system("be brief"), ChatMessage::user(text)].into(),
        tools: Vec::new(),
        ..ChatRequest::default()
    }
}

fn quick_retries(max_retries: u32) -> RetryPolicy {
    RetryPolicy { max_retries, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(50) }
}

#[tokio::test]
async fn plain_reply_whole_and_streamed() {
    let fake = FakeAnthropic::start().await;
    for stream in [false, true] {
        fake.push(Scripted::Text("Hello there, friend.".into()));
        let response = provider(&fake, stream).complete(&ask("hi"), None).await.unwrap();
        assert_eq!(response.content, "Hello there, friend.", "stream={stream}");
        assert_eq!(response.model, "claude-test");
        assert_eq!(response.finish_reason.as_deref(), Some("end_turn"));
        assert!(response.usage.input_tokens > 0 && response.usage.output_tokens > 0, "{:?}", response.usage);
    }
    // Empty queue: echo.
    assert_eq!(provider(&fake, true).complete(&ask("ping"), None).await.unwrap().content, "echo: ping");
}

#[tokio::test]
async fn a_stream_cut_before_message_stop_is_asked_again_without_streaming() {
    let fake = FakeAnthropic::start().await;
    fake.push(Scripted::Interrupted);
    fake.push(Scripted::Text("whole".into()));
    let response = provider(&fake, true).complete(&ask("hi"), None).await.unwrap();
    assert_eq!(response.content, "whole");
    let streamed: Vec<bool> = fake.requests().iter().map(|r| r["stream"] == true).collect();
    assert_eq!(streamed, [true, false]);
}

#[tokio::test]
async fn streamed_text_reaches_the_sink_in_order() {
    let fake = FakeAnthropic::start().await;
    let text = "The quick brown fox jumps over the lazy dog: ünïcödé too.";
    fake.push(Scripted::Text(text.into()));
    let pieces = Mutex::new(Vec::new());
    let sink = |piece: &str| pieces.lock().unwrap().push(piece.to_owned());
    let response = provider(&fake, true).complete(&ask("fox"), Some(&sink)).await.unwrap();
    let pieces = pieces.into_inner().unwrap();
    assert!(pieces.len() > 1, "{pieces:?}");
    assert_eq!(pieces.concat(), text);
    assert_eq!(response.content, text);
}

#[tokio::test]
async fn tool_calls_whole_and_streamed_with_split_json() {
    let fake = FakeAnthropic::start().await;
    for stream in [false, true] {
        fake.push(Scripted::ToolCalls(vec![
            ("read_file".into(), json!({"path": "notes/today.md"})),
            ("exec".into(), json!({"command": "ls -la", "env": {"A": "b"}})),
        ]));
        let response = provider(&fake, stream).complete(&ask("look"), None).await.unwrap();
        let names: Vec<(&str, &Value)> = response.tool_calls.iter().map(|c| (c.name.as_str(), &c.arguments)).collect();
        assert_eq!(
            names,
            [
                ("read_file", &json!({"path": "notes/today.md"})),
                ("exec", &json!({"command": "ls -la", "env": {"A": "b"}}))
            ],
            "stream={stream}"
        );
        assert!(response.tool_calls.iter().all(|c| c.id.starts_with("toolu_")));
        assert_eq!(response.finish_reason.as_deref(), Some("tool_use"));
    }
}

/// The context pipeline's output, sent through the Anthropic wire: the Messages API refuses a
/// conversation whose roles do not alternate from the user.
#[tokio::test]
async fn a_history_with_failed_turns_reaches_anthropic_alternating_from_the_user() {
    let fake = FakeAnthropic::start().await;
    // Two failed turns (their inputs stored without replies), a tool turn, a cut-off start.
    let call = |id: &str| ToolCall { id: id.into(), name: "read_file".into(), arguments: json!({"path": id}) };
    let (a, b) = (call("a"), call("b"));
    let history = vec![
        ChatMessage::assistant("a reply whose question was cut off", vec![]),
        ChatMessage::user("first"),
        ChatMessage::user("second?"),
        ChatMessage::assistant("", vec![a.clone(), b.clone()]),
        ChatMessage::tool_result(&a, "A"),
        ChatMessage::tool_result(&b, "B"),
        ChatMessage::assistant("Done.", vec![]),
        ChatMessage::user("hello?"),
    ];
    let budget = Budget { input: 1_000_000, fixed: 0, step: 0 };
    let mut request = ask("unused");
    request.messages = vec![ChatMessage::system("s")].into();
    request.messages.to_mut().extend(prepare(history, None, budget, &Default::default(), &Default::default(), None).0);
    request.messages.to_mut().push(ChatMessage::user("now"));
    provider(&fake, false).complete(&request, None).await.unwrap();
    let sent = fake.requests();
    let roles: Vec<&str> =
        sent[0]["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles.first(), Some(&"user"));
    assert!(roles.windows(2).all(|pair| pair[0] != pair[1]), "{roles:?}");
    assert_eq!(roles.last(), Some(&"user"));
}

#[tokio::test]
async fn request_shape_and_headers() {
    let fake = FakeAnthropic::start().await;
    let (a, b) = (
        ToolCall { id: "toolu_a".into(), name: "read_file".into(), arguments: json!({"path": "a"}) },
        ToolCall { id: "toolu_b".into(), name: "read_file".into(), arguments: json!({"path": "b"}) },
    );
    let mut request = ask("read both");
    request.messages.to_mut().push(ChatMessage::assistant("", vec![a.clone(), b.clone()]));
    request.messages.to_mut().push(ChatMessage::tool_result(&a, "A"));
    request.messages.to_mut().push(ChatMessage::tool_result(&b, "B"));
    request.tools.push(Arc::new(ToolSpec {
        name: "read_file".into(),
        description: "Reads".into(),
        parameters: json!({"type": "object"}),
    }));
    provider(&fake, true).complete(&request, None).await.unwrap();

    let recorded = fake.recorded().remove(0);
    assert_eq!(recorded.headers.get("x-api-key").map(String::as_str), Some("sk-ant-test"));
    assert_eq!(recorded.headers.get("anthropic-version").map(String::as_str), Some(API_VERSION));
    assert!(!recorded.headers.contains_key("authorization"));
    let body = recorded.body;
    assert_eq!(body["system"], "be brief");
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["tools"],
        json!([{"name": "read_file", "description": "Reads", "input_schema": {"type": "object"}}])
    );
    let roles: Vec<&str> = body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(
        body["messages"][2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"},
        ])
    );
}

#[tokio::test]
async fn error_mapping() {
    let fake = FakeAnthropic::start().await;
    fake.push(fake_anthropic::rate_limited(3));
    let error = provider(&fake, false).complete(&ask("hi"), None).await.unwrap_err();
    assert!(
        matches!(&error, ProviderError::Http { status: 429, retry_after: Some(wait), .. } if *wait == Duration::from_secs(3)),
        "{error:?}"
    );
    fake.push(fake_anthropic::overloaded());
    let error = provider(&fake, true).complete(&ask("hi"), None).await.unwrap_err();
    assert!(matches!(&error, ProviderError::Http { status: 529, message, .. } if message == "Overloaded"), "{error:?}");
    assert!(error.is_transient());
    fake.push(fake_anthropic::prompt_too_long());
    let error = provider(&fake, true).complete(&ask("hi"), None).await.unwrap_err();
    assert!(matches!(error, ProviderError::ContextOverflow(_)), "{error:?}");
}

#[tokio::test]
async fn wrong_key_is_401_not_retried_and_never_echoed() {
    let fake = FakeAnthropic::start_with_key("sk-ant-right").await;
    let wrong = provider(&fake, false);
    let request = ask("hi");
    let error = with_retries(&quick_retries(3), || wrong.complete(&request, None)).await.unwrap_err();
    assert!(matches!(&error, ProviderError::Http { status: 401, .. }), "{error:?}");
    assert!(!error.to_string().contains("sk-ant-test"));
    assert_eq!(fake.requests().len(), 1);
    let right = AnthropicProvider::new(AnthropicConfig { api_key: Some("sk-ant-right".into()), ..config(&fake, true) });
    assert_eq!(right.unwrap().complete(&request, None).await.unwrap().content, "echo: hi");
}

#[tokio::test]
async fn overloaded_is_retried_with_retry_after() {
    let fake = FakeAnthropic::start().await;
    fake.push(fake_anthropic::overloaded());
    fake.push(fake_anthropic::rate_limited(1));
    fake.push(Scripted::Text("finally".into()));
    let provider = provider(&fake, true);
    let request = ask("hi");
    let started = Instant::now();
    let response = with_retries(&quick_retries(3), || provider.complete(&request, None)).await.unwrap();
    assert_eq!(response.content, "finally");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(fake.requests().len(), 3);
}

/// A one-route server that streams a fixed body, for shapes the fake does not produce.
/// A server that answers streamed requests with `body` as an event stream and others with a
/// whole message saying "whole answer"; it counts the requests of each kind.
async fn raw_stream(body: &'static str) -> (String, Arc<Mutex<Vec<bool>>>) {
    use axum::http::header::CONTENT_TYPE;
    use axum::response::IntoResponse;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let router = axum::Router::new().route(
        "/v1/messages",
        axum::routing::post(move |axum::Json(request): axum::Json<serde_json::Value>| async move {
            let streamed = request["stream"] == true;
            record.lock().unwrap().push(streamed);
            if streamed {
                return ([(CONTENT_TYPE, "text/event-stream")], body).into_response();
            }
            axum::Json(json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "c", "stop_reason": "end_turn",
                "content": [{"type": "text", "text": "whole answer"}],
                "usage": {"input_tokens": 3, "output_tokens": 2}
            }))
            .into_response()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (format!("http://{addr}"), seen)
}

const START: &str = r#"{"type":"message_start","message":{"model":"c","usage":{"input_tokens":3}}}"#;
const TEXT: &str = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"par"}}"#;

/// Asks `base_url` with a sink; returns the outcome and what the sink heard.
async fn ask_streaming(base_url: String) -> (Result<switchboard::provider::ChatResponse, ProviderError>, String) {
    let config = AnthropicConfig { base_url, request_timeout: Duration::from_secs(2), ..AnthropicConfig::default() };
    let heard = Mutex::new(String::new());
    let sink = |piece: &str| heard.lock().unwrap().push_str(piece);
    let outcome = AnthropicProvider::new(config).unwrap().complete(&ask("hi"), Some(&sink)).await;
    (outcome, heard.into_inner().unwrap())
}

#[tokio::test]
async fn an_error_event_fails_the_call() {
    let error = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let body = format!(
        "event: message_start\ndata: {START}\n\nevent: content_block_delta\ndata: {TEXT}\n\nevent: error\ndata: {error}\n\n"
    );
    let (base_url, seen) = raw_stream(body.leak()).await;
    let (outcome, heard) = ask_streaming(base_url).await;
    assert!(matches!(outcome, Err(ProviderError::Http { status: 529, .. })), "{outcome:?}");
    assert_eq!(heard, "par");
    assert_eq!(*seen.lock().unwrap(), [true]);
}

#[tokio::test]
async fn a_cut_stream_is_asked_again_without_streaming() {
    let (base_url, seen) = raw_stream(format!("data: {START}\n\ndata: {TEXT}\n\n").leak()).await;
    let (outcome, heard) = ask_streaming(base_url).await;
    assert_eq!(outcome.unwrap().content, "whole answer");
    // The streamed start stays as it was shown; the whole answer is not streamed again.
    assert_eq!(heard, "par");
    assert_eq!(*seen.lock().unwrap(), [true, false]);
}

fn openai_entry(fake: &FakeLlm, model: &str) -> FailoverEntry {
    let config = OpenAiConfig {
        name: "openai".into(),
        base_url: fake.base_url(),
        request_timeout: Duration::from_secs(5),
        ..OpenAiConfig::default()
    };
    FailoverEntry {
        provider: Arc::new(OpenAiProvider::new(config).unwrap()),
        model: model.into(),
        retry: quick_retries(1),
        context_window: 128_000,
    }
}

fn anthropic_entry(fake: &FakeAnthropic, model: &str) -> FailoverEntry {
    let provider = Arc::new(provider(fake, true));
    FailoverEntry { provider, model: model.into(), retry: quick_retries(1), context_window: 128_000 }
}

#[tokio::test]
async fn failover_from_openai_500s_to_anthropic() {
    let (openai, anthropic) = (FakeLlm::start().await, FakeAnthropic::start().await);
    for _ in 0..2 {
        openai.push(switchboard_testkit::fake_llm::Scripted::server_error());
    }
    let chain =
        FailoverProvider::new(vec![openai_entry(&openai, "gpt-x"), anthropic_entry(&anthropic, "claude-y")]).unwrap();
    let response = chain.complete(&ask("hi"), None).await.unwrap();
    assert_eq!(response.content, "echo: hi");
    assert_eq!(response.model, "anthropic/claude-y");
    assert_eq!(openai.requests().len(), 2, "one try and one retry on the primary");
    assert_eq!(anthropic.requests()[0]["model"], "claude-y");
}

#[tokio::test]
async fn a_400_from_the_primary_is_not_failed_over() {
    let (openai, anthropic) = (FakeLlm::start().await, FakeAnthropic::start().await);
    openai.push(switchboard_testkit::fake_llm::Scripted::Status {
        code: 400,
        retry_after: None,
        body: json!({"error": {"message": "bad request"}}),
    });
    let chain =
        FailoverProvider::new(vec![openai_entry(&openai, "gpt-x"), anthropic_entry(&anthropic, "claude-y")]).unwrap();
    let error = chain.complete(&ask("hi"), None).await.unwrap_err();
    assert!(matches!(error, ProviderError::Http { status: 400, .. }), "{error:?}");
    assert!(anthropic.requests().is_empty());
}
