//! OpenAI-compatible chat completions: the hosted API and the local servers that copy it
//! (Ollama, llama.cpp, vLLM, LM Studio). One POST to `{base_url}/chat/completions`, answered
//! as one JSON document or, with `stream`, as server-sent events.

mod wire;

use std::fmt;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName};

use super::http::{key_header_value, redact_password, sensitive_value};
use super::http_provider::{HttpProvider, Settings, WireFormat};
use super::images::Attached;
use super::{ChatRequest, ChatResponse, ProviderError};
use wire::StreamAccumulator;

/// How to reach one OpenAI-compatible endpoint.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// The configured entry name, for logs and run records.
    pub name: String,
    /// Up to and including the version, e.g. `https://api.openai.com/v1` or
    /// `http://localhost:11434/v1`.
    pub base_url: String,
    /// Sent as a bearer token. Local servers usually need none.
    pub api_key: Option<String>,
    /// Non-streamed: the whole call. Streamed: until the answer starts, then between chunks,
    /// so a long answer that keeps flowing is not cut off.
    pub request_timeout: Duration,
    /// The models accept images (see [`images`](super::images)).
    pub vision: bool,
    /// Ask for server-sent events. Off for servers that cannot stream tool calls.
    pub stream: bool,
    /// Sent with every request (e.g. `OpenAI-Organization`, or a proxy's own key).
    pub extra_headers: Vec<(String, String)>,
    /// What requests carry beyond the common fields, for this server's prompt cache.
    pub hints: OpenAiHints,
}

/// Fields only some OpenAI-compatible servers take (others may answer an unknown field with
/// 400), set from `prompt_cache` and the server's address (see [`OpenAiHints::for_server`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenAiHints {
    /// `prompt_cache_key`: the conversation's key, so its requests reach the same cache.
    pub prompt_cache_key: bool,
    /// `cache_prompt: true`: llama.cpp's server keeps the prompt's state for the next request.
    pub cache_prompt: bool,
    /// The answer limit as `max_completion_tokens`: api.openai.com's reasoning models refuse
    /// `max_tokens`; other servers know only `max_tokens`.
    pub max_completion_tokens: bool,
}

impl OpenAiHints {
    /// The hints for the server at `base_url` under `prompt_cache`.
    pub fn for_server(base_url: &str, prompt_cache: crate::config::PromptCache) -> OpenAiHints {
        use crate::config::PromptCache;
        let hosted = reqwest::Url::parse(base_url).is_ok_and(|url| url.host_str() == Some("api.openai.com"));
        let (prompt_cache_key, cache_prompt) = match prompt_cache {
            PromptCache::Auto => (hosted, false),
            PromptCache::Openai => (true, false),
            PromptCache::LlamaCpp => (false, true),
            PromptCache::Off => (false, false),
        };
        OpenAiHints { prompt_cache_key, cache_prompt, max_completion_tokens: hosted }
    }
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            name: "openai".into(),
            base_url: "https://api.openai.com/v1".into(),
            api_key: None,
            request_timeout: Duration::from_secs(120),
            stream: true,
            vision: false,
            extra_headers: Vec::new(),
            hints: OpenAiHints::for_server("https://api.openai.com/v1", crate::config::PromptCache::Auto),
        }
    }
}

/// Written by hand so that neither the key nor header values (which may be keys too) ever
/// reach a log line.
impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.extra_headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("OpenAiConfig")
            .field("name", &self.name)
            .field("base_url", &redact_password(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .field("stream", &self.stream)
            .field("vision", &self.vision)
            .field("extra_headers", &header_names)
            .field("hints", &self.hints)
            .finish()
    }
}

/// The OpenAI chat-completions wire format.
#[derive(Debug)]
pub struct OpenAiWire;

/// A [`Provider`](super::Provider) speaking the OpenAI chat-completions API.
pub type OpenAiProvider = HttpProvider<OpenAiWire>;

