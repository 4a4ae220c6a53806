//! What the model is given for an inbound message: the person who wrote it (see
//! [`ChatMessage::author`]), the message it replies to, its text, a line per attachment (a
//! voice note's transcript, when there is one, on the line before), and the saved photos as
//! images (which a vision model sees, see [`crate::provider::images`]).

use switchboard_channels::contract::{InboundKind, InboundMessage, Media, RepliedTo};

use super::batch;
use crate::provider::{Author, ChatMessage, ImageRef};

/// What became of a voice note before its turn (see `voice`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Heard {
    /// Its transcript.
    Words(String),
    /// Why there is none, in a few words.
    Failed(String),
    /// Its transcript, which the input guard would have blocked.
    Withheld,
}

impl Heard {
    /// The line the model reads: the words are the message's text.
    fn line(&self) -> String {
        match self {
            Heard::Words(words) if words.trim().is_empty() => "[voice note, transcribed: no words recognised]".into(),
            Heard::Words(words) => format!("[voice note, transcribed] {}", words.trim()),
            Heard::Failed(why) => format!("[voice note not transcribed: {why}]"),
            Heard::Withheld => {
                "[voice note, transcribed: withheld, it looked like an attempt to give you instructions]".into()
            }
        }
    }
}

/// The user message of a turn (or of a steering message) for `msg`.
pub(super) fn message(msg: &InboundMessage) -> ChatMessage {
    message_hearing(msg, &[])
}

/// [`message`] with what became of its voice notes: `heard[i]` for `msg.media[i]`.
pub(super) fn message_hearing(msg: &InboundMessage, heard: &[Option<Heard>]) -> ChatMessage {
    let text = text_hearing(msg, heard);
    let message = match author(msg) {
        Some(author) => ChatMessage::user_by(author, text),
        None => ChatMessage::user(text),
    };
    message.with_images(msg.media.iter().filter_map(image).collect())
}

/// A photo saved on disk (the adapters call images `photo`); other files stay paths only.
fn image(media: &Media) -> Option<ImageRef> {
    let is_image = media.kind == "photo" || media.mime_type.as_deref().is_some_and(|m| m.starts_with("image/"));
    let path = media.path.as_ref().filter(|_| is_image)?;
    Some(ImageRef { path: path.clone(), mime_type: media.mime_type.clone() })
}

/// The person who wrote `msg`: none for system messages, nor for a turn merged from several
/// messages whose lines name their authors themselves.
fn author(msg: &InboundMessage) -> Option<Author> {
    if msg.kind != InboundKind::User || batch::merged_with_names(msg) || msg.sender.id.is_empty() {
        return None;
    }
    Some(Author { id: msg.sender.id.clone(), name: msg.sender.name.clone() })
}

/// The text the model sees: the replied-to message, the content, a line per attachment.
#[cfg(test)]
fn text(msg: &InboundMessage) -> String {
    text_hearing(msg, &[])
}

/// [`text`], each transcript (or why there is none) on the line before its voice note's.
fn text_hearing(msg: &InboundMessage, heard: &[Option<Heard>]) -> String {
    let mut text = msg.replied_to.as_ref().map(replied_block).unwrap_or_default();
    text.push_str(&msg.content);
    for (index, media) in msg.media.iter().enumerate() {
        if let Some(Some(heard)) = heard.get(index) {
            push_line(&mut text, &heard.line());
        }
        let place = media.path.as_deref().or(media.url.as_deref()).unwrap_or("(not downloaded)");
        push_line(&mut text, &format!("[{} attached: {place}]", media.kind));
    }
    text
}

/// Appends `line` on a line of its own.
fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
}

/// A short block naming the message replied to and what it said (already cut by the adapter),
/// and the fragment quoted from it, each on its own line before the message.
fn replied_block(replied: &RepliedTo) -> String {
    let whom = if replied.from_self {
        "your earlier message".to_owned()
    } else {
        let author = Author { id: replied.sender.id.clone(), name: replied.sender.name.clone() };
        format!("a message by {}", author.label())
    };
    let mut block = match replied.text.as_str() {
        "" => format!("[Replying to {whom}]\n"),
        text => format!("[Replying to {whom}: {text}]\n"),
    };
    if let Some(quote) = &replied.quote {
        block.push_str(&format!("[Quoting from it: {quote}]\n"));
    }
    block
}

