//! `web_fetch`: reads a web page as text, behind the SSRF [`Guard`].
//!
//! Each request gets its own client, pinned to the addresses the guard checked and unable to
//! resolve any other name, with redirects off: redirects are followed here, each new URL
//! checked again. Bodies are read up to a byte cap (decoded bytes, for gzip: see `body`), the whole fetch is under a time cap, and
//! the text is cut after `max_chars` characters, head only: the start of a page (title,
//! introduction) is what matters, its end is mostly footer.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::dns::{Name, Resolve, Resolving};
use reqwest::header::{CONTENT_TYPE, LOCATION};
use reqwest::{Client, Response, StatusCode, Url, redirect};
use serde_json::{Value, json};

use super::guard::{Guard, Resolver, SystemResolver, Target};
use super::html;
use crate::config::AllowList;
use crate::tools::{Tool, ToolContext, ToolError, required_str};

/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 5;

/// web_fetch's limits and allow-list.
#[derive(Debug, Clone)]
pub struct FetchSettings {
    pub allow_private: AllowList,
    /// Bytes of body read at most; the rest is not downloaded.
    pub max_bytes: usize,
    /// The whole fetch, redirects included.
    pub timeout: Duration,
    /// Characters of text returned unless the call asks for fewer (or more).
    pub max_chars: usize,
}

/// Fetches a URL and returns its readable text.
pub struct WebFetch {
    guard: Guard,
    settings: FetchSettings,
}

impl WebFetch {
    pub fn new(settings: FetchSettings) -> Self {
        Self::with_resolver(settings, Arc::new(SystemResolver))
    }

    /// With another resolver, so tests can make `public.test` resolve to 127.0.0.1.
    pub fn with_resolver(settings: FetchSettings, resolver: Arc<dyn Resolver>) -> Self {
        Self { guard: Guard::new(settings.allow_private.clone(), resolver), settings }
    }
}

#[async_trait]
impl Tool for WebFetch {
    fn name(&self) -> &str {
        "web_fetch"
    }

    fn description(&self) -> &str {
        "Fetches an http(s) URL and returns its text: HTML converted to readable text (with link targets when \
         links is true), plain text and JSON as they are. Private and local addresses are refused."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The http:// or https:// URL"},
                "max_chars": {"type": "integer", "minimum": 1, "description": format!(
                    "Characters of text to return at most; default {}", self.settings.max_chars)},
                "links": {"type": "boolean", "description": "Keep link targets as `text (url)`; default false"}
            },
            "required": ["url"]
        })
    }

    /// Enough for the fetch's own time cap to fire first and be reported as such.
    fn timeout(&self) -> Option<Duration> {
        Some(self.settings.timeout + Duration::from_secs(5))
    }

    async fn execute(&self, arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let url = required_str(&arguments, "url")?;
        let url = Url::parse(url.trim()).map_err(|error| ToolError::InvalidArguments(format!("bad url: {error}")))?;
        let max_chars = match arguments.get("max_chars") {
            None | Some(Value::Null) => self.settings.max_chars,
            Some(value) => value
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| ToolError::InvalidArguments("max_chars must be a positive integer".into()))?,
        };
        let links = arguments.get("links").and_then(Value::as_bool).unwrap_or(false);
        let limit = self.settings.timeout;
        let fetched = tokio::time::timeout(limit, self.fetch(url.clone()))
            .await
            .map_err(|_| ToolError::Transient(format!("fetching {url} took longer than {}s", limit.as_secs_f32())))??;
        Ok(render(fetched, max_chars, links))
    }
}

/// A body as received.
struct Fetched {
    url: Url,
    kind: Kind,
    body: String,
    /// The body was longer than the byte cap and was cut there.
    cut_at_bytes: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Text,
    Json,
}

impl WebFetch {
    /// Follows redirects by hand, checking every URL with the guard.
    async fn fetch(&self, mut url: Url) -> Result<Fetched, ToolError> {
        for _ in 0..=MAX_REDIRECTS {
            let target = self.guard.check(&url).await?;
            let response = send(&url, &target, self.settings.timeout).await?;
            match redirect_target(&url, &response)? {
                Some(next) => {
                    tracing::debug!(from = %url, to = %next, "web_fetch follows a redirect");
                    url = next;
                }
                None => return self.read(url, response).await,
            }
        }
        Err(ToolError::Failed(format!("more than {MAX_REDIRECTS} redirects; the last went to {url}")))
    }

    async fn read(&self, url: Url, response: Response) -> Result<Fetched, ToolError> {
        let status = response.status();
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            return Err(ToolError::Transient(format!("{url} answered HTTP {status}")));
        }
        if !status.is_success() {
            return Err(ToolError::Failed(format!("{url} answered HTTP {status}")));
        }
        let content_type = header_text(&response, CONTENT_TYPE);
        let kind = classify(&content_type).ok_or_else(|| {
            ToolError::Failed(format!("{url} is {content_type}; web_fetch reads only HTML, plain text and JSON"))
        })?;
        let body = super::body::read_capped(response, self.settings.max_bytes).await?;
        Ok(Fetched { url, kind, body: decode(&body.bytes, &content_type), cut_at_bytes: body.cut_at_bytes })
    }
}

