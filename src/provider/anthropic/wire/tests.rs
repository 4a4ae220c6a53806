use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::provider::ToolSpec;

fn call(id: &str) -> ToolCall {
    ToolCall { id: id.into(), name: "read_file".into(), arguments: json!({"path": id}) }
}

fn request(messages: Vec<ChatMessage>) -> ChatRequest<'static> {
    ChatRequest {
        model: "claude-test".into(),
        messages: messages.into(),
        tools: Vec::new(),
        max_tokens: None,
        ..ChatRequest::default()
    }
}

fn encoded(messages: Vec<ChatMessage>) -> Value {
    serde_json::to_value(encode_request(&request(messages), false, None, None)).unwrap()
}

#[test]
fn system_is_top_level_and_max_tokens_defaults() {
    let body = encoded(vec![ChatMessage::system("be brief"), ChatMessage::user("hi")]);
    assert_eq!(body["system"], "be brief");
    assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
    assert_eq!(body["messages"], json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]));
    assert!(body.get("stream").is_none() && body.get("tools").is_none() && body.get("temperature").is_none());
}

#[test]
fn tool_turn_becomes_tool_use_and_merged_tool_results() {
    let (a, b) = (call("a"), call("b"));
    let body = encoded(vec![
        ChatMessage::user("read both"),
        ChatMessage::assistant("Reading.", vec![a.clone(), b.clone()]),
        ChatMessage::tool_result(&a, "A"),
        ChatMessage::tool_result(&b, "B"),
        ChatMessage::assistant("Done.", vec![]),
    ]);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "read both"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "a", "name": "read_file", "input": {"path": "a"}},
                {"type": "tool_use", "id": "b", "name": "read_file", "input": {"path": "b"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "A"},
                {"type": "tool_result", "tool_use_id": "b", "content": "B"},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        ])
    );
}

#[test]
fn roles_alternate_and_empty_text_is_dropped() {
    let body = encoded(vec![
        ChatMessage::user("one"),
        ChatMessage::user("two"),
        ChatMessage::assistant("", vec![]),
        ChatMessage::assistant("three", vec![]),
        ChatMessage::user("four"),
    ]);
    let roles: Vec<&str> = body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(body["messages"][0]["content"].as_array().unwrap().len(), 2);
}

#[test]
fn history_cut_mid_turn_is_repaired() {
    let a = call("a");
    let body = encoded(vec![
        ChatMessage::tool_result(&a, "orphan"),
        ChatMessage::assistant("earlier answer", vec![]),
        ChatMessage::user("next"),
    ]);
    assert_eq!(body["messages"][0], json!({"role": "user", "content": [{"type": "text", "text": OMITTED_HISTORY}]}));
    assert_eq!(body["messages"][1]["role"], "assistant");
    assert!(!body.to_string().contains("orphan"), "{body}");
}

#[test]
fn tools_and_invalid_arguments() {
    let mut req = request(vec![
        ChatMessage::user("go"),
        ChatMessage::assistant("", vec![ToolCall { id: "x".into(), name: "t".into(), arguments: json!("{bad") }]),
    ]);
    req.tools.push(Arc::new(ToolSpec {
        name: "t".into(),
        description: "d".into(),
        parameters: json!({"type": "object"}),
    }));
    req.max_tokens = Some(100);
    let body = serde_json::to_value(encode_request(&req, true, None, None)).unwrap();
    assert_eq!(body["tools"], json!([{"name": "t", "description": "d", "input_schema": {"type": "object"}}]));
    assert_eq!(body["messages"][1]["content"][0]["input"], json!({"input": "{bad"}));
    assert_eq!((body["max_tokens"].as_u64(), body["stream"].as_bool()), (Some(100), Some(true)));
}

#[test]
fn whole_response_decodes() {
    let body = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "x"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 7},
    });
    let response = decode_response(body.to_string().as_bytes()).unwrap();
    assert_eq!(response.content, "Let me check.");
    assert_eq!(response.tool_calls[0].arguments, json!({"path": "x"}));
    assert_eq!(response.usage, Usage::new(15, 7).with_cache(5, 0));
    assert_eq!(response.finish_reason.as_deref(), Some("tool_use"));
    assert!(matches!(decode_response(b"<html>"), Err(ProviderError::Decode(_))));
}

