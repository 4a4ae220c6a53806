//! `POST /v1/embeddings` of [`FakeLlm`]: OpenAI's request and answer shapes, with an embedding
//! that is deterministic and a little semantic, so tests can tell a ranking by meaning from one
//! by shared words.
//!
//! Each word of a text (lowercase letters and digits) adds 1 to one dimension: the words of a
//! group of synonyms ([`SYNONYMS`]: `car`, `automobile`, `vehicle`, …) all to the group's
//! dimension, every other word to one of [`HASHED_DIMENSIONS`] picked by a hash of the word.
//! The vector is then normalised. So "car" and "I drive an automobile" are similar, and texts
//! without a word (or synonym) in common are not (unless two words happen to share a hash).
//!
//! [`FakeLlm`]: super::FakeLlm

use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Shared, error_body, key_refusal};
use crate::fake_server::{json_or_text, json_status};

/// Groups of words the fake embeds alike, one dimension each.
pub const SYNONYMS: &[&[&str]] = &[
    &["car", "cars", "automobile", "automobiles", "vehicle", "vehicles", "auto"],
    &["dog", "dogs", "puppy", "puppies", "hound"],
    &["house", "home", "apartment", "flat"],
    &["doctor", "physician", "dentist", "clinic"],
    &["money", "cash", "payment", "salary"],
    &["boat", "ship", "yacht", "sailing"],
];

/// Dimensions for the words of no group.
pub const HASHED_DIMENSIONS: usize = 58;

/// One call of `/v1/embeddings` the fake answered or refused.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingCall {
    /// The `model` asked for (empty when missing).
    pub model: String,
    /// The texts, in order (`input` as a string counts as one).
    pub inputs: Vec<String>,
}

/// Whether the endpoint answers 500 (see [`super::FakeLlm::fail_embeddings`]).
#[derive(Default)]
pub(super) struct Failing(AtomicBool);

impl Failing {
    pub(super) fn set(&self, failing: bool) {
        self.0.store(failing, Ordering::SeqCst);
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The fake's embedding of `text` (see the module docs): unit length, or all zeros for a text
/// without words.
pub fn embed(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0_f32; SYNONYMS.len() + HASHED_DIMENSIONS];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        let dimension = match SYNONYMS.iter().position(|group| group.contains(&word.as_str())) {
            Some(group) => group,
            None => SYNONYMS.len() + fnv1a(&word) % HASHED_DIMENSIONS,
        };
        vector[dimension] += 1.0;
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

/// One vector per word, as a server without pooling gives one per token.
fn per_token(text: &str) -> Vec<Vec<f32>> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(embed).collect()
}

fn fnv1a(word: &str) -> usize {
    let hash = word
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3));
    usize::try_from(hash % 1_000_003).unwrap_or(0)
}

pub(super) async fn embeddings(
    State(shared): State<std::sync::Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = json_or_text(&body);
    let model = request.get("model").and_then(Value::as_str).unwrap_or_default().to_owned();
    let inputs = inputs(&request);
    shared.embedding_calls.record(EmbeddingCall { model: model.clone(), inputs: inputs.clone().unwrap_or_default() });
    if let Some(refusal) = key_refusal(&shared, &headers) {
        return refusal;
    }
    if shared.embeddings_failing.get() {
        return json_status(500, None, error_body("The server had an error.", "server_error", "internal_error"));
    }
    if model.is_empty() {
        return invalid("you must provide a model parameter");
    }
    let inputs = match inputs {
        Some(inputs) if !inputs.is_empty() && inputs.iter().all(|text| !text.is_empty()) => inputs,
        Some(_) => return invalid("'$.input' is invalid: an input must not be empty"),
        None => return invalid("'$.input' must be a string or an array of strings"),
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let embedding = match shared.quirks.per_token_embeddings {
                true => json!(per_token(text)),
                false => json!(embed(text)),
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let tokens: usize = inputs.iter().map(|text| text.split_whitespace().count()).sum();
    // Each embedding says which input it is (`index`); the fake lists them last first, so a
    // client that relies on their order instead gets them wrong.
    let data: Vec<Value> = data.into_iter().rev().collect();
    axum::Json(json!({
        "object": "list", "data": data, "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response()
}

/// `input` as OpenAI takes text: a string or an array of strings.
fn inputs(request: &Value) -> Option<Vec<String>> {
    match request.get("input")? {
        Value::String(text) => Some(vec![text.clone()]),
        Value::Array(items) => items.iter().map(|item| item.as_str().map(str::to_owned)).collect(),
        _ => None,
    }
}

/// A 400 in OpenAI's shape, `code` null as OpenAI sends for these.
fn invalid(message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
    json_status(400, None, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_llm::FakeLlm;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn synonyms_are_close_and_unrelated_words_are_not() {
        let car = embed("car");
        assert!(cosine(&car, &embed("I drive an automobile from 1998")) > 0.3);
        assert!(cosine(&car, &embed("Anna's birthday is in May")) < 0.01);
        assert!((cosine(&car, &car) - 1.0).abs() < 1e-6);
        assert!(embed("!!").iter().all(|x| *x == 0.0));
    }

    #[tokio::test]
    async fn answers_in_openais_shape_and_records_calls() {
        let llm = FakeLlm::start().await;
        let url = format!("{}/embeddings", llm.base_url());
        let client = reqwest::Client::new();
        let post = |body: Value| client.post(&url).json(&body).send();
        let answer: Value = post(json!({"model": "m", "input": ["car", "dog"]})).await.unwrap().json().await.unwrap();
        let data = answer["data"].as_array().unwrap();
        assert_eq!(data.len(), 2);
        let dog = data.iter().find(|item| item["index"] == 1).unwrap();
        assert_eq!(dog["embedding"].as_array().unwrap().len(), SYNONYMS.len() + HASHED_DIMENSIONS);
        let one = post(json!({"model": "m", "input": "car"})).await.unwrap();
        assert_eq!(one.status(), 200);

        let empty = post(json!({"model": "m", "input": []})).await.unwrap();
        assert_eq!(empty.status(), 400);
        let error: Value = empty.json().await.unwrap();
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert!(error["error"]["code"].is_null() && error["error"]["param"].is_null());
        assert_eq!(post(json!({"input": "car"})).await.unwrap().status(), 400);
        llm.fail_embeddings(true);
        assert_eq!(post(json!({"model": "m", "input": "car"})).await.unwrap().status(), 500);

        let calls = llm.embedding_calls();
        assert_eq!(calls.len(), 5);
        assert_eq!(calls[0], EmbeddingCall { model: "m".into(), inputs: vec!["car".into(), "dog".into()] });
        assert!(llm.requests().is_empty(), "embeddings are not chat requests");
    }
}
