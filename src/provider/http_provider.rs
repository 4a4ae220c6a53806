//! The one HTTP provider: sends a request to a model API, answered as one JSON document or as
//! server-sent events, and turns failures into [`ProviderError`]s. What differs between APIs
//! (the body, the headers, the answer's shape, the stream's events, the error bodies) is a
//! [`WireFormat`]; OpenAI-compatible chat completions and Anthropic Messages are the two.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures_util::StreamExt;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Serialize;

use super::clients::Clients;
use super::http::{is_event_stream, transport_error};
use super::images::{self, Attached};
use super::retry_after::parse_retry_after;
use super::sse::{NO_DATA, SseEvent, SseParser, StreamEnd, resume_sink};
use super::{ChatRequest, ChatResponse, Provider, ProviderError, TextSink};

/// What the provider core needs to know of a wire format's configuration.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    /// The configured entry name, for logs and run records.
    pub name: &'a str,
    /// Blanked out of every error message, should the provider echo it.
    pub api_key: Option<&'a str>,
    /// Non-streamed: the whole call. Streamed: until the answer starts, then between events,
    /// so a long answer that keeps flowing is not cut off.
    pub request_timeout: Duration,
    /// Ask for server-sent events.
    pub stream: bool,
    /// The models accept images: the newest user message's images go along as image parts.
    pub vision: bool,
}

/// One model API's wire format: a marker type, never instantiated.
///
/// The types it names (request bodies, stream decoders, [`SseEvent`], [`StreamEnd`]) are
/// declared `pub` inside private modules: the provider aliases make them reachable from
/// outside the crate, yet no one outside the provider module can name them.
pub trait WireFormat: Send + Sync + 'static {
    /// How to reach the API, as configured.
    type Config: fmt::Debug + Send + Sync;
    /// The request body, borrowing from the request it encodes.
    type Body<'a>: Serialize + Send + Sync;
    /// Builds an answer from stream events.
    type Stream: StreamDecoder;
    /// The provider's type name in `Debug` output.
    const TYPE_NAME: &'static str;
    /// The log line of each request.
    const REQUEST_LOG: &'static str;

    fn settings(config: &Self::Config) -> Settings<'_>;
    /// The URL every request is POSTed to.
    fn endpoint(config: &Self::Config) -> Result<reqwest::Url, ProviderError>;
    /// Sent with every request besides `Content-Type`; keys marked sensitive so that reqwest
    /// never prints them.
    fn headers(config: &Self::Config) -> Result<HeaderMap, ProviderError>;
    /// The body of `request` for the API `config` names; `images`, when given, are those of
    /// one of its messages, read for a vision model.
    fn encode_request<'a>(
        config: &'a Self::Config,
        request: &'a ChatRequest<'_>,
        stream: bool,
        images: Option<&'a Attached>,
    ) -> Self::Body<'a>;
    /// Decodes a whole (non-streamed) answer.
    fn decode_response(body: &[u8]) -> Result<ChatResponse, ProviderError>;
    /// Maps a non-2xx answer to an error, with the provider's own message; `secret` is blanked
    /// out of it.
    fn error_from_body(status: u16, retry_after: Option<Duration>, body: &[u8], secret: Option<&str>) -> ProviderError;
}

/// Builds one answer from the events of one stream.
pub trait StreamDecoder: Default + Send {
    /// Applies one event; `Some` once the stream said the answer is over.
    fn apply_event(
        &mut self,
        event: &SseEvent,
        sink: Option<TextSink<'_>>,
        secret: Option<&str>,
    ) -> Result<Option<StreamEnd>, ProviderError>;

    /// The event the body's end flushed, its terminating blank line never sent.
    fn apply_trailing_event(
        &mut self,
        event: &SseEvent,
        sink: Option<TextSink<'_>>,
        secret: Option<&str>,
    ) -> Result<Option<StreamEnd>, ProviderError> {
        self.apply_event(event, sink, secret)
    }

    /// The body closed without the end the format marks.
    fn body_closed(self) -> StreamEnd;

    /// The stream broke off (`why`) before the answer was whole.
    fn unfinished(self, why: String) -> StreamEnd;
}

/// A [`Provider`] speaking the wire format `W` over HTTP.
pub struct HttpProvider<W: WireFormat> {
    config: W::Config,
    clients: Clients,
    endpoint: reqwest::Url,
    /// Requests with tools go unstreamed: the server streams none (see `stop_streaming_tools`).
    tools_unstreamed: AtomicBool,
    format: PhantomData<W>,
}

impl<W: WireFormat> fmt::Debug for HttpProvider<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client is left out: its Debug lists default headers, where the key lives.
        f.debug_struct(W::TYPE_NAME).field("config", &self.config).finish_non_exhaustive()
    }
}

impl<W: WireFormat> HttpProvider<W> {
    /// Checks the URL and headers now, so a bad config fails at start, not on the first call.
    pub fn new(config: W::Config) -> Result<Self, ProviderError> {
        let endpoint = W::endpoint(&config)?;
        let mut headers = W::headers(&config)?;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let clients = Clients::new(headers, W::settings(&config).request_timeout)?;
        Ok(Self { config, clients, endpoint, tools_unstreamed: AtomicBool::new(false), format: PhantomData })
    }

