//! Voice notes become text: with `[transcription]` naming a provider entry, a voice note is
//! sent to that entry's `/audio/transcriptions` (the fake checks it as OpenAI does) and the
//! model reads the words as the message, its path line kept; a failed transcription still gets
//! an answer, the model told why; without `[transcription]` the model gets the path only.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use switchboard::config::TranscriptionConfig;
use switchboard::worker::{QueueSettings, WorkerSettings};
use switchboard_channels::contract::{InboundMessage, Media, OutboundMessage, Sender};
use switchboard_channels::control::OwnerLink;
use switchboard_channels::delivery::DeliveryPolicy;
use switchboard_channels::telegram::TelegramChannel;
use switchboard_channels::{BusExt, Deliveries};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted, transcriptions};
use switchboard_testkit::fake_telegram::{FakeTelegram, updates};
use tokio_util::sync::CancellationToken;

use crate::common::{BusKind, Harness, Setup};

const WAIT: Duration = Duration::from_secs(10);
const ALICE: i64 = 111;

/// `[transcription]` on the scripted model server's provider entry, `fake`.
fn on_the_fake() -> TranscriptionConfig {
    TranscriptionConfig { provider: "fake".into(), ..TranscriptionConfig::default() }
}

fn setup(transcription: TranscriptionConfig, llm: FakeLlm) -> Setup {
    let queue = QueueSettings { debounce: Duration::ZERO, ..QueueSettings::default() };
    let settings = WorkerSettings { queue, ..WorkerSettings::default() };
    Setup { settings, llm: Some(llm), transcription, ..Setup::new(BusKind::InProcess) }
}

/// The last user message of a chat request, as the model got it.
fn last_user_text(request: &Value) -> String {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let user = messages.iter().rev().find(|m| m["role"] == "user").cloned().unwrap_or_default();
    switchboard_testkit::fake_llm::without_context_line(user["content"].as_str().unwrap_or_default()).to_owned()
}

#[tokio::test]
async fn a_telegram_voice_note_reaches_the_model_as_its_words_and_later_turns_still_see_them() {
    let llm = FakeLlm::start().await;
    llm.push_transcript(Scripted::Text("Remind me to buy oat milk tomorrow.".into()));
    let h = setup(on_the_fake(), llm).start().await;
    let fake = FakeTelegram::start().await;
    let settings = crate::common::fake_telegram_settings(&fake, h.dir.path(), ALICE);
    let shutdown = CancellationToken::new();
    let channel = TelegramChannel::start(
        Arc::clone(&h.bus),
        settings,
        OwnerLink::default(),
        DeliveryPolicy::default(),
        shutdown.clone(),
    )
    .await
    .unwrap();

    fake.add_file("voice-1", transcriptions::recording(4000));
    fake.push_message(updates::voice(updates::private_text(ALICE, "alice", 1, ""), "voice-1", 3, 4000));
    assert_eq!(fake.wait_for_calls("sendmessage", 1, WAIT).await.len(), 1, "the voice note was not answered");
    let saved = h.dir.path().join("media").join(ALICE.to_string()).join("1-0-voice.ogg");
    let expected =
        format!("[voice note, transcribed] Remind me to buy oat milk tomorrow.\n[voice attached: {}]", saved.display());
    assert_eq!(last_user_text(&h.llm.requests()[0]), expected);
    let calls = h.llm.transcriptions();
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].file_name.as_deref(), calls[0].model.as_deref()), (Some("1-0-voice.ogg"), Some("whisper-1")));
    assert_eq!((calls[0].bytes_len, calls[0].content_type.as_deref()), (4000, Some("audio/ogg")));

    // The stored turn keeps the words: the next turn's history has them.
    fake.push_message(updates::private_text(ALICE, "alice", 2, "what did I ask?"));
    fake.wait_for_calls("sendmessage", 2, WAIT).await;
    let second = h.llm.wait_for_requests(2, WAIT).await;
    assert!(second[1].to_string().contains("buy oat milk"), "{}", second[1]);
    shutdown.cancel();
    channel.stop().await;
    h.stop().await;
}

/// A voice note the adapter saved in the workspace's media directory.
fn voice_note(h: &Harness, name: &str, len: usize) -> (InboundMessage, PathBuf) {
    let dir = h.workspace.join("media").join("test");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, transcriptions::recording(len)).unwrap();
    let sender = Sender { id: "u1".into(), name: "U".into(), is_bot: false };
    let mut msg = InboundMessage::user("test", "c1", sender, "");
    msg.media = vec![voice_media(&path, len)];
    (msg, path)
}

fn voice_media(path: &Path, len: usize) -> Media {
    Media {
        kind: "voice".into(),
        path: Some(path.display().to_string()),
        mime_type: Some("audio/ogg".into()),
        size: Some(len as u64),
        ..Media::default()
    }
}

/// Sends `msg` and returns the reply.
async fn answer(out: &mut Deliveries, h: &Harness, msg: &InboundMessage) -> OutboundMessage {
    h.bus.publish_inbound(msg).await.unwrap();
    let delivery = tokio::time::timeout(WAIT, out.next()).await.expect("no reply").unwrap().unwrap();
    let reply = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    reply
}

