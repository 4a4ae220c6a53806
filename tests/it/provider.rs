//! The OpenAI-compatible provider against the scripted fake server: wire format, streaming,
//! error mapping and retries, end to end over real HTTP on loopback.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard::provider::openai::{OpenAiConfig, OpenAiProvider};
use switchboard::provider::{
    ChatMessage, ChatRequest, ChatResponse, Provider, ProviderError, RetryPolicy, ToolCall, ToolSpec, with_retries,
};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

fn config(fake: &FakeLlm, stream: bool) -> OpenAiConfig {
    OpenAiConfig {
        name: "fake".into(),
        base_url: fake.base_url(),
        api_key: None,
        request_timeout: Duration::from_secs(5),
        stream,
        vision: false,
        extra_headers: Vec::new(),
        hints: Default::default(),
    }
}

fn provider(fake: &FakeLlm, stream: bool) -> OpenAiProvider {
    OpenAiProvider::new(config(fake, stream)).unwrap()
}

fn ask(text: &str) -> ChatRequest<'static> {
    ChatRequest {
        model: "test-model".into(),
        messages: vec![ChatMessage::system("be brief"), ChatMessage::user(text)].into(),
        tools: Vec::new(),
        max_tokens: Some(256),
        temperature: Some(0.2),
        ..ChatRequest::default()
    }
}

/// Short waits, so the retry tests stay fast.
fn quick_retries(max_retries: u32) -> RetryPolicy {
    RetryPolicy { max_retries, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(50) }
}

async fn complete_with_retries(provider: &OpenAiProvider, policy: &RetryPolicy) -> Result<String, ProviderError> {
    let request = ask("hi");
    with_retries(policy, || provider.complete(&request, None)).await.map(|r| r.content)
}

/// Streamed answers one after another go over one HTTP/1.1 connection, as a local model
/// server serves them, though the provider stops reading at the end event and the chunked
/// body's last piece comes after it: hyper reads that piece when it arrives rather than
/// closing the connection, so the next call does not wait for a new one.
#[tokio::test]
async fn streamed_answers_one_after_another_reuse_the_connection() {
    let fake = FakeLlm::start().await;
    let provider = provider(&fake, true);
    for n in 0..5 {
        let response = provider.complete(&ask(&format!("question {n}")), None).await.unwrap();
        assert_eq!(response.content, format!("echo: question {n}"));
        // The next call of a conversation comes later (a tool's work, the person's next message).
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fake.connections_accepted(), 1);
}

#[tokio::test]
async fn plain_reply_whole_and_streamed() {
    let fake = FakeLlm::start().await;
    for stream in [false, true] {
        fake.push(Scripted::Text("Hello there, friend.".into()));
        let response = provider(&fake, stream).complete(&ask("hi"), None).await.unwrap();
        assert_eq!(response.content, "Hello there, friend.", "stream={stream}");
        assert!(response.tool_calls.is_empty());
        assert_eq!(response.model, "test-model");
        assert_eq!(response.finish_reason.as_deref(), Some("stop"));
        assert!(response.usage.input_tokens > 0 && response.usage.output_tokens > 0, "{:?}", response.usage);
    }
}

#[tokio::test]
async fn empty_queue_echoes_the_last_user_message() {
    let fake = FakeLlm::start().await;
    for stream in [false, true] {
        let response = provider(&fake, stream).complete(&ask("ping"), None).await.unwrap();
        assert_eq!(response.content, "echo: ping");
    }
}