    fn settings(&self) -> Settings<'_> {
        W::settings(&self.config)
    }

    async fn complete_once(
        &self,
        client: &reqwest::Client,
        body: &W::Body<'_>,
        sink: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        let exchange = async {
            let response = self.send(client, body).await?;
            response.bytes().await.map_err(|e| self.transport_error(e))
        };
        let limit = self.settings().request_timeout;
        let bytes = tokio::time::timeout(limit, exchange).await.map_err(|_| self.timeout())??;
        decode_whole::<W>(&bytes, sink)
    }

    async fn complete_streaming(
        &self,
        request: &ChatRequest<'_>,
        images: Option<&Attached>,
        sink: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        let limit = self.settings().request_timeout;
        let body = W::encode_request(&self.config, request, true, images);
        let response =
            tokio::time::timeout(limit, self.send(&self.clients.get(), &body)).await.map_err(|_| self.timeout())??;
        if !is_event_stream(response.headers()) {
            // Some servers and proxies ignore `stream` and answer with one JSON document.
            let bytes = tokio::time::timeout(limit, response.bytes())
                .await
                .map_err(|_| self.timeout())?
                .map_err(|e| self.transport_error(e))?;
            return decode_whole::<W>(&bytes, sink);
        }
        match self.read_event_stream(response, sink).await? {
            StreamEnd::Complete(response) => Ok(response),
            StreamEnd::Unfinished { streamed, why } => {
                let sink = resume_sink(self.settings().name, streamed, &why, sink);
                let body = W::encode_request(&self.config, request, false, images);
                let answer = self.complete_once(&self.clients.renew()?, &body, sink).await;
                if answer.is_ok() && why == NO_DATA && !request.tools.is_empty() {
                    self.stop_streaming_tools();
                }
                answer
            }
        }
    }

    /// Reads events until the format's end marker (or the end of the body). The timeout
    /// applies to each wait for the next piece, not to the whole answer.
    async fn read_event_stream(
        &self,
        response: reqwest::Response,
        sink: Option<TextSink<'_>>,
    ) -> Result<StreamEnd, ProviderError> {
        let mut bytes = response.bytes_stream();
        let mut parser = SseParser::new();
        let mut decoder = W::Stream::default();
        let Settings { api_key: secret, request_timeout: limit, .. } = self.settings();
        while let Some(chunk) = tokio::time::timeout(limit, bytes.next()).await.map_err(|_| self.timeout())? {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(err) => {
                    return Ok(decoder.unfinished(format!("the stream broke off: {}", self.transport_error(err))));
                }
            };
            for event in parser.push(&chunk).map_err(|e| ProviderError::Decode(e.to_string()))? {
                // Do not wait for the connection to close once the answer is over: some
                // servers keep it open.
                if let Some(end) = decoder.apply_event(&event, sink, secret)? {
                    return Ok(end);
                }
            }
        }
        if let Some(event) = parser.finish()
            && let Some(end) = decoder.apply_trailing_event(&event, sink, secret)?
        {
            return Ok(end);
        }
        Ok(decoder.body_closed())
    }

    /// POSTs the body; a non-2xx answer becomes the matching error.
    async fn send(&self, client: &reqwest::Client, body: &W::Body<'_>) -> Result<reqwest::Response, ProviderError> {
        let response =
            client.post(self.endpoint.clone()).json(body).send().await.map_err(|e| self.transport_error(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = parse_retry_after(response.headers(), SystemTime::now());
        // The status alone still says what went wrong if the body cannot be read.
        let body = response.bytes().await.unwrap_or_default();
        Err(W::error_from_body(status.as_u16(), retry_after, &body, self.settings().api_key))
    }

    /// A server that sends an empty stream for a request with tools, and answers the same
    /// request unstreamed (llama-cpp-python: "Automatic streaming tool choice is not
    /// supported"), gets such requests unstreamed from now on: one wasted request, not one a
    /// turn.
    fn stop_streaming_tools(&self) {
        if !self.tools_unstreamed.swap(true, Ordering::Relaxed) {
            tracing::info!(
                provider = %self.settings().name,
                "the model server streams no answer to a request with tools but answers it unstreamed; \
                 requests with tools are sent unstreamed from now on"
            );
        }
    }

    fn timeout(&self) -> ProviderError {
        ProviderError::Timeout(self.settings().request_timeout)
    }

    fn transport_error(&self, error: reqwest::Error) -> ProviderError {
        let settings = self.settings();
        transport_error(settings.name, &self.endpoint, settings.request_timeout, error)
    }
}

#[async_trait]
impl<W: WireFormat> Provider for HttpProvider<W> {
    fn name(&self) -> &str {
        self.settings().name
    }

    /// Streams over the wire when the config says so; `stream` (the sink) only decides who
    /// hears the text early. Without wire streaming the sink gets the whole text once.
    async fn complete(
        &self,
        request: &ChatRequest<'_>,
        stream: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError> {
        let settings = self.settings();
        tracing::debug!(
            provider = %settings.name,
            model = %request.model,
            messages = request.messages.len(),
            tools = request.tools.len(),
            stream = settings.stream,
            "{}",
            W::REQUEST_LOG
        );
        let images = if settings.vision { images::attach(&request.messages).await } else { None };
        let images = images.as_ref();
        let unstreamed_tools = !request.tools.is_empty() && self.tools_unstreamed.load(Ordering::Relaxed);
        if settings.stream && !unstreamed_tools {
            self.complete_streaming(request, images, stream).await
        } else {
            self.complete_once(&self.clients.get(), &W::encode_request(&self.config, request, false, images), stream)
                .await
        }
    }
}

/// Decodes a whole JSON answer; a sink, if any, hears the text at once.
fn decode_whole<W: WireFormat>(body: &[u8], sink: Option<TextSink<'_>>) -> Result<ChatResponse, ProviderError> {
    let response = W::decode_response(body)?;
    if let Some(sink) = sink
        && !response.content.is_empty()
    {
        sink(&response.content);
    }
    Ok(response)
}
