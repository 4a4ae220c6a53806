use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::stream::StreamChunk;
use super::*;
use crate::provider::ToolSpec;
use crate::provider::sse::StreamEnd;

fn request(messages: Vec<ChatMessage>, tools: Vec<ToolSpec>) -> ChatRequest<'static> {
    ChatRequest {
        model: "m".into(),
        messages: messages.into(),
        tools: tools.into_iter().map(Arc::new).collect(),
        max_tokens: Some(100),
        temperature: Some(0.5),
        ..ChatRequest::default()
    }
}

fn encode(request: &ChatRequest<'_>, stream: bool) -> Value {
    serde_json::to_value(encode_request(request, stream, None, OpenAiHints::default())).unwrap()
}

#[test]
fn request_shape_for_a_tool_round_trip() {
    let call = ToolCall { id: "call_9".into(), name: "read".into(), arguments: json!({"path": "a.txt"}) };
    let messages = vec![
        ChatMessage::system("be brief"),
        ChatMessage::user("read a.txt"),
        ChatMessage::assistant("", vec![call.clone()]),
        ChatMessage::tool_result(&call, "hello"),
    ];
    let body = encode(&request(messages, vec![]), false);
    assert_eq!(
        body,
        json!({
            "model": "m",
            "max_tokens": 100,
            "temperature": 0.5,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "read a.txt"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_9", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}}
                ]},
                {"role": "tool", "content": "hello", "tool_call_id": "call_9"},
            ]
        })
    );
}

#[test]
fn tools_and_stream_options() {
    let tool = ToolSpec { name: "t".into(), description: "d".into(), parameters: json!({"type": "object"}) };
    let body = encode(&request(vec![ChatMessage::user("hi")], vec![tool]), true);
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "t", "description": "d", "parameters": {"type": "object"}}}])
    );
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    let plain = encode(&ChatRequest { max_tokens: None, temperature: None, ..request(vec![], vec![]) }, false);
    assert_eq!(plain, json!({"model": "m", "messages": []}));
}

#[test]
fn invalid_arguments_round_trip_verbatim() {
    assert_eq!(decode_arguments("{\"a\": 1}"), json!({"a": 1}));
    assert_eq!(decode_arguments(""), json!({}));
    assert_eq!(decode_arguments("{\"a\": "), json!("{\"a\": "));
    assert_eq!(encode_arguments(&decode_arguments("{\"a\": ")), "{\"a\": ");
}

#[test]
fn decodes_a_whole_answer_with_tool_calls() {
    let body = json!({
        "model": "gpt-x",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": "{\"x\":1}"}},
            {"type": "function", "function": {"name": "b", "arguments": {"y": 2}}},
            {"id": "call_3", "type": "function", "function": {"name": "c", "arguments": "not json"}},
        ]}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    });
    let response = decode_response(body.to_string().as_bytes()).unwrap();
    assert_eq!(response.content, "");
    assert_eq!(response.model, "gpt-x");
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.usage, Usage::new(11, 5));
    let calls: Vec<_> =
        response.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.clone())).collect();
    assert_eq!(
        calls,
        [("call_1", "a", json!({"x": 1})), ("call_auto_1", "b", json!({"y": 2})), ("call_3", "c", json!("not json"))]
    );
}

#[test]
fn decode_tolerates_missing_fields_and_refuses_garbage() {
    let minimal = json!({"choices": [{"message": {"content": "hi", "tool_calls": null}}]});
    let response = decode_response(minimal.to_string().as_bytes()).unwrap();
    assert_eq!((response.content.as_str(), response.usage), ("hi", Usage::default()));
    assert!(matches!(decode_response(b"<html>"), Err(ProviderError::Decode(_))));
    assert!(matches!(decode_response(b"{\"choices\": []}"), Err(ProviderError::Decode(_))));
}

#[test]
fn cached_prompt_tokens_are_read_from_openai_and_llama_cpp() {
    let openai = json!({"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 2048,
        "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0}}});
    let response = decode_response(openai.to_string().as_bytes()).unwrap();
    assert_eq!(response.usage, Usage::new(2048, 5).with_cache(1920, 0));
    // llama.cpp's server: what it reused of the previous prompt, beside the usage.
    let llama = json!({"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 900,
        "completion_tokens": 5}, "timings": {"cache_n": 850, "prompt_n": 50}});
    let response = decode_response(llama.to_string().as_bytes()).unwrap();
    assert_eq!(response.usage, Usage::new(900, 5).with_cache(850, 0));
    let mut acc = StreamAccumulator::default();
    acc.apply(chunk(json!({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]})), None);
    let usage =
        json!({"prompt_tokens": 1500, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 1408}});
    acc.apply(chunk(json!({"choices": [], "usage": usage})), None);
    assert_eq!(acc.finish().usage, Usage::new(1500, 1).with_cache(1408, 0));
}

fn chunk(value: Value) -> StreamChunk {
    serde_json::from_value(value).unwrap()
}