async fn tool_calls(stream: bool) {
    let fake = FakeLlm::start().await;
    fake.push(Scripted::ToolCalls(vec![
        ("read_file".into(), json!({"path": "notes/today.md"})),
        ("exec".into(), json!({"command": "ls -la", "timeout": 30, "env": {"A": "b"}})),
    ]));
    let response = provider(&fake, stream).complete(&ask("look"), None).await.unwrap();
    let expected = [
        ToolCall { id: "call_1".into(), name: "read_file".into(), arguments: json!({"path": "notes/today.md"}) },
        ToolCall {
            id: "call_2".into(),
            name: "exec".into(),
            arguments: json!({"command": "ls -la", "timeout": 30, "env": {"A": "b"}}),
        },
    ];
    assert_eq!(response.tool_calls, expected, "stream={stream}");
    assert_eq!(response.content, "");
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn tool_calls_whole() {
    tool_calls(false).await;
}

/// The fake splits each call's arguments over three deltas.
#[tokio::test]
async fn tool_calls_streamed_with_split_arguments() {
    tool_calls(true).await;
}

#[tokio::test]
async fn streamed_text_reaches_the_sink_in_order() {
    let fake = FakeLlm::start().await;
    let text = "The quick brown fox jumps over the lazy dog, twice: ünïcödé too.";
    fake.push(Scripted::Text(text.into()));
    let pieces = Mutex::new(Vec::new());
    let sink = |piece: &str| pieces.lock().unwrap().push(piece.to_owned());
    let response = provider(&fake, true).complete(&ask("fox"), Some(&sink)).await.unwrap();
    let pieces = pieces.into_inner().unwrap();
    assert!(pieces.len() > 1, "{pieces:?}");
    assert_eq!(pieces.concat(), response.content);
    assert_eq!(response.content, text);
}

#[tokio::test]
async fn a_stream_a_newer_request_interrupted_is_asked_again_without_streaming() {
    // llama-cpp-python cuts a running stream when another request arrives: role chunk, [DONE].
    let fake = FakeLlm::start().await;
    fake.push(Scripted::Interrupted);
    fake.push(Scripted::Text("the whole answer".into()));
    let pieces = Mutex::new(Vec::new());
    let sink = |piece: &str| pieces.lock().unwrap().push(piece.to_owned());
    let response = provider(&fake, true).complete(&ask("hi"), Some(&sink)).await.unwrap();
    assert_eq!(response.content, "the whole answer");
    // Nothing was streamed before the cut, so the sink hears the whole answer once.
    assert_eq!(pieces.into_inner().unwrap(), ["the whole answer"]);
    let streamed: Vec<bool> = fake.requests().iter().map(|r| r["stream"] == true).collect();
    assert_eq!(streamed, [true, false]);
}

#[tokio::test]
async fn without_wire_streaming_the_sink_gets_the_whole_text_once() {
    let fake = FakeLlm::start().await;
    let pieces = Mutex::new(Vec::new());
    let sink = |piece: &str| pieces.lock().unwrap().push(piece.to_owned());
    provider(&fake, false).complete(&ask("once"), Some(&sink)).await.unwrap();
    assert_eq!(pieces.into_inner().unwrap(), ["echo: once"]);
}

#[tokio::test]
async fn request_shape() {
    let fake = FakeLlm::start().await;
    let call = ToolCall { id: "call_7".into(), name: "read_file".into(), arguments: json!({"path": "a.txt"}) };
    let mut request = ask("read a.txt");
    request.messages.to_mut().push(ChatMessage::assistant("", vec![call.clone()]));
    request.messages.to_mut().push(ChatMessage::tool_result(&call, "contents of a"));
    provider(&fake, false).complete(&request, None).await.unwrap();

    request.tools.push(Arc::new(ToolSpec {
        name: "read_file".into(),
        description: "Reads a file".into(),
        parameters: json!({"type": "object"}),
    }));
    provider(&fake, true).complete(&request, None).await.unwrap();

    let [without_tools, with_tools]: [Value; 2] = fake.requests().try_into().unwrap();
    assert_eq!(without_tools["model"], "test-model");
    assert_eq!(without_tools["max_tokens"], 256);
    assert!(without_tools.get("tools").is_none(), "{without_tools}");
    assert!(without_tools.get("stream").is_none(), "{without_tools}");
    let messages = &without_tools["messages"];
    assert_eq!(messages[0], json!({"role": "system", "content": "be brief"}));
    assert_eq!(messages[1], json!({"role": "user", "content": "read a.txt"}));
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_7", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}}
        ]})
    );
    assert_eq!(messages[3], json!({"role": "tool", "content": "contents of a", "tool_call_id": "call_7"}));

    assert_eq!(
        with_tools["tools"],
        json!([{"type": "function", "function": {"name": "read_file", "description": "Reads a file", "parameters": {"type": "object"}}}])
    );
    assert_eq!(with_tools["stream"], true);
    assert_eq!(with_tools["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn rate_limit_retry_after_is_honoured() {
    let fake = FakeLlm::start().await;
    fake.push(Scripted::rate_limited(1));
    fake.push(Scripted::Text("after the wait".into()));
    let started = Instant::now();
    let content = complete_with_retries(&provider(&fake, true), &quick_retries(3)).await.unwrap();
    assert_eq!(content, "after the wait");
    // The policy's own backoff is 10 ms: only Retry-After explains a one-second wait.
    assert!(started.elapsed() >= Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn rate_limit_error_carries_retry_after_and_message() {
    let fake = FakeLlm::start().await;
    fake.push(Scripted::rate_limited(3));
    let error = provider(&fake, false).complete(&ask("hi"), None).await.unwrap_err();
    assert!(
        matches!(&error, ProviderError::Http { status: 429, message, retry_after: Some(wait) }
        if message == "Rate limit reached." && *wait == Duration::from_secs(3)),
        "{error:?}"
    );
}

#[tokio::test]
async fn server_errors_are_retried_then_succeed() {
    let fake = FakeLlm::start().await;
    fake.push(Scripted::server_error());
    fake.push(Scripted::Status { code: 503, retry_after: None, body: json!({"error": "overloaded"}) });
    fake.push(Scripted::Text("third time lucky".into()));
    let content = complete_with_retries(&provider(&fake, false), &quick_retries(3)).await.unwrap();
    assert_eq!(content, "third time lucky");
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn exhausted_retries_return_the_error() {
    let fake = FakeLlm::start().await;
    for _ in 0..3 {
        fake.push(Scripted::server_error());
    }
    let error = complete_with_retries(&provider(&fake, true), &quick_retries(2)).await.unwrap_err();
    assert!(
        matches!(&error, ProviderError::Http { status: 500, message, .. } if message == "The server had an error."),
        "{error:?}"
    );
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn context_overflow_is_not_retried() {
    let fake = FakeLlm::start().await;
    fake.push(Scripted::context_overflow());
    let error = complete_with_retries(&provider(&fake, false), &quick_retries(3)).await.unwrap_err();
    assert!(matches!(error, ProviderError::ContextOverflow(_)), "{error:?}");
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn hang_times_out() {
    let fake = FakeLlm::start().await;
    for stream in [false, true] {
        fake.push(Scripted::Hang);
        let mut config = config(&fake, stream);
        config.request_timeout = Duration::from_millis(200);
        let started = Instant::now();
        let error = OpenAiProvider::new(config).unwrap().complete(&ask("hi"), None).await.unwrap_err();
        assert!(matches!(error, ProviderError::Timeout(d) if d == Duration::from_millis(200)), "{error:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}

#[tokio::test]
async fn delayed_answer_within_the_timeout() {
    let fake = FakeLlm::start().await;
    fake.push(Scripted::Delay(Duration::from_millis(50), Box::new(Scripted::Text("late".into()))));
    let started = Instant::now();
    let response = provider(&fake, true).complete(&ask("hi"), None).await.unwrap();
    assert_eq!(response.content, "late");
    assert!(started.elapsed() >= Duration::from_millis(50));
}

#[tokio::test]
async fn wrong_key_is_401_and_not_retried() {
    let fake = FakeLlm::start_with_key("sk-right-key").await;
    let wrong =
        OpenAiProvider::new(OpenAiConfig { api_key: Some("sk-wrong-key".into()), ..config(&fake, false) }).unwrap();
    let error = complete_with_retries(&wrong, &quick_retries(3)).await.unwrap_err();
    assert!(matches!(&error, ProviderError::Http { status: 401, .. }), "{error:?}");
    assert!(!error.is_transient());
    assert_eq!(fake.requests().len(), 1);

    let right =
        OpenAiProvider::new(OpenAiConfig { api_key: Some("sk-right-key".into()), ..config(&fake, true) }).unwrap();
    assert_eq!(complete_with_retries(&right, &quick_retries(3)).await.unwrap(), "echo: hi");
}

#[tokio::test]
async fn api_key_never_in_debug_output() {
    let fake = FakeLlm::start().await;
    let provider =
        OpenAiProvider::new(OpenAiConfig { api_key: Some("sk-very-secret".into()), ..config(&fake, true) }).unwrap();
    let debug = format!("{provider:?} {provider:#?}");
    assert!(!debug.contains("sk-very-secret"), "{debug}");
    assert!(debug.contains("fake"), "{debug}");
}

#[tokio::test]
async fn unreachable_server_is_a_network_error() {
    // A port that was free a moment ago: nothing listens there now.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let config = OpenAiConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        request_timeout: Duration::from_secs(2),
        ..OpenAiConfig::default()
    };
    let error = OpenAiProvider::new(config).unwrap().complete(&ask("hi"), None).await.unwrap_err();
    assert!(matches!(error, ProviderError::Network(_)), "{error:?}");
    assert!(error.is_transient());
}

#[tokio::test]
async fn wait_for_requests_sees_concurrent_calls() {
    let fake = FakeLlm::start().await;
    let provider = provider(&fake, false);
    let (ra, rb, rc) = (ask("a"), ask("b"), ask("c"));
    let (a, b, c) =
        tokio::join!(provider.complete(&ra, None), provider.complete(&rb, None), provider.complete(&rc, None));
    let mut answers = [a.unwrap().content, b.unwrap().content, c.unwrap().content];
    answers.sort();
    assert_eq!(answers, ["echo: a", "echo: b", "echo: c"]);
    assert_eq!(fake.wait_for_requests(3, Duration::from_secs(1)).await.len(), 3);
    // Too few requests: returns what it has once the time is up.
    assert_eq!(fake.wait_for_requests(4, Duration::from_millis(20)).await.len(), 3);
}

/// A one-route server that answers every request with the same raw body, for wire shapes
/// FakeLlm does not produce (servers that ignore `stream`, errors mid-stream, …).
async fn raw_server(content_type: &'static str, body: &'static str) -> String {
    use axum::http::header::CONTENT_TYPE;
    let router = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || async move { ([(CONTENT_TYPE, content_type)], body) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}/v1")
}

async fn complete_raw(content_type: &'static str, body: &'static str) -> Result<ChatResponse, ProviderError> {
    let base_url = raw_server(content_type, body).await;
    let config = OpenAiConfig { base_url, request_timeout: Duration::from_secs(2), ..OpenAiConfig::default() };
    let pieces = Mutex::new(Vec::new());
    let sink = |piece: &str| pieces.lock().unwrap().push(piece.to_owned());
    let response = OpenAiProvider::new(config)?.complete(&ask("hi"), Some(&sink)).await?;
    assert_eq!(pieces.into_inner().unwrap().concat(), response.content);
    Ok(response)
}

#[tokio::test]
async fn stream_request_answered_with_plain_json() {
    let body = r#"{"model": "m", "choices": [{"message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}]}"#;
    let response = complete_raw("application/json", body).await.unwrap();
    assert_eq!(response.content, "whole");
}

#[tokio::test]
async fn stream_with_crlf_comments_and_no_done() {
    // Whole without `[DONE]`: the last chunk says why the answer finished.
    let body = ": keep-alive\r\n\r\ndata: {\"choices\": [{\"delta\": {\"content\": \"a\"}}]}\r\n\r\ndata:\r\n\r\n\
                event: ping\r\ndata: {}\r\n\r\n\
                data: {\"choices\": [{\"delta\": {\"content\": \"b\"}, \"finish_reason\": \"stop\"}]}";
    let response = complete_raw("text/event-stream", body).await.unwrap();
    assert_eq!(response.content, "ab");
}

#[tokio::test]
async fn error_in_the_middle_of_a_stream() {
    let body = "data: {\"choices\": [{\"delta\": {\"content\": \"par\"}}]}\n\n\
                data: {\"error\": {\"message\": \"model overloaded\", \"type\": \"server_error\"}}\n\n";
    let error = complete_raw("text/event-stream", body).await.unwrap_err();
    assert!(
        matches!(&error, ProviderError::Http { status: 500, message, .. } if message == "model overloaded"),
        "{error:?}"
    );
}

#[tokio::test]
async fn garbage_answers_are_decode_errors() {
    let stream = complete_raw("text/event-stream", "data: {not json\n\n").await.unwrap_err();
    assert!(matches!(stream, ProviderError::Decode(_)), "{stream:?}");
    let empty = complete_raw("text/event-stream", "").await.unwrap_err();
    assert!(matches!(empty, ProviderError::Decode(_)), "{empty:?}");
    let whole = complete_raw("application/json", "<html>oops</html>").await.unwrap_err();
    assert!(matches!(whole, ProviderError::Decode(_)), "{whole:?}");
}
