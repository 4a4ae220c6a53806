//! Embeddings from an OpenAI-compatible `/embeddings` endpoint (OpenAI, Ollama, vLLM,
//! llama.cpp): one POST of `{model, input: [texts]}` to `{base_url}/embeddings`, answered with
//! one vector per text, each naming its input by `index`. Used by memory search
//! (`[memory.embeddings]`, docs/memory.md "Search").

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::{Deserialize, Serialize};

use super::ProviderError;
use super::http::{endpoint, error_chain, key_header_value, redact_password, transport_error};
use super::http_provider::WireFormat;
use super::openai::OpenAiWire;

/// Turns texts into vectors.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// The model the vectors come from: vectors of different models do not compare.
    fn model(&self) -> &str;

    /// One vector per text, in the order of `texts`.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError>;
}

/// Where and how to ask for embeddings.
#[derive(Clone)]
pub struct EmbeddingsSettings {
    /// The provider's configured name, for logs and errors.
    pub name: String,
    /// Up to and including the version, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Sent as a bearer token; local servers usually need none.
    pub api_key: Option<String>,
    pub model: String,
    /// For the whole request.
    pub timeout: Duration,
}

/// Written by hand so the key never reaches a log line.
impl fmt::Debug for EmbeddingsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddingsSettings")
            .field("name", &self.name)
            .field("base_url", &redact_password(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// An [`Embedder`] speaking the OpenAI embeddings API.
pub struct OpenAiEmbeddings {
    settings: EmbeddingsSettings,
    endpoint: reqwest::Url,
    client: reqwest::Client,
}

impl fmt::Debug for OpenAiEmbeddings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbeddings").field("settings", &self.settings).finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct EmbeddingsRequest<'a> {
    model: &'a str,
    input: &'a [String],
}

#[derive(Deserialize)]
struct EmbeddingsAnswer {
    data: Vec<Embedding>,
}

#[derive(Deserialize)]
struct Embedding {
    index: usize,
    embedding: Vector,
}

/// One vector per text, or one per token: llama-cpp-python answers so for a model without
/// pooling (measured with SmolLM2); those are averaged, the pooling such models are used with.
#[derive(Deserialize)]
#[serde(untagged)]
enum Vector {
    Pooled(Vec<f32>),
    PerToken(Vec<Vec<f32>>),
}

impl Vector {
    /// The text's vector; empty when there is none (no tokens, or tokens of unequal length).
    fn pooled(self) -> Vec<f32> {
        match self {
            Vector::Pooled(vector) => vector,
            Vector::PerToken(tokens) => mean(&tokens),
        }
    }
}

fn mean(tokens: &[Vec<f32>]) -> Vec<f32> {
    let Some(width) = tokens.first().map(Vec::len) else { return Vec::new() };
    if tokens.iter().any(|token| token.len() != width) {
        return Vec::new();
    }
    let mut sum = vec![0.0_f32; width];
    for token in tokens {
        sum.iter_mut().zip(token).for_each(|(total, value)| *total += value);
    }
    let count = tokens.len() as f32;
    sum.into_iter().map(|total| total / count).collect()
}

impl OpenAiEmbeddings {
    /// Fails on a base URL that is not http(s) or a key not allowed in a header.
    pub fn new(settings: EmbeddingsSettings) -> Result<Self, ProviderError> {
        let endpoint = endpoint(&settings.base_url, "embeddings")?;
        let mut headers = HeaderMap::new();
        if let Some(key) = settings.api_key.as_deref().filter(|key| !key.is_empty()) {
            headers.insert(AUTHORIZATION, key_header_value(&format!("Bearer {key}"))?);
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(settings.timeout)
            .build()
            .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {}", error_chain(&e))))?;
        Ok(Self { settings, endpoint, client })
    }
}

#[async_trait]
impl Embedder for OpenAiEmbeddings {
    fn model(&self) -> &str {
        &self.settings.model
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ProviderError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let settings = &self.settings;
        tracing::debug!(provider = %settings.name, model = %settings.model, texts = texts.len(), "embeddings request");
        let body = EmbeddingsRequest { model: &settings.model, input: texts };
        let failed = |error| transport_error(&settings.name, &self.endpoint, settings.timeout, error);
        let response = self.client.post(self.endpoint.clone()).json(&body).send().await.map_err(failed)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(failed)?;
        if !status.is_success() {
            return Err(OpenAiWire::error_from_body(status.as_u16(), None, &bytes, settings.api_key.as_deref()));
        }
        vectors(&bytes, texts.len())
    }
}

/// The vectors of an answer, in input order (by `index`, not by their place in `data`); an
/// answer that does not give exactly one vector to each of `count` texts is refused.
fn vectors(body: &[u8], count: usize) -> Result<Vec<Vec<f32>>, ProviderError> {
    let answer: EmbeddingsAnswer =
        serde_json::from_slice(body).map_err(|e| ProviderError::Decode(format!("not an embeddings answer: {e}")))?;
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; count];
    for Embedding { index, embedding } in answer.data {
        let embedding = embedding.pooled();
        let slot = slots
            .get_mut(index)
            .ok_or_else(|| ProviderError::Decode(format!("embedding index {index} for {count} text(s)")))?;
        if embedding.is_empty() || slot.replace(embedding).is_some() {
            return Err(ProviderError::Decode(format!("embedding {index} is empty or given twice")));
        }
    }
    let vectors: Vec<Vec<f32>> = slots.into_iter().flatten().collect();
    if vectors.len() != count {
        return Err(ProviderError::Decode(format!("{} embedding(s) for {count} text(s)", vectors.len())));
    }
    Ok(vectors)
}

#[cfg(test)]
mod tests {
    use switchboard_testkit::fake_llm::embeddings::embed;
    use switchboard_testkit::fake_llm::{FakeLlm, Quirks};

    use super::*;

    fn settings(base_url: String, api_key: Option<&str>) -> EmbeddingsSettings {
        EmbeddingsSettings {
            name: "fake".into(),
            base_url,
            api_key: api_key.map(str::to_owned),
            model: "embed-small".into(),
            timeout: Duration::from_secs(10),
        }
    }

    fn texts(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|text| (*text).to_owned()).collect()
    }

    #[tokio::test]
    async fn vectors_come_back_in_input_order_with_the_key_sent() {
        let llm = FakeLlm::start_with_key("sk-embed-secret").await;
        let embedder = OpenAiEmbeddings::new(settings(llm.base_url(), Some("sk-embed-secret"))).unwrap();
        let inputs = texts(&["car", "a dog", "my house"]);
        // The fake lists vectors last first: only `index` puts them in order.
        let vectors = embedder.embed(&inputs).await.unwrap();
        assert_eq!(vectors, inputs.iter().map(|text| embed(text)).collect::<Vec<_>>());
        let calls = llm.embedding_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].model.as_str(), calls[0].inputs.len()), ("embed-small", 3));
        assert!(embedder.embed(&[]).await.unwrap().is_empty());
        assert_eq!(llm.embedding_calls().len(), 1, "nothing to embed, no request");
    }

    #[tokio::test]
    async fn refusals_and_failures_are_typed_and_never_show_the_key() {
        let llm = FakeLlm::start_with_key("sk-right-key-0000").await;
        let wrong = OpenAiEmbeddings::new(settings(llm.base_url(), Some("sk-wrong-key-1111"))).unwrap();
        let error = wrong.embed(&texts(&["car"])).await.unwrap_err();
        assert!(matches!(error, ProviderError::Http { status: 401, .. }), "{error}");
        assert!(!format!("{error} {error:?} {wrong:?}").contains("sk-wrong-key-1111"));

        let right = OpenAiEmbeddings::new(settings(llm.base_url(), Some("sk-right-key-0000"))).unwrap();
        let error = right.embed(&texts(&[""])).await.unwrap_err();
        assert!(
            matches!(&error, ProviderError::Http { status: 400, message, .. } if message.contains("input")),
            "{error}"
        );
        llm.fail_embeddings(true);
        let error = right.embed(&texts(&["car"])).await.unwrap_err();
        assert!(matches!(error, ProviderError::Http { status: 500, .. }) && error.is_transient(), "{error}");

        let closed = OpenAiEmbeddings::new(settings("http://127.0.0.1:9/v1".into(), None)).unwrap();
        assert!(matches!(closed.embed(&texts(&["car"])).await, Err(ProviderError::Network(_))));
    }

    #[test]
    fn answers_that_do_not_fit_the_inputs_are_refused() {
        let two = br#"{"data":[{"index":1,"embedding":[0.5]},{"index":0,"embedding":[1.0]}]}"#;
        assert_eq!(vectors(two, 2).unwrap(), vec![vec![1.0], vec![0.5]]);
        for body in [
            &br#"{"data":[{"index":0,"embedding":[1.0]}]}"#[..],
            br#"{"data":[{"index":0,"embedding":[1.0]},{"index":0,"embedding":[1.0]}]}"#,
            br#"{"data":[{"index":0,"embedding":[1.0]},{"index":2,"embedding":[1.0]}]}"#,
            br#"{"data":[{"index":0,"embedding":[]},{"index":1,"embedding":[1.0]}]}"#,
            b"<html>",
        ] {
            assert!(matches!(vectors(body, 2), Err(ProviderError::Decode(_))), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn per_token_vectors_are_averaged() {
        let body = br#"{"data":[{"index":0,"embedding":[[1.0,0.0],[0.0,1.0]]},{"index":1,"embedding":[[2.0,4.0]]}]}"#;
        assert_eq!(vectors(body, 2).unwrap(), vec![vec![0.5, 0.5], vec![2.0, 4.0]]);
        let uneven = br#"{"data":[{"index":0,"embedding":[[1.0,0.0],[1.0]]}]}"#;
        assert!(matches!(vectors(uneven, 1), Err(ProviderError::Decode(_))));
    }

    /// llama-cpp-python answers a model without pooling with a vector per token.
    #[tokio::test]
    async fn a_server_answering_per_token_gives_one_vector_per_text() {
        let llm = FakeLlm::start_with_quirks(Quirks::llama_cpp(2048)).await;
        let embedder = OpenAiEmbeddings::new(settings(llm.base_url(), None)).unwrap();
        let got = embedder.embed(&texts(&["a red car", "an automobile"])).await.unwrap();
        assert_eq!(got.len(), 2);
        let cosine = |a: &[f32], b: &[f32]| {
            let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            dot / (a.iter().map(|x| x * x).sum::<f32>().sqrt() * b.iter().map(|x| x * x).sum::<f32>().sqrt())
        };
        assert!(cosine(&got[0], &got[1]) > 0.25, "the pooled vectors of synonyms are close");
    }

    #[test]
    fn bad_settings_fail_at_construction() {
        assert!(matches!(OpenAiEmbeddings::new(settings("ftp://x/v1".into(), None)), Err(ProviderError::Config(_))));
        let error = OpenAiEmbeddings::new(settings("http://x/v1".into(), Some("sk-\nevil"))).unwrap_err();
        assert!(matches!(&error, ProviderError::Config(m) if !m.contains("evil")), "{error}");
        let shown = format!("{:?}", settings("http://me:hunter2@x/v1".into(), Some("sk-secret")));
        assert!(!shown.contains("hunter2") && !shown.contains("sk-secret"), "{shown}");
    }
}
