//! The Anthropic Messages API: one POST to `{base_url}/v1/messages`, answered as one JSON
//! document or, with `stream`, as server-sent events.

mod stream;
mod wire;

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures_util::StreamExt;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::clients::Clients;
use super::http::{is_event_stream, redact_password, sensitive_value, transport_error};
use super::retry_after::parse_retry_after;
use super::sse::{SseParser, StreamEnd, resume_sink};
use super::{ChatRequest, ChatResponse, Provider, ProviderError, TextSink};
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
    /// Ask for server-sent events.
    pub stream: bool,
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        Self {
            name: "anthropic".into(),
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            request_timeout: Duration::from_secs(120),
            stream: true,
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
            .finish()
    }
}

/// A [`Provider`] speaking the Anthropic Messages API.
pub struct AnthropicProvider {
    config: AnthropicConfig,
    clients: Clients,
    endpoint: reqwest::Url,
}

impl fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client is left out: its Debug lists default headers, where the key lives.
        f.debug_struct("AnthropicProvider").field("config", &self.config).finish_non_exhaustive()
    }
}

impl AnthropicProvider {
    /// Checks the URL and key now, so a bad config fails at start, not on the first call.
    pub fn new(config: AnthropicConfig) -> Result<Self, ProviderError> {
        let endpoint = messages_endpoint(&config.base_url)?;
        let clients = Clients::new(default_headers(&config)?, config.request_timeout)?;
        Ok(Self { config, clients, endpoint })
    }

    fn secret(&self) -> Option<&str> {
        self.config.api_key.as_deref()
    }

    async fn complete_once(
        &self,
        client: &reqwest::Client,
        body: &wire::WireRequest<'_>,
        sink: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        let exchange = async {
            let response = self.send(client, body).await?;
            response.bytes().await.map_err(|e| self.transport_error(e))
        };
        let bytes = tokio::time::timeout(self.config.request_timeout, exchange).await.map_err(|_| self.timeout())??;
        decode_whole(&bytes, sink)
    }

    async fn complete_streaming(
        &self,
        request: &ChatRequest,
        sink: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        let limit = self.config.request_timeout;
        let body = wire::encode_request(request, true);
        let response =
            tokio::time::timeout(limit, self.send(&self.clients.get(), &body)).await.map_err(|_| self.timeout())??;
        if !is_event_stream(response.headers()) {
            // A proxy that ignores `stream` answers with one JSON document.
            let bytes = tokio::time::timeout(limit, response.bytes())
                .await
                .map_err(|_| self.timeout())?
                .map_err(|e| self.transport_error(e))?;
            return decode_whole(&bytes, sink);
        }
        match self.read_event_stream(response, sink).await? {
            StreamEnd::Complete(response) => Ok(response),
            StreamEnd::Unfinished { streamed, why } => {
                let sink = resume_sink(&self.config.name, streamed, &why, sink);
                self.complete_once(&self.clients.renew()?, &wire::encode_request(request, false), sink).await
            }
        }
    }

    /// Reads events until `message_stop`. The timeout applies to each wait for the next
    /// piece, not to the whole answer.
    async fn read_event_stream(
        &self,
        response: reqwest::Response,
        sink: Option<TextSink<'_>>,
    ) -> Result<StreamEnd, ProviderError> {
        let mut bytes = response.bytes_stream();
        let mut parser = SseParser::new();
        let mut acc = StreamAccumulator::default();
        let limit = self.config.request_timeout;
        while let Some(chunk) = tokio::time::timeout(limit, bytes.next()).await.map_err(|_| self.timeout())? {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(err) => return Ok(acc.unfinished(format!("the stream broke off: {}", self.transport_error(err)))),
            };
            for event in parser.push(&chunk).map_err(|e| ProviderError::Decode(e.to_string()))? {
                if !event.data.trim().is_empty() && acc.apply(&event.data, sink, self.secret())? {
                    // Do not wait for the connection to close.
                    return Ok(StreamEnd::Complete(acc.finish()));
                }
            }
        }
        if let Some(event) = parser.finish().filter(|e| !e.data.trim().is_empty())
            && acc.apply(&event.data, sink, self.secret())?
        {
            return Ok(StreamEnd::Complete(acc.finish()));
        }
        // Without `message_stop` the answer may be cut short.
        let what = if acc.is_started() { "before message_stop" } else { "before any event" };
        Ok(acc.unfinished(format!("the stream ended {what}")))
    }

    /// POSTs the body; a non-2xx answer becomes the matching error.
    async fn send(
        &self,
        client: &reqwest::Client,
        body: &wire::WireRequest<'_>,
    ) -> Result<reqwest::Response, ProviderError> {
        let response =
            client.post(self.endpoint.clone()).json(body).send().await.map_err(|e| self.transport_error(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = parse_retry_after(response.headers(), SystemTime::now());
        // The status alone still says what went wrong if the body cannot be read.
        let body = response.bytes().await.unwrap_or_default();
        Err(wire::error_from_body(status.as_u16(), retry_after, &body, self.secret()))
    }

    fn timeout(&self) -> ProviderError {
        ProviderError::Timeout(self.config.request_timeout)
    }

    fn transport_error(&self, error: reqwest::Error) -> ProviderError {
        transport_error(&self.config.name, &self.endpoint, self.config.request_timeout, error)
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    async fn complete(
        &self,
        request: &ChatRequest,
        stream: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        tracing::debug!(
            provider = %self.config.name,
            model = %request.model,
            messages = request.messages.len(),
            tools = request.tools.len(),
            stream = self.config.stream,
            "messages request"
        );
        if self.config.stream {
            self.complete_streaming(request, stream).await
        } else {
            self.complete_once(&self.clients.get(), &wire::encode_request(request, false), stream).await
        }
    }
}

/// Decodes a whole JSON answer; a sink, if any, hears the text at once.
fn decode_whole(body: &[u8], sink: Option<TextSink<'_>>) -> Result<ChatResponse, ProviderError> {
    let response = wire::decode_response(body)?;
    if let Some(sink) = sink
        && !response.content.is_empty()
    {
        sink(&response.content);
    }
    Ok(response)
}

fn messages_endpoint(base_url: &str) -> Result<reqwest::Url, ProviderError> {
    // Accept a base URL given with the version too (`…/v1`), as OpenAI-style URLs are.
    let base = base_url.trim_end_matches('/');
    let base = base.strip_suffix("/v1").unwrap_or(base);
    let url = reqwest::Url::parse(&format!("{base}/v1/messages"))
        .map_err(|e| ProviderError::Config(format!("base_url {:?}: {e}", redact_password(base_url))))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(ProviderError::Config(format!("base_url: scheme {other:?} is not http or https"))),
    }
}

fn default_headers(config: &AnthropicConfig) -> Result<HeaderMap, ProviderError> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(HeaderName::from_static("anthropic-version"), HeaderValue::from_static(API_VERSION));
    if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
        let value = sensitive_value(key)
            .ok_or_else(|| ProviderError::Config("api_key contains characters not allowed in a header".into()))?;
        headers.insert(HeaderName::from_static("x-api-key"), value);
    }
    Ok(headers)
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
