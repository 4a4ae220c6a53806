//! The HTTP API door: malformed JSON, wrong types, unknown fields, empty and oversized content,
//! invalid UTF-8, deep nesting. Every one gets a clear 4xx and none reaches the model.

use serde_json::{Value, json};

use super::rig::{API_ONLY, Rig, Shape};
use crate::support::Daemon;

/// The daemon's default `channels.api.max_body_bytes`.
const MAX_BODY_BYTES: usize = 65_536;

/// Posts raw bytes as a JSON body; returns (status, JSON body or null).
pub async fn post_raw(daemon: &Daemon, body: Vec<u8>) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(daemon.url("/v1/messages"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Bodies the API must refuse with 400 `invalid_body`, each with a name for the failure message.
fn refused_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let text = |name, body: &str| (name, body.as_bytes().to_vec());
    let json_body = |name, body: Value| (name, body.to_string().into_bytes());
    let deep = format!("{}{}", "[".repeat(5_000), "]".repeat(5_000));
    let mut invalid_utf8 = br#"{"chat_id": "me", "content": "caf"#.to_vec();
    invalid_utf8.extend_from_slice(&[0xE9, 0xFF, 0xFE]);
    invalid_utf8.extend_from_slice(br#""}"#);
    vec![
        text("not JSON", "{not json"),
        text("empty body", ""),
        text("truncated JSON", r#"{"chat_id": "me", "content": "hi"#),
        text("a JSON array", "[]"),
        text("JSON null", "null"),
        text("a JSON string", r#""hello""#),
        text("a JSON number", "42"),
        text("deeply nested JSON", &deep),
        text("a lone surrogate", r#"{"chat_id": "me", "content": "\ud800"}"#),
        text("a duplicate key", r#"{"chat_id": "me", "chat_id": "you", "content": "x"}"#),
        ("invalid UTF-8 in a string", invalid_utf8),
        json_body("chat_id a number", json!({"chat_id": 5, "content": "x"})),
        json_body("chat_id an object", json!({"chat_id": {"id": "me"}, "content": "x"})),
        json_body("content a list", json!({"chat_id": "me", "content": ["x"]})),
        json_body("sender a number", json!({"chat_id": "me", "content": "x", "sender": 7})),
        json_body("an unknown field", json!({"chat_id": "me", "content": "x", "model": "gpt-9"})),
        json_body("a wrong-version field", json!({"v": 2, "chat_id": "me", "content": "x"})),
        json_body("no chat_id", json!({"content": "x"})),
        json_body("no content", json!({"chat_id": "me"})),
        json_body("empty content", json!({"chat_id": "me", "content": ""})),
        json_body("blank content", json!({"chat_id": "me", "content": " \n\t "})),
        json_body("empty chat_id", json!({"chat_id": "", "content": "x"})),
        json_body("empty sender", json!({"chat_id": "me", "content": "x", "sender": ""})),
    ]
}

async fn api_corpus(shape: Shape) {
    let mut rig = Rig::start(shape, API_ONLY, &[]).await;
    for (name, body) in refused_bodies() {
        let (status, answer) = post_raw(&rig.daemon, body).await;
        assert_eq!(status, 400, "{name}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_body", "{name}: {answer}");
        assert!(answer["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{name}: {answer}");
    }
    // One byte over the body limit: 413, said in JSON.
    let filler = "x".repeat(MAX_BODY_BYTES);
    let (status, answer) = post_raw(&rig.daemon, json!({"chat_id": "me", "content": filler}).to_string().into()).await;
    assert_eq!(status, 413, "{answer}");
    assert!(answer["error"]["message"].is_string(), "{answer}");
    // Wrong method and route.
    let get = reqwest::get(rig.daemon.url("/v1/messages")).await.unwrap();
    assert_eq!(get.status().as_u16(), 405);
    let (status, answer) = {
        let response = reqwest::Client::new().post(rig.daemon.url("/v1/nothing")).send().await.unwrap();
        (response.status().as_u16(), response.json::<Value>().await.unwrap())
    };
    assert_eq!((status, answer["error"]["code"].as_str()), (404, Some("not_found")));
    assert!(rig.llm.requests().is_empty(), "a refused request reached the model: {:?}", rig.llm.requests());

    // Awkward but valid: answered, each exactly once, in its own session.
    let just_under = "y".repeat(MAX_BODY_BYTES - 200);
    let awkward = [
        ("control characters", json!({"chat_id": "ctl", "content": "a\u{0}b\u{7}c\u{1b}[31m"})),
        ("subject characters", json!({"chat_id": "a.b *>~ é🙂", "content": "tokens"})),
        ("a numeric-looking chat", json!({"chat_id": "-1001234567890", "content": "number"})),
        ("a body just under the limit", json!({"chat_id": "big", "content": just_under})),
    ];
    for (name, body) in awkward {
        let (status, answer) = rig.daemon.post(body.clone()).await;
        assert_eq!(status, 200, "{name}: {answer}\n{}", rig.logs());
        assert_eq!(answer["session_key"], format!("api:{}", body["chat_id"].as_str().unwrap()), "{name}");
        assert!(answer["reply"].as_str().is_some_and(|r| r.starts_with("echo: ")), "{name}: {answer}");
    }
    let sent = rig.llm.requests();
    assert_eq!(sent.len(), 4, "each valid message ran exactly once");
    let first = sent[0].to_string();
    assert!(!first.contains("\\u0000"), "the null byte reached the model: {first}");
    rig.assert_still_healthy().await;
    rig.report("API corpus");
}

#[tokio::test]
async fn api_corpus_embedded() {
    api_corpus(Shape::Embedded).await;
}

#[tokio::test]
async fn api_corpus_nats() {
    api_corpus(Shape::Nats).await;
}
