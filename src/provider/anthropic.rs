//! The Anthropic Messages API: one POST to `{base_url}/v1/messages`, answered as one JSON
//! document or, with `stream`, as server-sent events.

mod stream;
mod wire;

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::http::{key_header_value, redact_password};
use super::http_provider::{HttpProvider, Settings, WireFormat};
use super::images::Attached;
use super::{ChatRequest, ChatResponse, ProviderError};
use stream::StreamAccumulator;
pub use wire::DEFAULT_MAX_TOKENS;

/// The API version this client speaks (sent as `anthropic-version`).
pub const API_VERSION: &str = "2023-06-01";

/// The hosted API, used when no base URL is configured.
pub const DEFAULT_BASE_URL: &str = crate::config::ANTHROPIC_DEFAULT_BASE_URL;

/// How to reach the Messages API.
#[derive(Clone)]
pub struct AnthropicConfig {
    /// The configured entry name, for logs and run records.
    pub name: String,
    /// Without the `/v1` part, e.g. `https://api.anthropic.com`.
    pub base_url: String,
    /// Sent as `x-api-key`.
    pub api_key: Option<String>,
    /// Non-streamed: the whole call. Streamed: until the answer starts, then between events.
    pub request_timeout: Duration,
    /// The models accept images (see [`images`](super::images)).
    pub vision: bool,
    /// Ask for server-sent events.
    pub stream: bool,
    /// `cache_control` breakpoints, and their lifetime; `None`: nothing is cached.
    pub cache: Option<crate::config::CacheTtl>,
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        Self {
            name: "anthropic".into(),
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            request_timeout: Duration::from_secs(120),
            stream: true,
            vision: false,
            cache: Some(crate::config::CacheTtl::FiveMinutes),
        }
    }
}

/// Written by hand so that the key never reaches a log line.
impl fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("name", &self.name)
            .field("base_url", &redact_password(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .field("stream", &self.stream)
            .field("vision", &self.vision)
            .field("cache", &self.cache)
            .finish()
    }
}

/// The Anthropic Messages wire format.
#[derive(Debug)]
pub struct AnthropicWire;

/// A [`Provider`](super::Provider) speaking the Anthropic Messages API.
pub type AnthropicProvider = HttpProvider<AnthropicWire>;

impl WireFormat for AnthropicWire {
    type Config = AnthropicConfig;
    type Body<'a> = wire::WireRequest<'a>;
    type Stream = StreamAccumulator;
    const TYPE_NAME: &'static str = "AnthropicProvider";
    const REQUEST_LOG: &'static str = "messages request";

    fn settings(config: &AnthropicConfig) -> Settings<'_> {
        Settings {
            name: &config.name,
            api_key: config.api_key.as_deref(),
            request_timeout: config.request_timeout,
            stream: config.stream,
            vision: config.vision,
        }
    }

    fn endpoint(config: &AnthropicConfig) -> Result<reqwest::Url, ProviderError> {
        messages_endpoint(&config.base_url)
    }

    /// The API version and the key.
    fn headers(config: &AnthropicConfig) -> Result<HeaderMap, ProviderError> {
        let mut headers = HeaderMap::new();
        headers.insert(HeaderName::from_static("anthropic-version"), HeaderValue::from_static(API_VERSION));
        if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.insert(HeaderName::from_static("x-api-key"), key_header_value(key)?);
        }
        Ok(headers)
    }

    fn encode_request<'a>(
        config: &'a AnthropicConfig,
        request: &'a ChatRequest<'_>,
        stream: bool,
        images: Option<&'a Attached>,
    ) -> wire::WireRequest<'a> {
        wire::encode_request(request, stream, images, config.cache)
    }

    fn decode_response(body: &[u8]) -> Result<ChatResponse, ProviderError> {
        wire::decode_response(body)
    }

    fn error_from_body(status: u16, retry_after: Option<Duration>, body: &[u8], secret: Option<&str>) -> ProviderError {
        wire::error_from_body(status, retry_after, body, secret)
    }
}

fn messages_endpoint(base_url: &str) -> Result<reqwest::Url, ProviderError> {
    // Accept a base URL given with the version too (`…/v1`), as OpenAI-style URLs are.
    let base = base_url.trim_end_matches('/');
    let base = base.strip_suffix("/v1").unwrap_or(base);
    super::http::endpoint(base, "v1/messages")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key() {
        let config = AnthropicConfig { api_key: Some("sk-ant-secret-123".into()), ..AnthropicConfig::default() };
        let provider = AnthropicProvider::new(config.clone()).unwrap();
        for text in [format!("{config:?}"), format!("{provider:?}"), format!("{provider:#?}")] {
            assert!(!text.contains("sk-ant-secret-123") && text.contains("<redacted>"), "{text}");
        }
    }

    #[test]
    fn endpoint_from_base_url() {
        for base in ["https://api.anthropic.com", "https://api.anthropic.com/", "https://api.anthropic.com/v1"] {
            assert_eq!(messages_endpoint(base).unwrap().as_str(), "https://api.anthropic.com/v1/messages");
        }
        assert!(matches!(messages_endpoint("ftp://example.com"), Err(ProviderError::Config(_))));
        assert!(matches!(messages_endpoint("nope"), Err(ProviderError::Config(_))));
    }

    #[test]
    fn a_key_with_a_newline_fails_at_construction_without_echo() {
        let config = AnthropicConfig { api_key: Some("sk-\nevil".into()), ..AnthropicConfig::default() };
        let err = AnthropicProvider::new(config).unwrap_err();
        assert!(matches!(&err, ProviderError::Config(m) if !m.contains("evil")), "{err}");
    }
}