impl WireFormat for OpenAiWire {
    type Config = OpenAiConfig;
    type Body<'a> = wire::WireRequest<'a>;
    type Stream = StreamAccumulator;
    const TYPE_NAME: &'static str = "OpenAiProvider";
    const REQUEST_LOG: &'static str = "chat completion request";

    fn settings(config: &OpenAiConfig) -> Settings<'_> {
        Settings {
            name: &config.name,
            api_key: config.api_key.as_deref(),
            request_timeout: config.request_timeout,
            stream: config.stream,
            vision: config.vision,
        }
    }

    fn endpoint(config: &OpenAiConfig) -> Result<reqwest::Url, ProviderError> {
        chat_endpoint(&config.base_url)
    }

    /// The key and the extra headers.
    fn headers(config: &OpenAiConfig) -> Result<HeaderMap, ProviderError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.insert(AUTHORIZATION, key_header_value(&format!("Bearer {key}"))?);
        }
        for (name, value) in &config.extra_headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ProviderError::Config(format!("extra header name {name:?} is not valid")))?;
            let value = sensitive_value(value).ok_or_else(|| {
                ProviderError::Config(format!("extra header {name:?} has a value not allowed in a header"))
            })?;
            headers.insert(header, value);
        }
        Ok(headers)
    }

    fn encode_request<'a>(
        config: &'a OpenAiConfig,
        request: &'a ChatRequest<'_>,
        stream: bool,
        images: Option<&'a Attached>,
    ) -> wire::WireRequest<'a> {
        wire::encode_request(request, stream, images, config.hints)
    }

    fn decode_response(body: &[u8]) -> Result<ChatResponse, ProviderError> {
        wire::decode_response(body)
    }

    fn error_from_body(status: u16, retry_after: Option<Duration>, body: &[u8], secret: Option<&str>) -> ProviderError {
        wire::error_from_body(status, retry_after, body, secret)
    }
}

fn chat_endpoint(base_url: &str) -> Result<reqwest::Url, ProviderError> {
    super::http::endpoint(base_url, "chat/completions")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key_or_header_values() {
        let config = OpenAiConfig {
            api_key: Some("sk-secret-123".into()),
            extra_headers: vec![("x-proxy-key".into(), "proxy-secret-456".into())],
            ..OpenAiConfig::default()
        };
        let provider = OpenAiProvider::new(config.clone()).unwrap();
        for text in [format!("{config:?}"), format!("{provider:?}"), format!("{provider:#?}")] {
            assert!(!text.contains("sk-secret-123") && !text.contains("proxy-secret-456"), "{text}");
            assert!(text.contains("<redacted>") && text.contains("x-proxy-key"), "{text}");
        }
    }

    #[test]
    fn debug_hides_a_password_in_the_base_url() {
        let config = OpenAiConfig { base_url: "http://me:hunter2@proxy.local/v1".into(), ..OpenAiConfig::default() };
        let text = format!("{config:?}");
        assert!(!text.contains("hunter2") && text.contains("proxy.local"), "{text}");
    }

    #[test]
    fn endpoint_from_base_url() {
        assert_eq!(
            chat_endpoint("http://localhost:11434/v1/").unwrap().as_str(),
            "http://localhost:11434/v1/chat/completions"
        );
        assert_eq!(
            chat_endpoint("https://api.openai.com/v1").unwrap().as_str(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert!(matches!(chat_endpoint("ftp://example.com/v1"), Err(ProviderError::Config(_))));
        assert!(matches!(chat_endpoint("not a url"), Err(ProviderError::Config(_))));
    }

    #[test]
    fn bad_headers_fail_at_construction() {
        let bad_key = OpenAiConfig { api_key: Some("sk-\nevil".into()), ..OpenAiConfig::default() };
        let err = OpenAiProvider::new(bad_key).unwrap_err();
        assert!(matches!(&err, ProviderError::Config(m) if !m.contains("evil")), "{err}");
        let bad_name = OpenAiConfig { extra_headers: vec![("bad name".into(), "v".into())], ..OpenAiConfig::default() };
        assert!(matches!(OpenAiProvider::new(bad_name), Err(ProviderError::Config(_))));
    }
}
