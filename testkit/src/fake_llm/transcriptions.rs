//! `POST /v1/audio/transcriptions`, checked the way OpenAI checks it: a multipart form with a
//! `file` (at most 25 MiB, of a format the API accepts, told by the file name's extension) and
//! a `model`, else a 400 (413 for a file too large) with OpenAI's error body. The answer is the
//! next scripted one ([`FakeLlm::push_transcript`](super::FakeLlm::push_transcript)), else
//! `echo: <file name>`; `{"text": …}`, or the bare text for `response_format=text`. Every form
//! received is recorded ([`TranscriptionCall`]), refused ones too. Like the real API, which
//! decodes the audio, it refuses bytes that do not begin as their extension's container does
//! (an `.ogg` not starting with `OggS`): test recordings are [`recording`]s.

use std::sync::Arc;

use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Shared;
use crate::fake_server::{Settled, json_status};

/// The largest file the API takes: 25 MiB.
pub const MAX_FILE_BYTES: usize = 25 * 1024 * 1024;

/// The request bodies the route reads: a file at the limit and the other fields.
pub(super) const BODY_LIMIT: usize = MAX_FILE_BYTES + 1024 * 1024;

/// What OpenAI accepts, by the file name's extension.
pub const FORMATS: [&str; 10] = ["flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm"];

/// Bytes that pass for a recording in an Ogg container (a Telegram voice note, a Discord voice
/// message): the `OggS` capture pattern, then `len - 4` bytes of filler.
pub fn recording(len: usize) -> Vec<u8> {
    let mut bytes = b"OggS".to_vec();
    bytes.resize(len.max(4), 0);
    bytes
}

/// Whether `head` (a file's first bytes) begins as files with `extension` do.
fn container_matches(extension: &str, head: &[u8]) -> bool {
    match extension {
        "ogg" | "oga" => head.starts_with(b"OggS"),
        "wav" => head.starts_with(b"RIFF"),
        "flac" => head.starts_with(b"fLaC"),
        "webm" => head.starts_with(&[0x1A, 0x45, 0xDF, 0xA3]),
        "mp3" | "mpga" | "mpeg" => head.starts_with(b"ID3") || head.first() == Some(&0xFF),
        "m4a" | "mp4" => head.get(4..8) == Some(b"ftyp"),
        _ => false,
    }
}

/// One transcription request, as the fake read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TranscriptionCall {
    /// The `file` part's file name.
    pub file_name: Option<String>,
    /// The `file` part's content type.
    pub content_type: Option<String>,
    /// The `file` part's length in bytes.
    pub bytes_len: usize,
    /// Its first 12 bytes.
    pub head: Vec<u8>,
    pub model: Option<String>,
    pub language: Option<String>,
    pub response_format: Option<String>,
    /// The `Authorization` header.
    pub authorization: Option<String>,
}

pub(super) async fn transcriptions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    request: Request,
) -> Response {
    let mut call = TranscriptionCall {
        authorization: headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned),
        ..TranscriptionCall::default()
    };
    let form = match Multipart::from_request(request, &()).await {
        Ok(multipart) => read_form(multipart, &mut call).await,
        Err(error) => Err(error.body_text()),
    };
    shared.transcriptions.record(call.clone());
    if let Some(refusal) = super::key_refusal(&shared, &headers) {
        return refusal;
    }
    if let Err(why) = form {
        return invalid(400, &format!("Could not parse multipart form: {why}"), None);
    }
    if let Some(refusal) = refusal(&call) {
        return refusal;
    }
    let echoed = call.file_name.clone().unwrap_or_default();
    match shared.transcript_script.play(None, false, &echoed).await {
        Settled::Response(response) => response,
        Settled::Text(text) if call.response_format.as_deref() == Some("text") => text.into_response(),
        Settled::Text(text) => axum::Json(json!({ "text": text })).into_response(),
        Settled::ToolCalls(_) | Settled::Interrupted => {
            invalid(500, "the test scripted a chat answer for a transcription", None)
        }
    }
}

/// Reads the form into `call`; the file's bytes are only counted.
async fn read_form(mut multipart: Multipart, call: &mut TranscriptionCall) -> Result<(), String> {
    while let Some(field) = multipart.next_field().await.map_err(|error| error.body_text())? {
        let name = field.name().unwrap_or_default().to_owned();
        if name == "file" {
            call.file_name = field.file_name().map(str::to_owned);
            call.content_type = field.content_type().map(str::to_owned);
            let bytes = field.bytes().await.map_err(|error| error.body_text())?;
            call.bytes_len = bytes.len();
            call.head = bytes.iter().take(12).copied().collect();
            continue;
        }
        let text = field.text().await.map_err(|error| error.body_text())?;
        match name.as_str() {
            "model" => call.model = Some(text),
            "language" => call.language = Some(text),
            "response_format" => call.response_format = Some(text),
            _ => {}
        }
    }
    Ok(())
}

