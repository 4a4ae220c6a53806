//! OpenAI-compatible chat completions: the hosted API and the local servers that copy it
//! (Ollama, llama.cpp, vLLM, LM Studio). One POST to `{base_url}/chat/completions`, answered
//! as one JSON document or, with `stream`, as server-sent events.

mod wire;

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures_util::StreamExt;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::clients::Clients;
use super::http::{is_event_stream, redact_password, sensitive_value, transport_error};
use super::retry_after::parse_retry_after;
use super::sse::{SseEvent, SseParser, StreamEnd, resume_sink};
use super::{ChatRequest, ChatResponse, Provider, ProviderError, TextSink};
use wire::{StreamAccumulator, StreamChunk};

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
    /// Ask for server-sent events. Off for servers that cannot stream tool calls.
    pub stream: bool,
    /// Sent with every request (e.g. `OpenAI-Organization`, or a proxy's own key).
    pub extra_headers: Vec<(String, String)>,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            name: "openai".into(),
            base_url: "https://api.openai.com/v1".into(),
            api_key: None,
            request_timeout: Duration::from_secs(120),
            stream: true,
            extra_headers: Vec::new(),
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
            .field("extra_headers", &header_names)
            .finish()
    }
}

/// A [`Provider`] speaking the OpenAI chat-completions API.
pub struct OpenAiProvider {
    config: OpenAiConfig,
    clients: Clients,
    endpoint: reqwest::Url,
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client is left out: its Debug lists default headers, where the key lives.
        f.debug_struct("OpenAiProvider").field("config", &self.config).finish_non_exhaustive()
    }
}

impl OpenAiProvider {
    /// Checks the URL and headers now, so a bad config fails at start, not on the first call.
    pub fn new(config: OpenAiConfig) -> Result<Self, ProviderError> {
        let endpoint = chat_endpoint(&config.base_url)?;
        let clients = Clients::new(default_headers(&config)?, config.request_timeout)?;
        Ok(Self { config, clients, endpoint })
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
            // Some servers ignore `stream: true` and answer with one JSON document.
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

    /// Reads chunks until `[DONE]` (or the end of the body). The timeout applies to each
    /// wait for the next piece, not to the whole answer.
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
            let events = parser.push(&chunk).map_err(|e| ProviderError::Decode(e.to_string()))?;
            for event in events {
                if event.is_done() {
                    // Do not wait for the connection to close: some servers keep it open.
                    return Ok(acc.end(true));
                }
                self.apply_event(&mut acc, &event, sink)?;
            }
        }
        if let Some(event) = parser.finish().filter(|e| !e.is_done()) {
            self.apply_event(&mut acc, &event, sink)?;
        }
        Ok(acc.end(false))
    }

    fn apply_event(
        &self,
        acc: &mut StreamAccumulator,
        event: &SseEvent,
        sink: Option<TextSink<'_>>,
    ) -> Result<(), ProviderError> {
        if event.data.trim().is_empty() {
            // A keep-alive written as an empty `data:` line.
            return Ok(());
        }
        let chunk: StreamChunk = match event.event.as_deref() {
            None | Some("message") | Some("error") => {
                serde_json::from_str(&event.data).map_err(|e| ProviderError::Decode(format!("stream chunk: {e}")))?
            }
            // Named events (pings and the like) are not part of the OpenAI format.
            Some(_) => return Ok(()),
        };
        if let Some(error) = &chunk.error {
            return Err(wire::error_from_stream(error, self.config.api_key.as_deref()));
        }
        acc.apply(chunk, sink);
        Ok(())
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
        Err(wire::error_from_body(status.as_u16(), retry_after, &body, self.config.api_key.as_deref()))
    }

    fn timeout(&self) -> ProviderError {
        ProviderError::Timeout(self.config.request_timeout)
    }

    fn transport_error(&self, error: reqwest::Error) -> ProviderError {
        transport_error(&self.config.name, &self.endpoint, self.config.request_timeout, error)
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    /// Streams over the wire when the config says so; `stream` (the sink) only decides who
    /// hears the text early. Without wire streaming the sink gets the whole text once.
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
            "chat completion request"
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

fn chat_endpoint(base_url: &str) -> Result<reqwest::Url, ProviderError> {
    let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
    let url = reqwest::Url::parse(&url).map_err(|e| ProviderError::Config(format!("base_url {base_url:?}: {e}")))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(ProviderError::Config(format!("base_url {base_url:?}: scheme {other:?} is not http or https"))),
    }
}

/// The key and the extra headers, marked sensitive so that reqwest never prints them.
fn default_headers(config: &OpenAiConfig) -> Result<HeaderMap, ProviderError> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
        let value = sensitive_value(&format!("Bearer {key}"))
            .ok_or_else(|| ProviderError::Config("api_key contains characters not allowed in a header".into()))?;
        headers.insert(AUTHORIZATION, value);
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
