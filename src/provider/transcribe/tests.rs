use std::path::PathBuf;

use serde_json::json;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted, TranscriptionCall};

use super::*;

const KEY: &str = "sk-test-0123456789abcdef";

fn settings(base_url: &str) -> TranscriptionSettings {
    TranscriptionSettings {
        base_url: base_url.to_owned(),
        api_key: Some(KEY.to_owned()),
        model: "whisper-1".into(),
        language: Some("de".into()),
        max_bytes: 1000,
        timeout: Duration::from_secs(5),
    }
}

/// A recording of `len` bytes named `name` in a fresh directory (kept by the guard).
fn recording_file(name: &str, len: usize) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, switchboard_testkit::fake_llm::transcriptions::recording(len)).unwrap();
    (dir, path)
}

fn ogg(path: &Path) -> Recording<'_> {
    Recording { path, mime_type: Some("audio/ogg") }
}

#[tokio::test]
async fn the_recording_goes_up_as_a_multipart_form_and_the_text_comes_back() {
    let llm = FakeLlm::start_with_key(KEY).await;
    llm.push_transcript(Scripted::Text("Bitte ruf mich um sechs an.".into()));
    let transcriber = Transcriber::new(settings(&llm.base_url())).unwrap();
    let (_dir, path) = recording_file("12-0-voice.ogg", 640);
    assert_eq!(transcriber.transcribe(ogg(&path)).await.unwrap(), "Bitte ruf mich um sechs an.");
    let expected = TranscriptionCall {
        file_name: Some("12-0-voice.ogg".into()),
        content_type: Some("audio/ogg".into()),
        bytes_len: 640,
        head: switchboard_testkit::fake_llm::transcriptions::recording(12),
        model: Some("whisper-1".into()),
        language: Some("de".into()),
        response_format: Some("json".into()),
        authorization: Some(format!("Bearer {KEY}")),
    };
    assert_eq!(llm.transcriptions(), vec![expected]);
}

#[tokio::test]
async fn a_recording_over_the_limit_is_refused_before_anything_is_sent() {
    let llm = FakeLlm::start().await;
    let transcriber = Transcriber::new(settings(&llm.base_url())).unwrap();
    let (_dir, path) = recording_file("1-0-voice.ogg", 1001);
    let err = transcriber.transcribe(ogg(&path)).await.unwrap_err();
    assert!(matches!(err, TranscribeError::TooLarge { size: 1001, limit: 1000 }), "{err:?}");
    assert_eq!(err.to_string(), "it is larger than the transcription limit of 1000 bytes");
    assert!(llm.transcriptions().is_empty());
    let err = transcriber.transcribe(ogg(&path.with_file_name("gone.ogg"))).await.unwrap_err();
    assert!(matches!(err, TranscribeError::Unreadable(_)), "{err:?}");
    let mib = TranscribeError::TooLarge { size: 0, limit: 25 * 1024 * 1024 };
    assert_eq!(mib.to_string(), "it is larger than the transcription limit of 25 MiB");
}

#[tokio::test]
async fn an_error_answer_says_what_the_service_said_without_the_key() {
    let llm = FakeLlm::start().await;
    let echoed = json!({"error": {"message": format!("Incorrect API key provided: {KEY}"), "type": "x"}});
    llm.push_transcript(Scripted::Status { code: 401, retry_after: None, body: echoed });
    llm.push_transcript(Scripted::server_error());
    llm.push_transcript(Scripted::Status { code: 200, retry_after: None, body: json!({"words": "hi"}) });
    let transcriber = Transcriber::new(settings(&llm.base_url())).unwrap();
    let (_dir, path) = recording_file("1-0-voice.ogg", 10);
    let err = transcriber.transcribe(ogg(&path)).await.unwrap_err().to_string();
    assert_eq!(err, "the transcription service answered HTTP 401: Incorrect API key provided: [redacted]");
    let err = transcriber.transcribe(ogg(&path)).await.unwrap_err().to_string();
    assert_eq!(err, "the transcription service answered HTTP 500: The server had an error.");
    let err = transcriber.transcribe(ogg(&path)).await.unwrap_err();
    assert!(matches!(err, TranscribeError::BadJson(_)), "{err:?}");
    // A file type the API does not take: its 400 message.
    let (_other, pdf) = recording_file("1-0-notes.pdf", 10);
    let err = transcriber.transcribe(Recording { path: &pdf, mime_type: None }).await.unwrap_err().to_string();
    assert!(err.starts_with("the transcription service answered HTTP 400: Invalid file format"), "{err}");
}

#[tokio::test]
async fn a_slow_or_absent_service_fails_within_the_timeout() {
    let llm = FakeLlm::start().await;
    llm.push_transcript(Scripted::Delay(Duration::from_secs(5), Box::new(Scripted::Text("late".into()))));
    let transcriber =
        Transcriber::new(TranscriptionSettings { timeout: Duration::from_millis(300), ..settings(&llm.base_url()) })
            .unwrap();
    let (_dir, path) = recording_file("1-0-voice.ogg", 10);
    let err = transcriber.transcribe(ogg(&path)).await.unwrap_err();
    assert!(matches!(err, TranscribeError::Timeout(_)), "{err:?}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let transcriber = Transcriber::new(settings(&format!("http://user:pw@{closed}/v1"))).unwrap();
    let err = transcriber.transcribe(ogg(&path)).await.unwrap_err();
    assert!(matches!(err, TranscribeError::Unreachable(_)), "{err:?}");
    assert!(!err.to_string().contains("pw"), "{err}");
}

#[test]
fn the_key_never_reaches_a_debug_line() {
    let transcriber = Transcriber::new(settings("http://127.0.0.1:1/v1")).unwrap();
    let shown = format!("{transcriber:?}");
    assert!(!shown.contains(KEY) && shown.contains("<redacted>"), "{shown}");
}