/// One request to `target`'s checked addresses, and nowhere else.
async fn send(url: &Url, target: &Target, timeout: Duration) -> Result<Response, ToolError> {
    let mut builder = Client::builder()
        .redirect(redirect::Policy::none())
        // A proxy would resolve the name again, on its own: the check would mean nothing.
        .no_proxy()
        .dns_resolver(Arc::new(NoDns))
        // The caller's time cap covers the whole fetch, redirects and body included.
        .connect_timeout(timeout)
        // The body is decoded here, within the size cap (a gzip bomb stops at the cap): the
        // client must hand it over as sent, whatever compression other parts of the build enable.
        .no_gzip()
        .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION"), " (web_fetch)"));
    if let Some(host) = &target.host {
        builder = builder.resolve_to_addrs(host, &target.addrs);
    }
    let client = builder.build().map_err(|error| ToolError::Failed(format!("cannot build an HTTP client: {error}")))?;
    client
        .get(url.clone())
        .header("Accept", "text/html, application/xhtml+xml, text/plain, application/json;q=0.9, */*;q=0.1")
        // Decoded in `body`, within the byte cap.
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .map_err(|error| super::body::request_error(url, &error))
}

/// The next URL when `response` is a redirect.
fn redirect_target(url: &Url, response: &Response) -> Result<Option<Url>, ToolError> {
    if !response.status().is_redirection() || response.status() == StatusCode::NOT_MODIFIED {
        return Ok(None);
    }
    let location = header_text(response, LOCATION);
    if location.is_empty() {
        return Err(ToolError::Failed(format!("{url} redirected (HTTP {}) without a Location", response.status())));
    }
    url.join(&location)
        .map(Some)
        .map_err(|error| ToolError::Failed(format!("{url} redirected to a bad URL {location:?}: {error}")))
}

/// A resolver that resolves nothing: every name the client may use is pinned with
/// `resolve_to_addrs`, so a lookup here would be a second, unchecked one.
struct NoDns;

impl Resolve for NoDns {
    fn resolve(&self, name: Name) -> Resolving {
        let message = format!("web_fetch does not resolve {} again after checking it", name.as_str());
        Box::pin(async move { Err(message.into()) })
    }
}

fn header_text(response: &Response, name: reqwest::header::HeaderName) -> String {
    response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().trim().to_owned()
}

/// What the content type says the body is; `None` for what web_fetch does not read. A
/// missing type is read as text (decoding replaces what is not UTF-8).
fn classify(content_type: &str) -> Option<Kind> {
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    match essence.as_str() {
        "text/html" | "application/xhtml+xml" => Some(Kind::Html),
        "application/json" => Some(Kind::Json),
        _ if essence.ends_with("+json") => Some(Kind::Json),
        "" | "text/plain" | "text/markdown" | "text/csv" | "text/xml" | "application/xml" => Some(Kind::Text),
        _ => None,
    }
}

/// UTF-8, or Latin-1 when the content type says so (its bytes are its code points; the
/// Windows-1252 extras in 0x80–0x9F come out as control characters).
fn decode(bytes: &[u8], content_type: &str) -> String {
    let charset = content_type.to_ascii_lowercase();
    if ["iso-8859-1", "latin1", "windows-1252"].iter().any(|name| charset.contains(&format!("charset={name}"))) {
        return bytes.iter().map(|&b| char::from(b)).collect();
    }
    String::from_utf8_lossy(bytes).into_owned()
}

/// The final URL, the title, then the text cut at `max_chars`.
fn render(fetched: Fetched, max_chars: usize, links: bool) -> String {
    let (title, text) = match fetched.kind {
        Kind::Html => {
            let page = html::to_text(&fetched.body, Some(&fetched.url), links);
            (page.title, page.text)
        }
        Kind::Text | Kind::Json => (None, fetched.body),
    };
    let mut out = format!("URL: {}\n", fetched.url);
    if let Some(title) = title {
        out.push_str(&format!("Title: {title}\n"));
    }
    out.push('\n');
    let total = text.chars().count();
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => {
            out.push_str(&text[..end]);
            out.push_str(&format!(
                "\n\n[cut: showing {max_chars} of {total} characters; call again with a larger max_chars for more]"
            ));
        }
        None => out.push_str(&text),
    }
    if let Some(bytes) = fetched.cut_at_bytes {
        out.push_str(&format!("\n\n[the page is larger than {bytes} bytes; only that much was read]"));
    }
    out
}