#[test]
fn error_bodies() {
    let body =
        |kind: &str, message: &str| json!({"type": "error", "error": {"type": kind, "message": message}}).to_string();
    let overflow = body("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum");
    assert!(matches!(error_from_body(400, None, overflow.as_bytes(), None), ProviderError::ContextOverflow(_)));
    // A dummy key as short as one letter (a local proxy's) does not blank letters out of the
    // message, so the overflow is still recognised and the text stays readable.
    let short_key = error_from_body(400, None, overflow.as_bytes(), Some("o"));
    assert!(
        matches!(&short_key, ProviderError::ContextOverflow(message) if message.contains("prompt is too long")),
        "{short_key}"
    );
    let overloaded = error_from_body(529, None, body("overloaded_error", "Overloaded").as_bytes(), None);
    assert!(matches!(&overloaded, ProviderError::Http { status: 529, message, .. } if message == "Overloaded"));
    assert!(overloaded.is_transient());
    let html = error_from_body(502, None, b"<html>bad gateway</html>", None);
    assert!(matches!(&html, ProviderError::Http { status: 502, message, .. } if message.contains("bad gateway")));
}

#[test]
fn tool_choice_as_the_messages_api_spells_it() {
    let tool = ToolSpec { name: "current_time".into(), description: "d".into(), parameters: json!({}) };
    let with = |choice: ToolChoice| {
        let request = ChatRequest {
            tools: vec![Arc::new(tool.clone())],
            tool_choice: choice,
            ..request(vec![ChatMessage::user("hi")])
        };
        serde_json::to_value(encode_request(&request, false, None, None)).unwrap()
    };
    assert!(with(ToolChoice::Auto).get("tool_choice").is_none());
    assert_eq!(with(ToolChoice::Required)["tool_choice"], json!({"type": "any"}));
    assert_eq!(
        with(ToolChoice::Named("current_time".into()))["tool_choice"],
        json!({"type": "tool", "name": "current_time"})
    );
}

#[test]
fn images_of_the_attached_message_become_base64_image_blocks_before_its_text() {
    let image = crate::provider::images::InlineImage { media_type: "image/jpeg", data: "/9j/".into() };
    let attached = Attached { message: 1, images: vec![image], notes: vec!["[image b.png not shown]".into()] };
    let messages = vec![ChatMessage::system("be brief"), ChatMessage::user("what is this?")];
    let body = serde_json::to_value(encode_request(&request(messages), false, Some(&attached), None)).unwrap();
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}},
            {"type": "text", "text": "what is this?\n[image b.png not shown]"},
        ]}])
    );
    // A photo without a caption: the image block alone.
    let attached = Attached { message: 0, notes: vec![], ..attached };
    let body =
        serde_json::to_value(encode_request(&request(vec![ChatMessage::user("")]), false, Some(&attached), None))
            .unwrap();
    assert_eq!(body["messages"][0]["content"].as_array().unwrap().len(), 1);
    assert_eq!(body["messages"][0]["content"][0]["type"], "image");
}

#[test]
fn breakpoints_mark_the_tools_the_system_prompt_and_the_newest_message() {
    let tool = Arc::new(ToolSpec { name: "t".into(), description: "d".into(), parameters: json!({}) });
    let messages = vec![
        ChatMessage::system("rules"),
        ChatMessage::system("Summary of the earlier conversation: x"),
        ChatMessage::user("hi"),
        ChatMessage::assistant("", vec![call("c1")]),
        ChatMessage::tool_result(&call("c1"), "file text"),
    ];
    let request = ChatRequest { tools: vec![tool.clone(), tool], ..request(messages) };
    let body = serde_json::to_value(encode_request(&request, false, None, Some(CacheTtl::FiveMinutes))).unwrap();
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(body["tools"][1]["cache_control"], ephemeral);
    assert!(body["tools"][0].get("cache_control").is_none());
    assert_eq!(body["system"][0], json!({"type": "text", "text": "rules", "cache_control": ephemeral}));
    assert!(body["system"][1].get("cache_control").is_none(), "the summary follows the shared prompt");
    let newest = body["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(newest["content"].as_array().unwrap().last().unwrap()["cache_control"], ephemeral);
    assert_eq!(body.to_string().matches("cache_control").count(), 3);
    let hour = serde_json::to_value(encode_request(&request, false, None, Some(CacheTtl::OneHour))).unwrap();
    assert_eq!(hour["tools"][1]["cache_control"], json!({"type": "ephemeral", "ttl": "1h"}));
    let off = serde_json::to_value(encode_request(&request, false, None, None)).unwrap();
    assert!(!off.to_string().contains("cache_control"), "{off}");
    assert_eq!(off["system"], "rules\n\nSummary of the earlier conversation: x");
}