#[test]
fn stream_accumulates_text_tool_calls_and_usage() {
    let seen = Mutex::new(Vec::new());
    let sink = |text: &str| seen.lock().unwrap().push(text.to_owned());
    let mut acc = StreamAccumulator::default();
    let chunks = [
        json!({"model": "m1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "lo"}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "g", "arguments": "{\"q\""}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"p\": "}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}, {"index": 1, "function": {"arguments": ":2}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
    ];
    for value in chunks {
        acc.apply(chunk(value), Some(&sink));
    }
    let response = acc.finish();
    assert_eq!(*seen.lock().unwrap(), ["Hel", "lo"]);
    assert_eq!(response.content, "Hello");
    assert_eq!(response.model, "m1");
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.usage, Usage::new(3, 4));
    let calls: Vec<_> =
        response.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.clone())).collect();
    assert_eq!(calls, [("call_a", "f", json!({"p": 1})), ("call_b", "g", json!({"q": 2}))]);
}

#[test]
fn stream_without_indices_or_ids_still_yields_calls() {
    let mut acc = StreamAccumulator::default();
    acc.apply(
        chunk(json!({"choices": [{"delta": {"tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}}]})),
        None,
    );
    let StreamEnd::Complete(response) = acc.end(true) else { panic!("calls then [DONE] are a whole answer") };
    assert_eq!(
        response.tool_calls,
        [ToolCall { id: "call_auto_0".into(), name: "f".into(), arguments: json!({"a": 1}) }]
    );
}

fn ended(chunks: &[Value], done: bool) -> StreamEnd {
    let mut acc = StreamAccumulator::default();
    for value in chunks {
        acc.apply(chunk(value.clone()), None);
    }
    acc.end(done)
}

#[test]
fn empty_and_cut_off_streams_are_unfinished() {
    let role = json!({"choices": [{"delta": {"role": "assistant"}, "finish_reason": null}]});
    let text = json!({"choices": [{"delta": {"content": "Hel"}, "finish_reason": null}]});
    let stop = json!({"choices": [{"delta": {}, "finish_reason": "stop"}]});
    // llama.cpp-style servers answer a request over their window with an empty 200 stream.
    assert!(
        matches!(ended(&[], false), StreamEnd::Unfinished { streamed: false, ref why } if why.contains("before any data"))
    );
    assert!(matches!(ended(std::slice::from_ref(&role), true), StreamEnd::Unfinished { streamed: false, .. }));
    // Closed mid-answer: the start was shown already.
    assert!(matches!(ended(&[role.clone(), text.clone()], false), StreamEnd::Unfinished { streamed: true, .. }));
    assert!(matches!(ended(&[role.clone(), text.clone()], true), StreamEnd::Complete(_)));
    // A server that says why it finished but never sends [DONE].
    assert!(matches!(ended(&[role, text, stop], false), StreamEnd::Complete(r) if r.content == "Hel"));
}

#[test]
fn error_bodies_map_to_errors() {
    let body = json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}});
    let error = error_from_body(429, Some(Duration::from_secs(2)), body.to_string().as_bytes(), None);
    assert!(matches!(&error, ProviderError::Http { status: 429, message, retry_after: Some(d) }
        if message == "Rate limit reached" && *d == Duration::from_secs(2)));

    let overflow = json!({"error": {"message": "This model's maximum context length is 8192 tokens", "code": "context_length_exceeded"}});
    assert!(matches!(
        error_from_body(400, None, overflow.to_string().as_bytes(), None),
        ProviderError::ContextOverflow(_)
    ));
    let local = json!({"error": "prompt is too long: 9000 tokens > 8192 maximum"});
    assert!(matches!(
        error_from_body(400, None, local.to_string().as_bytes(), None),
        ProviderError::ContextOverflow(_)
    ));

    let html = error_from_body(502, None, b"<html>Bad Gateway</html>", None);
    assert!(matches!(&html, ProviderError::Http { status: 502, message, .. } if message == "<html>Bad Gateway</html>"));
    let empty = error_from_body(503, None, b"", None);
    assert!(matches!(&empty, ProviderError::Http { status: 503, message, .. } if message == "no error message"));
    let detail = error_from_body(422, None, br#"{"detail": "bad field"}"#, None);
    assert!(matches!(&detail, ProviderError::Http { message, .. } if message == "bad field"));
}

#[test]
fn echoed_key_is_redacted() {
    let body = json!({"error": {"message": "Incorrect API key provided: sk-live-abc", "code": "invalid_api_key"}});
    let error = error_from_body(401, None, body.to_string().as_bytes(), Some("sk-live-abc"));
    assert!(!error.to_string().contains("sk-live-abc"), "{error}");
}

#[test]
fn long_text_bodies_are_shortened() {
    let body = "é".repeat(1000);
    let ProviderError::Http { message, .. } = error_from_body(500, None, body.as_bytes(), None) else { panic!() };
    assert_eq!(message.chars().count(), 301);
}

#[test]
fn errors_inside_a_stream() {
    let vllm = json!({"object": "error", "message": "bad", "code": 400});
    assert!(matches!(error_from_stream(&vllm, None), ProviderError::Http { status: 400, .. }));
    let openai = json!({"message": "overloaded", "type": "server_error", "code": null});
    assert!(matches!(error_from_stream(&openai, None), ProviderError::Http { status: 500, .. }));
}

#[test]
fn tool_choice_is_sent_only_with_tools_and_as_the_api_spells_it() {
    let tool = ToolSpec { name: "current_time".into(), description: "d".into(), parameters: json!({}) };
    let with = |choice: ToolChoice, tools: Vec<ToolSpec>| {
        encode(&ChatRequest { tool_choice: choice, ..request(vec![ChatMessage::user("hi")], tools) }, false)
    };
    // Sent, not left to the default: llama-cpp-python shows the model no tools without it.
    assert_eq!(with(ToolChoice::Auto, vec![tool.clone()])["tool_choice"], "auto");
    assert_eq!(with(ToolChoice::Required, vec![tool.clone()])["tool_choice"], "required");
    assert_eq!(with(ToolChoice::None, vec![tool.clone()])["tool_choice"], "none");
    assert_eq!(
        with(ToolChoice::Named("current_time".into()), vec![tool])["tool_choice"],
        json!({"type": "function", "function": {"name": "current_time"}})
    );
    assert!(with(ToolChoice::Required, vec![]).get("tool_choice").is_none(), "no tools, no choice");
}

fn png(data: &str) -> crate::provider::images::InlineImage {
    crate::provider::images::InlineImage { media_type: "image/png", data: data.into() }
}

#[test]
fn images_of_the_attached_message_become_image_url_parts_after_its_text() {
    let messages = vec![ChatMessage::user("older"), ChatMessage::assistant("ok", vec![]), ChatMessage::user("look")];
    let attached = Attached { message: 2, images: vec![png("iVBO")], notes: vec!["[image b.png not shown]".into()] };
    let body = serde_json::to_value(encode_request(
        &request(messages, vec![]),
        false,
        Some(&attached),
        OpenAiHints::default(),
    ))
    .unwrap();
    assert_eq!(body["messages"][0]["content"], "older", "other messages stay plain strings");
    assert_eq!(
        body["messages"][2]["content"],
        json!([
            {"type": "text", "text": "look\n[image b.png not shown]"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        ])
    );
    // Every image left out: a plain string with the notes.
    let none_sent = Attached { images: vec![], ..attached };
    let body = serde_json::to_value(encode_request(
        &request(vec![ChatMessage::user("a"), ChatMessage::user("b")], vec![]),
        false,
        Some(&Attached { message: 1, ..none_sent }),
        OpenAiHints::default(),
    ))
    .unwrap();
    assert_eq!(body["messages"][1]["content"], "b\n[image b.png not shown]");
}

#[test]
fn cache_hints_and_the_answer_limit_follow_the_server() {
    let request = ChatRequest { cache_key: Some("k1".into()), ..request(vec![ChatMessage::user("hi")], vec![]) };
    let body = |hints: OpenAiHints| serde_json::to_value(encode_request(&request, false, None, hints)).unwrap();
    let plain = body(OpenAiHints::default());
    assert_eq!(plain["max_tokens"], 100);
    for field in ["prompt_cache_key", "cache_prompt", "max_completion_tokens"] {
        assert!(plain.get(field).is_none(), "{field} sent to a server that may refuse it: {plain}");
    }
    let hosted = body(OpenAiHints::for_server("https://api.openai.com/v1", crate::config::PromptCache::Auto));
    assert_eq!(
        (hosted["prompt_cache_key"].as_str(), hosted["max_completion_tokens"].as_u64()),
        (Some("k1"), Some(100))
    );
    assert!(hosted.get("max_tokens").is_none(), "{hosted}");
    let local = OpenAiHints::for_server("http://127.0.0.1:8080/v1", crate::config::PromptCache::Auto);
    assert_eq!(local, OpenAiHints::default(), "another server gets none under auto");
    let llama = body(OpenAiHints::for_server("http://127.0.0.1:8080/v1", crate::config::PromptCache::LlamaCpp));
    assert_eq!((llama["cache_prompt"].as_bool(), llama["max_tokens"].as_u64()), (Some(true), Some(100)));
    let off = OpenAiHints::for_server("https://api.openai.com/v1", crate::config::PromptCache::Off);
    assert!(!off.prompt_cache_key && off.max_completion_tokens);
}

#[test]
fn a_summary_joins_the_system_prompt_as_one_system_message() {
    let messages = vec![
        ChatMessage::system("rules"),
        ChatMessage::system("Summary of the earlier conversation: x"),
        ChatMessage::user("hi"),
    ];
    let body = encode(&request(messages, vec![]), false);
    let roles: Vec<&str> = body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user"]);
    assert_eq!(body["messages"][0]["content"], "rules\n\nSummary of the earlier conversation: x");
}
