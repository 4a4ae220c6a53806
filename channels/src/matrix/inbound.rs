//! A room message as the channel sees it: its text (without an old client's reply fallback),
//! where it belongs (a thread), what it answers, whether it mentions the bot, and its
//! attachment. Pure mapping of the decrypted event; the ingress decides what to do with it.

use chrono::{DateTime, Utc};
use matrix_sdk::ruma::events::room::message::{MessageType, OriginalSyncRoomMessageEvent, Relation};
use matrix_sdk::ruma::events::room::{EncryptedFile, MediaSource};
use matrix_sdk::ruma::{OwnedEventId, OwnedMxcUri, OwnedUserId, UserId};

/// A room message worth a look.
#[derive(Debug, Clone)]
pub(crate) struct Incoming {
    pub event_id: OwnedEventId,
    pub sender: OwnedUserId,
    pub text: String,
    /// `m.notice`: what bots send, and never answer.
    pub notice: bool,
    /// The root of the thread it was posted in.
    pub thread: Option<OwnedEventId>,
    /// The message it answers (`m.in_reply_to`, not a thread's fallback).
    pub reply_to: Option<OwnedEventId>,
    /// The bot is named in `m.mentions`, or, from a client that sends none, in the text.
    pub mentions_bot: bool,
    pub attachment: Option<Attachment>,
    pub sent_at: DateTime<Utc>,
}

/// An image, file, audio or video message's content.
#[derive(Debug, Clone)]
pub(crate) struct Attachment {
    pub kind: AttachmentKind,
    pub name: String,
    pub mimetype: Option<String>,
    pub size: Option<u64>,
    pub source: Source,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttachmentKind {
    Image,
    File,
    Audio,
    Voice,
    Video,
}

/// Where an attachment's bytes are: plain on the media repository, or encrypted there.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    Plain(OwnedMxcUri),
    Encrypted(Box<EncryptedFile>),
}

impl Source {
    pub fn media_source(&self) -> MediaSource {
        match self {
            Source::Plain(uri) => MediaSource::Plain(uri.clone()),
            Source::Encrypted(file) => MediaSource::Encrypted(file.clone()),
        }
    }
}

/// Why an event is not looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    OwnMessage,
    /// An edit of an earlier message (`m.replace`): the original was answered.
    Edit,
    /// A location, an emote the bot cannot act on, or a type it does not know.
    Unsupported,
}

