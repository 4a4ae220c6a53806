//! Voice notes to text through an OpenAI-compatible `POST {base_url}/audio/transcriptions`
//! (OpenAI's Whisper API, and the local servers that copy it): one multipart upload with the
//! recording as `file`, then `model`, `language` when set, and `response_format=json`; the
//! answer is `{"text": "…"}`. A recording over the limit is refused here, from its size on
//! disk, before anything is sent. The key travels as a sensitive header and is blanked out of
//! any message the service echoes it in.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap};
use reqwest::multipart::{Form, Part};
use thiserror::Error;
use tokio::io::AsyncReadExt;

use super::ProviderError;
use super::http::{error_chain, key_header_value, redact, redact_password, text_excerpt};

/// How to reach the transcription endpoint, and its limits.
#[derive(Clone)]
pub struct TranscriptionSettings {
    /// Up to and including the version, as for chat: `https://api.openai.com/v1`.
    pub base_url: String,
    /// Sent as a bearer token; a local server may need none.
    pub api_key: Option<String>,
    pub model: String,
    /// ISO-639-1; `None` lets the service detect it.
    pub language: Option<String>,
    /// Larger recordings are not sent.
    pub max_bytes: u64,
    /// For the whole request, upload included.
    pub timeout: Duration,
}

/// Written by hand so that the key never reaches a log line.
impl fmt::Debug for TranscriptionSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TranscriptionSettings")
            .field("base_url", &redact_password(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("language", &self.language)
            .field("max_bytes", &self.max_bytes)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Why a recording has no transcript. The messages are short: the model reads them.
#[derive(Debug, Error)]
pub enum TranscribeError {
    #[error("it is larger than the transcription limit of {}", size_text(*limit))]
    TooLarge { size: u64, limit: u64 },
    #[error("the recording cannot be read: {0}")]
    Unreadable(#[from] std::io::Error),
    #[error("the transcription service answered HTTP {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the transcription service did not answer within {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("the transcription service cannot be reached: {0}")]
    Unreachable(String),
    #[error("the transcription service's answer is not the JSON expected: {0}")]
    BadJson(String),
}

/// A saved recording to transcribe.
#[derive(Debug, Clone, Copy)]
pub struct Recording<'a> {
    pub path: &'a Path,
    /// As the platform named it (`audio/ogg`); the file name's extension is what OpenAI reads.
    pub mime_type: Option<&'a str>,
}

/// Sends recordings to one transcription endpoint.
#[derive(Debug)]
pub struct Transcriber {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    settings: TranscriptionSettings,
}

impl Transcriber {
    pub fn new(settings: TranscriptionSettings) -> Result<Self, ProviderError> {
        let endpoint = super::http::endpoint(&settings.base_url, "audio/transcriptions")?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &settings.api_key {
            headers.insert(AUTHORIZATION, key_header_value(&format!("Bearer {key}"))?);
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(settings.timeout)
            .build()
            .map_err(|err| ProviderError::Config(format!("cannot build the HTTP client: {}", error_chain(&err))))?;
        Ok(Self { client, endpoint, settings })
    }

    pub fn max_bytes(&self) -> u64 {
        self.settings.max_bytes
    }

    /// The words spoken in `recording`.
    pub async fn transcribe(&self, recording: Recording<'_>) -> Result<String, TranscribeError> {
        let bytes = self.read(recording.path).await?;
        let response = self.client.post(self.endpoint.clone()).multipart(self.form(recording, bytes)).send().await;
        let response = response.map_err(|err| self.transport_error(err))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|err| self.transport_error(err))?;
        if !status.is_success() {
            return Err(TranscribeError::Status { status: status.as_u16(), message: self.error_message(&body) });
        }
        let answer: TranscriptionAnswer =
            serde_json::from_slice(&body).map_err(|err| TranscribeError::BadJson(err.to_string()))?;
        Ok(answer.text)
    }

    /// The file's bytes, never more than the limit (should it grow while it is read).
    async fn read(&self, path: &Path) -> Result<Vec<u8>, TranscribeError> {
        let limit = self.settings.max_bytes;
        let file = tokio::fs::File::open(path).await?;
        let size = file.metadata().await?.len();
        if size > limit {
            return Err(TranscribeError::TooLarge { size, limit });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(limit.saturating_add(1)).read_to_end(&mut bytes).await?;
        let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if read > limit {
            return Err(TranscribeError::TooLarge { size: read, limit });
        }
        Ok(bytes)
    }

    fn form(&self, recording: Recording<'_>, bytes: Vec<u8>) -> Form {
        let file_name = recording.path.file_name().map_or_else(|| "voice.ogg".into(), |n| n.to_string_lossy());
        let file_name = file_name.into_owned();
        let bytes = bytes::Bytes::from(bytes);
        let length = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        let part = |bytes| Part::stream_with_length(bytes, length).file_name(file_name.clone());
        // A type reqwest cannot parse is not sent: the service goes by the file name anyway.
        let typed = recording.mime_type.and_then(|mime| part(bytes.clone()).mime_str(mime).ok());
        let mut form = Form::new()
            .part("file", typed.unwrap_or_else(|| part(bytes)))
            .text("model", self.settings.model.clone())
            .text("response_format", "json");
        if let Some(language) = &self.settings.language {
            form = form.text("language", language.clone());
        }
        form
    }

    fn transport_error(&self, err: reqwest::Error) -> TranscribeError {
        if err.is_timeout() {
            return TranscribeError::Timeout(self.settings.timeout);
        }
        let host = self.endpoint.host_str().unwrap_or("?");
        // Without the URL: it may carry credentials in its user-info part.
        TranscribeError::Unreachable(format!("{host}: {}", error_chain(&err.without_url())))
    }

    /// The `error.message` of an OpenAI error body, else an excerpt; the key blanked out.
    fn error_message(&self, body: &[u8]) -> String {
        let message = serde_json::from_slice::<ErrorAnswer>(body).ok().map(|answer| answer.error.message);
        redact(message.unwrap_or_else(|| text_excerpt(body)), self.settings.api_key.as_deref())
    }
}

#[derive(serde::Deserialize)]
struct TranscriptionAnswer {
    text: String,
}

#[derive(serde::Deserialize)]
struct ErrorAnswer {
    error: ErrorDetail,
}

#[derive(serde::Deserialize)]
struct ErrorDetail {
    message: String,
}

/// `25 MiB`, or bytes below a MiB.
fn size_text(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) { format!("{} MiB", bytes / MIB) } else { format!("{bytes} bytes") }
}

#[cfg(test)]
#[path = "transcribe/tests.rs"]
mod tests;