/// What OpenAI refuses in a well-formed request.
fn refusal(call: &TranscriptionCall) -> Option<Response> {
    let Some(file_name) = &call.file_name else {
        return Some(invalid(400, "you must provide a file", Some("file")));
    };
    if call.model.as_deref().is_none_or(str::is_empty) {
        return Some(invalid(400, "you must provide a model parameter", Some("model")));
    }
    if call.bytes_len > MAX_FILE_BYTES {
        let message = format!("Maximum content size limit ({MAX_FILE_BYTES}) exceeded ({} bytes read)", call.bytes_len);
        return Some(invalid(413, &message, Some("file")));
    }
    let extension = file_name.rsplit_once('.').map(|(_, ext)| ext.to_ascii_lowercase()).unwrap_or_default();
    if !FORMATS.contains(&extension.as_str()) {
        let message = format!("Invalid file format. Supported formats: {FORMATS:?}");
        return Some(invalid(400, &message, Some("file")));
    }
    if !container_matches(&extension, &call.head) {
        return Some(invalid(400, "Audio file might be corrupted or unsupported", Some("file")));
    }
    None
}

/// An OpenAI error answer of type `invalid_request_error`.
fn invalid(code: u16, message: &str, param: Option<&str>) -> Response {
    let body: Value =
        json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": null}});
    json_status(code, None, body)
}

#[cfg(test)]
mod tests {
    use reqwest::multipart::{Form, Part};

    use super::*;
    use crate::fake_llm::{FakeLlm, Scripted};

    async fn send(llm: &FakeLlm, form: Form) -> (u16, Value) {
        let url = format!("{}/audio/transcriptions", llm.base_url());
        let response = reqwest::Client::new().post(url).multipart(form).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    fn voice(name: &str, len: usize) -> Part {
        Part::bytes(recording(len)).file_name(name.to_owned())
    }

    #[tokio::test]
    async fn a_scripted_transcript_answers_and_the_form_is_recorded() {
        let llm = FakeLlm::start().await;
        llm.push_transcript(Scripted::Text("call mom at six".into()));
        let form =
            Form::new().part("file", voice("1-0-voice.ogg", 300)).text("model", "whisper-1").text("language", "en");
        assert_eq!(send(&llm, form).await, (200, json!({"text": "call mom at six"})));
        let mp3 = Part::bytes(b"ID3\x04\0\0\0\0\0\0".to_vec()).file_name("2-0-note.MP3");
        let form = Form::new().part("file", mp3).text("model", "whisper-1");
        assert_eq!(send(&llm, form).await, (200, json!({"text": "echo: 2-0-note.MP3"})));
        let calls = llm.transcriptions();
        assert_eq!(calls.len(), 2);
        let first = &calls[0];
        assert_eq!(
            (first.file_name.as_deref(), first.model.as_deref(), first.language.as_deref(), first.bytes_len),
            (Some("1-0-voice.ogg"), Some("whisper-1"), Some("en"), 300)
        );
        assert!(llm.requests().is_empty(), "no chat request");
    }

    #[tokio::test]
    async fn missing_fields_unknown_formats_and_large_files_are_refused_like_openai() {
        let llm = FakeLlm::start().await;
        let (status, body) = send(&llm, Form::new().text("model", "whisper-1")).await;
        assert_eq!((status, &body["error"]["param"], &body["error"]["code"]), (400, &json!("file"), &Value::Null));
        assert_eq!(body["error"]["type"], "invalid_request_error");
        let (status, body) = send(&llm, Form::new().part("file", voice("a.ogg", 3))).await;
        assert_eq!((status, &body["error"]["param"]), (400, &json!("model")));
        let form = Form::new().part("file", voice("a.pdf", 3)).text("model", "whisper-1");
        let (status, body) = send(&llm, form).await;
        assert_eq!(status, 400);
        assert!(body["error"]["message"].as_str().unwrap().starts_with("Invalid file format"), "{body}");
        let form = Form::new().part("file", voice("big.ogg", MAX_FILE_BYTES + 1)).text("model", "whisper-1");
        let (status, body) = send(&llm, form).await;
        assert_eq!(status, 413, "{body}");
        // Bytes that are no recording of their kind, as the API decodes them.
        let noise = Part::bytes(vec![5u8; 400]).file_name("1-0-voice.ogg");
        let (status, body) = send(&llm, Form::new().part("file", noise).text("model", "whisper-1")).await;
        assert_eq!(
            (status, body["error"]["message"].as_str()),
            (400, Some("Audio file might be corrupted or unsupported"))
        );
        assert_eq!(llm.transcriptions().len(), 5);
    }
}
