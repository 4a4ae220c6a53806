//! Small HTTP helpers every provider needs: secret-safe headers and logs, readable transport
//! errors, and the event-stream check.

use std::error::Error as _;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};

/// `http://user:pass@host` → `http://user:<redacted>@host`; other URLs unchanged.
pub(crate) fn redact_password(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("<redacted>"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

/// `{base_url}/{path}` as an http(s) URL; an error names the base URL with its password
/// redacted.
pub(crate) fn endpoint(base_url: &str, path: &str) -> Result<reqwest::Url, super::ProviderError> {
    let shown = || redact_password(base_url);
    let config = |problem: String| super::ProviderError::Config(format!("base_url {:?}: {problem}", shown()));
    let url = reqwest::Url::parse(&format!("{}/{path}", base_url.trim_end_matches('/')))
        .map_err(|e| config(e.to_string()))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(config(format!("scheme {other:?} is not http or https"))),
    }
}

/// A header value reqwest will never print (keys live in headers).
pub(crate) fn sensitive_value(text: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(text).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// The API key as a header value, or a config error that does not echo it.
pub(crate) fn key_header_value(text: &str) -> Result<HeaderValue, super::ProviderError> {
    sensitive_value(text)
        .ok_or_else(|| super::ProviderError::Config("api_key contains characters not allowed in a header".into()))
}

pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/event-stream"))
}

/// A failed request as a provider error: timeouts as `Timeout`, unreadable bodies as `Decode`,
/// everything else as `Network`, named by provider and host.
pub(crate) fn transport_error(
    provider: &str,
    endpoint: &reqwest::Url,
    timeout: std::time::Duration,
    error: reqwest::Error,
) -> super::ProviderError {
    use super::ProviderError;
    if error.is_timeout() {
        return ProviderError::Timeout(timeout);
    }
    let is_decode = error.is_decode();
    let host = endpoint.host_str().unwrap_or("?");
    // Without the URL: it may carry credentials in its user-info part.
    let detail = format!("{provider} ({host}): {}", error_chain(&error.without_url()));
    if is_decode { ProviderError::Decode(detail) } else { ProviderError::Network(detail) }
}

/// reqwest's own message is terse ("error sending request"); the cause is in the chain.
pub(crate) fn error_chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A non-JSON error body (an HTML page from a proxy, say), shortened for the log.
pub(crate) fn text_excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "no error message".into();
    }
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Keys at least this long are blanked wherever they appear: a string this long does not turn
/// up inside an error message by chance.
const MIN_KEY_CHARS_BLANKED_ANYWHERE: usize = 12;

/// Blanks `secret` (the API key) out of a provider's message, should the provider echo it.
///
/// A short key (the dummy keys local servers take, such as `x`, `none` or `ollama`) is blanked
/// only where it stands as a whole word: replaced everywhere, a key `x` would turn
/// `context_length_exceeded` into `conte[redacted]t_length_e[redacted]ceeded`, unreadable to
/// people and to the overflow check that reads the message after this.
pub(crate) fn redact(message: String, secret: Option<&str>) -> String {
    let Some(secret) = secret.filter(|secret| !secret.is_empty() && message.contains(*secret)) else {
        return message;
    };
    if secret.chars().count() >= MIN_KEY_CHARS_BLANKED_ANYWHERE {
        return message.replace(secret, "[redacted]");
    }
    let in_word = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    let mut redacted = String::with_capacity(message.len());
    let mut copied = 0;
    for (start, _) in message.match_indices(secret) {
        let end = start + secret.len();
        let joined = message[..start].chars().next_back().is_some_and(in_word)
            || message[end..].chars().next().is_some_and(in_word);
        if !joined {
            redacted.push_str(&message[copied..start]);
            redacted.push_str("[redacted]");
            copied = end;
        }
    }
    redacted.push_str(&message[copied..]);
    redacted
}

