//! Voice notes heard before their turn. With `[transcription]` configured, each saved voice
//! note of the message goes to the transcription endpoint, one after the other, inside the run
//! (its timeout covers them); the words become the message's text, screened by the input guard
//! like typed text, and the path line stays so tools can still reach the file. A voice note
//! that cannot be transcribed costs its words, not the turn: the model is told why in a line.
//! Messages without voice notes, and workers without a transcriber, skip all of it.

use std::path::Path;
use std::time::Instant;

use switchboard_channels::contract::{InboundMessage, Media};

use super::input::{self, Heard};
use crate::hygiene::{Guard, Verdict};
use crate::provider::ChatMessage;
use crate::provider::transcribe::{Recording, Transcriber};

/// The user message of a turn for `msg`, its voice notes transcribed first.
pub(super) async fn turn_input(
    transcriber: Option<&Transcriber>,
    guard: Option<&Guard>,
    msg: &InboundMessage,
) -> ChatMessage {
    let heard = match transcriber {
        Some(transcriber) if msg.media.iter().any(is_voice_note) => hear_all(guard, transcriber, msg).await,
        _ => Vec::new(),
    };
    input::message_hearing(msg, &heard)
}

/// A voice note the adapter saved: a Telegram voice note, a Discord voice message.
pub(super) fn is_voice_note(media: &Media) -> bool {
    media.kind == "voice" && media.path.is_some()
}

/// What became of each attachment that is a voice note, by its place in `msg.media`.
async fn hear_all(guard: Option<&Guard>, transcriber: &Transcriber, msg: &InboundMessage) -> Vec<Option<Heard>> {
    let mut heard = Vec::with_capacity(msg.media.len());
    for media in &msg.media {
        let voice_note = media.path.as_deref().filter(|_| is_voice_note(media));
        heard.push(match voice_note {
            Some(path) => Some(hear(guard, transcriber, media, path).await),
            None => None,
        });
    }
    heard
}

async fn hear(guard: Option<&Guard>, transcriber: &Transcriber, media: &Media, path: &str) -> Heard {
    let started = Instant::now();
    let recording = Recording { path: Path::new(path), mime_type: media.mime_type.as_deref() };
    match transcriber.transcribe(recording).await {
        Ok(words) => {
            let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            tracing::info!(path, chars = words.chars().count(), duration_ms, "voice note transcribed");
            screened(guard, words)
        }
        Err(err) => {
            tracing::warn!(path, %err, "voice note not transcribed; the model is told why");
            Heard::Failed(err.to_string())
        }
    }
}

/// The words as the input guard passes them (cleaned, cut, perhaps with a note); withheld when
/// it would block them, since the rest of the message may still deserve an answer.
fn screened(guard: Option<&Guard>, words: String) -> Heard {
    let Some(guard) = guard else { return Heard::Words(words) };
    match guard.screen(&words).verdict {
        Verdict::Pass(words) => Heard::Words(words),
        Verdict::Block(_) => Heard::Withheld,
    }
}