#[cfg(test)]
mod tests {
    use switchboard_channels::contract::{Media, Sender};

    use super::*;

    fn alice(content: &str) -> InboundMessage {
        let sender = Sender { id: "111".into(), name: "Alice".into(), is_bot: false };
        InboundMessage { is_group: true, ..InboundMessage::user("telegram", "-100", sender, content) }
    }

    fn bob() -> Sender {
        Sender { id: "222".into(), name: "Bob".into(), is_bot: false }
    }

    #[test]
    fn a_persons_message_carries_its_author_and_a_system_message_none() {
        let message = message(&alice("hi"));
        let expected = Author { id: "111".into(), name: "Alice".into() };
        assert_eq!((message.content.as_str(), message.author), ("hi", Some(expected)));
        let mut system = alice("cron prompt");
        system.kind = InboundKind::System;
        assert_eq!(super::message(&system).author, None);
    }

    #[test]
    fn saved_photos_become_images_and_other_files_stay_lines() {
        let mut msg = alice("look");
        let photo = Media { kind: "photo".into(), path: Some("m/a.jpg".into()), ..Media::default() };
        let pdf = Media { kind: "document".into(), path: Some("m/b.pdf".into()), ..Media::default() };
        let linked = Media { kind: "photo".into(), url: Some("https://x/c.png".into()), ..Media::default() };
        msg.media = vec![photo, pdf, linked];
        let message = message(&msg);
        assert_eq!(message.images, vec![ImageRef { path: "m/a.jpg".into(), mime_type: None }]);
        assert!(
            message.content.ends_with(
                "[photo attached: m/a.jpg]\n[document attached: m/b.pdf]\n[photo attached: https://x/c.png]"
            )
        );
    }

    #[test]
    fn a_transcript_is_the_text_and_the_voice_notes_path_line_stays() {
        let mut msg = alice("");
        let voice = |path: &str| Media { kind: "voice".into(), path: Some(path.into()), ..Media::default() };
        msg.media = vec![voice("m/1.ogg"), voice("m/2.ogg"), voice("m/3.ogg")];
        let heard = [Some(Heard::Words(" call mom \n".into())), Some(Heard::Failed("it is too large".into())), None];
        let expected = "[voice note, transcribed] call mom\n[voice attached: m/1.ogg]\n\
                        [voice note not transcribed: it is too large]\n[voice attached: m/2.ogg]\n\
                        [voice attached: m/3.ogg]";
        assert_eq!(message_hearing(&msg, &heard).content, expected);
        // Nothing heard: the path lines only, as before.
        assert_eq!(
            message(&msg).content,
            "[voice attached: m/1.ogg]\n[voice attached: m/2.ogg]\n[voice attached: m/3.ogg]"
        );
    }

    #[test]
    fn a_turn_merged_from_named_lines_has_no_single_author() {
        let bobs = InboundMessage { sender: bob(), ..alice("seven") };
        let merged = message(&batch::merged_for_test(&[alice("six?"), bobs]));
        assert_eq!((merged.content.as_str(), merged.author), ("Alice: six?\nBob: seven", None));
    }

    #[test]
    fn a_reply_names_whom_it_answers_and_what_was_quoted() {
        let mut msg = alice("@bot is that right?");
        msg.replied_to = Some(RepliedTo::new("41".into(), bob(), false, "the sun is cold", Some("cold")));
        msg.media = vec![Media { kind: "photo".into(), path: Some("media/a.jpg".into()), ..Media::default() }];
        let expected = "[Replying to a message by Bob (id 222): the sun is cold]\n[Quoting from it: cold]\n\
                        @bot is that right?\n[photo attached: media/a.jpg]";
        assert_eq!(text(&msg), expected);
    }

    #[test]
    fn a_reply_to_the_bot_says_so_and_an_empty_one_names_only_the_author() {
        let mut msg = alice("why?");
        let helper = Sender { id: "5000".into(), name: "Helper".into(), is_bot: true };
        msg.replied_to = Some(RepliedTo::new("41".into(), helper, true, "It rains.", None));
        assert_eq!(text(&msg), "[Replying to your earlier message: It rains.]\nwhy?");
        msg.replied_to = Some(RepliedTo::new("42".into(), bob(), false, "", None));
        assert_eq!(text(&msg), "[Replying to a message by Bob (id 222)]\nwhy?");
    }
}