/// What a refused request's body said, as an error: its message (or, without one, an excerpt
/// of the body) with `secret` blanked out; a context overflow when the API's error code says so
/// (`overflow_code`) or the message reads like one, else the HTTP status.
pub(crate) fn refusal(
    status: u16,
    retry_after: Option<std::time::Duration>,
    message: Option<String>,
    body: &[u8],
    overflow_code: bool,
    secret: Option<&str>,
) -> super::ProviderError {
    let message = redact(message.unwrap_or_else(|| text_excerpt(body)), secret);
    if overflow_code || looks_like_overflow(&message) {
        return super::ProviderError::ContextOverflow(message);
    }
    super::ProviderError::Http { status, message, retry_after }
}

/// Whether an error message says the prompt does not fit the model's context window
/// (OpenAI's `context_length_exceeded`, Anthropic's "prompt is too long: N tokens > M maximum").
pub(crate) fn looks_like_overflow(message: &str) -> bool {
    let message = message.to_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context length exceeded",
        "prompt is too long",
        // llama.cpp's server (`exceed_context_size_error`).
        "exceeds the available context size",
        "exceed_context_size",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

/// The context window an overflow message names, in the shapes servers write it: OpenAI, vLLM
/// and llama-cpp-python "maximum context length is 8192 tokens", llama-cpp-python "exceed
/// context window of 2048", llama.cpp "exceeds the available context size (4096 tokens)",
/// Anthropic "prompt is too long: 9000 tokens > 8192 maximum".
pub(crate) fn overflow_limit(message: &str) -> Option<u64> {
    let message = message.to_lowercase();
    let number_after = |needle: &str| {
        let rest = &message[message.find(needle)? + needle.len()..];
        let digits: String = rest.trim_start().chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    number_after("maximum context length is")
        .or_else(|| number_after("context window of"))
        .or_else(|| number_after("available context size ("))
        .or_else(|| number_after("tokens >"))
        .filter(|&limit| limit > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_read_from_overflow_messages() {
        let llama = "This model's maximum context length is 2048 tokens. However, you requested 3010 tokens";
        assert_eq!(overflow_limit(llama), Some(2048));
        assert_eq!(overflow_limit("Requested tokens (3010) exceed context window of 2048"), Some(2048));
        assert_eq!(overflow_limit("prompt is too long: 9000 tokens > 8192 maximum"), Some(8192));
        let llama_cpp = "request (4476 tokens) exceeds the available context size (4096 tokens)";
        assert_eq!(overflow_limit(llama_cpp), Some(4096));
        assert!(looks_like_overflow(llama_cpp));
        assert!(looks_like_overflow("the request exceeds the available context size, try increasing it"));
        assert_eq!(overflow_limit("the request exceeds the available context size, try increasing it"), None);
    }

    #[test]
    fn event_stream_content_type() {
        let content_type = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(value));
            headers
        };
        assert!(is_event_stream(&content_type("text/event-stream; charset=utf-8")));
        assert!(!is_event_stream(&content_type("application/json")));
        assert!(!is_event_stream(&HeaderMap::new()));
    }

    #[test]
    fn long_keys_are_blanked_anywhere_short_ones_only_as_whole_words() {
        let long = "sk-proj-4f9a8b7c6d5e";
        let text = format!("Incorrect API key provided: {long}. Also %22{long}%22.");
        assert_eq!(redact(text, Some(long)), "Incorrect API key provided: [redacted]. Also %22[redacted]%22.");
        let overflow = "Requested tokens (2300) exceed context window of 2048 (context_length_exceeded)";
        assert_eq!(redact(overflow.to_owned(), Some("x")), overflow);
        assert_eq!(redact("invalid key: x".to_owned(), Some("x")), "invalid key: [redacted]");
        assert_eq!(
            redact("key 'ollama' refused by ollama-proxy".to_owned(), Some("ollama")),
            "key '[redacted]' refused by ollama-proxy"
        );
        assert_eq!(redact("nothing here".to_owned(), Some("")), "nothing here");
    }

    #[test]
    fn overflow_messages() {
        assert!(looks_like_overflow("prompt is too long: 210000 tokens > 200000 maximum"));
        assert!(looks_like_overflow("This model's maximum context length is 8192 tokens."));
        assert!(!looks_like_overflow("Overloaded"));
    }
}