/// Classifies a decrypted room message; `bot` is the bot's user id, `bot_name` its display
/// name in the room.
pub(crate) fn classify(
    event: &OriginalSyncRoomMessageEvent,
    bot: &UserId,
    bot_name: Option<&str>,
) -> Result<Incoming, Skip> {
    if event.sender == bot {
        return Err(Skip::OwnMessage);
    }
    let content = &event.content;
    let (thread, reply_to) = match &content.relates_to {
        Some(Relation::Replacement(_)) => return Err(Skip::Edit),
        Some(Relation::Reply { in_reply_to }) => (None, Some(in_reply_to.event_id.clone())),
        Some(Relation::Thread(thread)) => {
            let reply = thread.in_reply_to.as_ref().filter(|_| !thread.is_falling_back);
            (Some(thread.event_id.clone()), reply.map(|reply| reply.event_id.clone()))
        }
        _ => (None, None),
    };
    let (text, notice, attachment) = match &content.msgtype {
        MessageType::Text(text) => (text.body.clone(), false, None),
        MessageType::Notice(notice) => (notice.body.clone(), true, None),
        MessageType::Emote(emote) => (format!("* {}", emote.body), false, None),
        MessageType::Image(image) => {
            let info = image.info.as_deref();
            let attachment = attachment(
                AttachmentKind::Image,
                &image.body,
                image.filename.as_deref(),
                &image.source,
                info.and_then(|info| info.mimetype.clone()),
                info.and_then(|info| info.size).map(u64::from),
            );
            (caption(&image.body, image.filename.as_deref()), false, Some(attachment))
        }
        MessageType::File(file) => {
            let info = file.info.as_deref();
            let attachment = attachment(
                AttachmentKind::File,
                &file.body,
                file.filename.as_deref(),
                &file.source,
                info.and_then(|info| info.mimetype.clone()),
                info.and_then(|info| info.size).map(u64::from),
            );
            (caption(&file.body, file.filename.as_deref()), false, Some(attachment))
        }
        MessageType::Audio(audio) => {
            let info = audio.info.as_deref();
            let kind = if audio.voice.is_some() { AttachmentKind::Voice } else { AttachmentKind::Audio };
            let attachment = attachment(
                kind,
                &audio.body,
                audio.filename.as_deref(),
                &audio.source,
                info.and_then(|info| info.mimetype.clone()),
                info.and_then(|info| info.size).map(u64::from),
            );
            (caption(&audio.body, audio.filename.as_deref()), false, Some(attachment))
        }
        MessageType::Video(video) => {
            let info = video.info.as_deref();
            let attachment = attachment(
                AttachmentKind::Video,
                &video.body,
                video.filename.as_deref(),
                &video.source,
                info.and_then(|info| info.mimetype.clone()),
                info.and_then(|info| info.size).map(u64::from),
            );
            (caption(&video.body, video.filename.as_deref()), false, Some(attachment))
        }
        _ => return Err(Skip::Unsupported),
    };
    let text = if reply_to.is_some() { without_reply_fallback(&text) } else { text };
    let mentions_bot = match &content.mentions {
        Some(mentions) => mentions.user_ids.iter().any(|user| user == bot),
        None => names_bot(&text, bot, bot_name),
    };
    let sent_at = DateTime::from_timestamp_millis(i64::from(event.origin_server_ts.get())).unwrap_or_else(Utc::now);
    Ok(Incoming {
        event_id: event.event_id.clone(),
        sender: event.sender.clone(),
        text,
        notice,
        thread,
        reply_to,
        mentions_bot,
        attachment,
        sent_at,
    })
}

fn attachment(
    kind: AttachmentKind,
    body: &str,
    filename: Option<&str>,
    source: &MediaSource,
    mimetype: Option<String>,
    size: Option<u64>,
) -> Attachment {
    let source = match source {
        MediaSource::Plain(uri) => Source::Plain(uri.clone()),
        MediaSource::Encrypted(file) => Source::Encrypted(file.clone()),
    };
    let name = filename.unwrap_or(body).to_owned();
    Attachment { kind, name, mimetype, size, source }
}

/// The words sent with an attachment: its `body` is a caption only when a separate `filename`
/// names the file; otherwise the body is the file name.
fn caption(body: &str, filename: Option<&str>) -> String {
    match filename {
        Some(name) if name != body => body.to_owned(),
        _ => String::new(),
    }
}

/// The text without the quote older clients put before a reply (`> <@user:server> text`, one
/// or more `>` lines, then a blank line).
pub(crate) fn without_reply_fallback(text: &str) -> String {
    if !text.starts_with("> <") {
        return text.to_owned();
    }
    let mut lines = text.lines().skip_while(|line| line.starts_with('>'));
    let mut rest: Vec<&str> = Vec::new();
    if let Some(first) = lines.next()
        && !first.is_empty()
    {
        rest.push(first);
    }
    rest.extend(lines);
    rest.join("\n")
}

/// Whether the text names the bot, for clients that send no `m.mentions`: its user id, or
/// its display name as a word of its own.
fn names_bot(text: &str, bot: &UserId, bot_name: Option<&str>) -> bool {
    if text.contains(bot.as_str()) {
        return true;
    }
    let Some(name) = bot_name.map(str::trim).filter(|name| !name.is_empty()) else { return false };
    let lower = text.to_lowercase();
    let name = name.to_lowercase();
    lower.match_indices(&name).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + name.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

#[cfg(test)]
mod tests;