#[tokio::test]
async fn a_failing_transcription_service_still_gets_an_answer_and_the_model_is_told_why() {
    let llm = FakeLlm::start().await;
    llm.push_transcript(Scripted::server_error());
    llm.push(Scripted::Text("Sorry, I could not hear that one.".into()));
    let h = setup(on_the_fake(), llm).start().await;
    let mut out = h.outbound("test").await;
    let (msg, path) = voice_note(&h, "1-0-voice.ogg", 100);
    assert_eq!(answer(&mut out, &h, &msg).await.content, "Sorry, I could not hear that one.");
    let expected = format!(
        "[voice note not transcribed: the transcription service answered HTTP 500: The server had an error.]\n\
         [voice attached: {}]",
        path.display()
    );
    assert_eq!(last_user_text(&h.llm.requests()[0]), expected);
    h.stop().await;
}

#[tokio::test]
async fn a_voice_note_over_the_limit_is_not_sent_and_the_model_is_told_so() {
    let transcription = TranscriptionConfig { max_bytes: 1000, ..on_the_fake() };
    let h = setup(transcription, FakeLlm::start().await).start().await;
    let mut out = h.outbound("test").await;
    let (mut msg, path) = voice_note(&h, "1-0-voice.ogg", 1001);
    msg.content = "listen to this".into();
    answer(&mut out, &h, &msg).await;
    let expected = format!(
        "listen to this\n[voice note not transcribed: it is larger than the transcription limit of 1000 bytes]\n\
         [voice attached: {}]",
        path.display()
    );
    assert_eq!(last_user_text(&h.llm.requests()[0]), expected);
    assert!(h.llm.transcriptions().is_empty(), "nothing was uploaded");
    h.stop().await;
}

#[tokio::test]
async fn without_transcription_the_model_gets_the_path_only() {
    let h = setup(TranscriptionConfig::default(), FakeLlm::start().await).start().await;
    let mut out = h.outbound("test").await;
    let (msg, path) = voice_note(&h, "1-0-voice.ogg", 100);
    answer(&mut out, &h, &msg).await;
    assert_eq!(last_user_text(&h.llm.requests()[0]), format!("[voice attached: {}]", path.display()));
    assert!(h.llm.transcriptions().is_empty());
    h.stop().await;
}

#[tokio::test]
async fn a_slow_transcription_counts_against_the_run_time_limit() {
    let llm = FakeLlm::start().await;
    llm.push_transcript(Scripted::Delay(Duration::from_secs(30), Box::new(Scripted::Text("late".into()))));
    let mut setup = setup(on_the_fake(), llm);
    setup.settings.run_timeout = Duration::from_secs(1);
    let h = setup.start().await;
    let mut out = h.outbound("test").await;
    let (msg, _) = voice_note(&h, "1-0-voice.ogg", 100);
    let started = std::time::Instant::now();
    let reply = answer(&mut out, &h, &msg).await;
    assert!(reply.content.starts_with("This took too long"), "{}", reply.content);
    assert!(started.elapsed() < Duration::from_secs(5), "stopped after {:?}", started.elapsed());
    assert!(h.llm.requests().is_empty(), "the model was never called");
    h.stop().await;
}

/// In `steer` mode a voice note sent during a run waits for a turn of its own, where it is
/// transcribed, instead of joining the running turn as a path.
#[tokio::test]
async fn a_voice_note_sent_while_a_steered_run_goes_on_gets_its_own_transcribed_turn() {
    let llm = FakeLlm::start().await;
    let call = Scripted::ToolCalls(vec![("current_time".into(), serde_json::json!({}))]);
    llm.push(Scripted::Delay(Duration::from_millis(800), Box::new(call)));
    llm.push(Scripted::Text("first answer".into()));
    llm.push_transcript(Scripted::Text("And book the train.".into()));
    let mut setup = setup(on_the_fake(), llm);
    setup.settings.queue.mode = switchboard::config::QueueMode::Steer;
    let h = setup.start().await;
    let mut out = h.outbound("test").await;
    let sender = Sender { id: "u1".into(), name: "U".into(), is_bot: false };
    h.bus.publish_inbound(&InboundMessage::user("test", "c1", sender, "plan a trip")).await.unwrap();
    h.llm.wait_for_requests(1, WAIT).await;
    let (voice, _) = voice_note(&h, "2-0-voice.ogg", 100);
    h.bus.publish_inbound(&voice).await.unwrap();
    for _ in 0..2 {
        let delivery = tokio::time::timeout(WAIT, out.next()).await.expect("no reply").unwrap().unwrap();
        delivery.ack().await.unwrap();
    }
    let requests = h.llm.requests();
    assert_eq!(requests.len(), 3, "the first turn's two calls, then the voice note's turn");
    assert!(!requests[1].to_string().contains("voice"), "steered into the running turn: {}", requests[1]);
    assert!(last_user_text(&requests[2]).starts_with("[voice note, transcribed] And book the train."));
}
