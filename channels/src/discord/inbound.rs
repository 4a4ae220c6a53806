//! What a Discord message is, as far as routing and gating care: where it was posted, who
//! wrote it, how it addresses the bot, and what it carries. Pure: the lookups that need the
//! network (is the channel a thread? which roles does the bot hold?) are the ingress's.

use serenity::all::{Message, MessageFlags, MessageType, User};

use crate::contract::{RepliedTo, Sender};

/// Who wrote a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Author {
    pub id: u64,
    pub username: String,
    /// The display name (`global_name`), else the username.
    pub name: String,
    pub is_bot: bool,
}

/// A file attached to a message, not downloaded yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attachment {
    /// `photo` for images, `voice` for the recording of a voice message, else `document`.
    pub kind: &'static str,
    pub url: String,
    pub file_name: String,
    pub mime_type: Option<String>,
    pub size: u64,
}

/// A user's message, classified.
#[derive(Debug, Clone)]
pub(crate) struct Incoming {
    /// The channel it was posted in (the thread, for a thread message).
    pub channel_id: u64,
    pub message_id: u64,
    /// `None` for a direct message.
    pub guild_id: Option<u64>,
    pub author: Author,
    pub text: String,
    /// The bot is in `mentions`.
    pub mentions_bot: bool,
    /// Roles mentioned; the ingress checks them against the roles the bot holds.
    pub mention_roles: Vec<u64>,
    /// A reply to one of the bot's messages.
    pub replies_to_bot: bool,
    /// The id of the message this one replies to (also when Discord no longer has it).
    pub reply_to: Option<u64>,
    /// The message this one replies to, when Discord sent it along.
    pub replied_to: Option<RepliedTo>,
    pub attachments: Vec<Attachment>,
    /// More of a burst may follow: a forward, a text split at the length limit.
    pub burst: bool,
}

impl Incoming {
    /// A message of text only: addressing nobody, replying to nothing, nothing attached.
    pub fn text(channel_id: u64, message_id: u64, guild_id: Option<u64>, author: Author, text: String) -> Incoming {
        Incoming {
            channel_id,
            message_id,
            guild_id,
            author,
            text,
            mentions_bot: false,
            mention_roles: Vec::new(),
            replies_to_bot: false,
            reply_to: None,
            replied_to: None,
            attachments: Vec::new(),
            burst: false,
        }
    }

    pub fn is_direct(&self) -> bool {
        self.guild_id.is_none()
    }
}

/// Why a message is not one the bot could answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// The bot's own message (echoed by the gateway).
    Own,
    /// No text and no attachment: system messages, embeds only, stickers.
    NoContent,
}

/// Classifies a message for the bot with id `bot_id`.
pub(crate) fn classify(msg: &Message, bot_id: u64) -> Result<Incoming, Skip> {
    if msg.author.id.get() == bot_id {
        return Err(Skip::Own);
    }
    let attachments: Vec<Attachment> = msg.attachments.iter().map(|a| attachment(a, is_voice_message(msg))).collect();
    if msg.content.trim().is_empty() && attachments.is_empty() {
        return Err(Skip::NoContent);
    }
    let replies_to_bot = msg.referenced_message.as_ref().is_some_and(|replied| replied.author.id.get() == bot_id);
    // Only a reply (type 19) answers a message; other references are forwards, crossposts, pins.
    let is_reply = msg.kind == MessageType::InlineReply;
    let reply_to = msg.message_reference.as_ref().and_then(|reference| reference.message_id).filter(|_| is_reply);
    let replied_to =
        msg.referenced_message.as_deref().filter(|_| is_reply).map(|replied| replied_message(replied, bot_id));
    Ok(Incoming {
        channel_id: msg.channel_id.get(),
        message_id: msg.id.get(),
        guild_id: msg.guild_id.map(|id| id.get()),
        author: author(&msg.author),
        text: msg.content.clone(),
        mentions_bot: msg.mentions.iter().any(|user| user.id.get() == bot_id),
        mention_roles: msg.mention_roles.iter().map(|role| role.get()).collect(),
        replies_to_bot,
        reply_to: reply_to.map(|id| id.get()),
        replied_to,
        attachments,
        // A reference that is no reply is a forward (or crosspost); a text near the 2,000
        // characters a message holds was likely split by the person.
        burst: (!is_reply && msg.message_reference.is_some()) || msg.content.chars().count() >= SPLIT_TEXT_CHARS,
    })
}

/// Texts this long were likely cut at Discord's 2,000 characters by their sender.
const SPLIT_TEXT_CHARS: usize = 1900;

/// A replied-to message for the bus: its author, its text (else its first attachment's kind).
fn replied_message(replied: &Message, bot_id: u64) -> RepliedTo {
    let author = author(&replied.author);
    let sender = Sender { id: author.id.to_string(), name: author.name, is_bot: author.is_bot };
    let text = match replied.attachments.first() {
        _ if !replied.content.trim().is_empty() => replied.content.clone(),
        Some(first) => format!("[{}]", attachment(first, is_voice_message(replied)).kind),
        None => String::new(),
    };
    RepliedTo::new(replied.id.get().to_string(), sender, author.id == bot_id, &text, None)
}

pub(crate) fn author(user: &User) -> Author {
    Author {
        id: user.id.get(),
        username: user.name.clone(),
        name: user.global_name.clone().filter(|name| !name.trim().is_empty()).unwrap_or_else(|| user.name.clone()),
        is_bot: user.bot,
    }
}

/// A voice message (recorded in the app, flag `IS_VOICE_MESSAGE`): its one attachment is the
/// recording, `audio/ogg`. Audio files sent as attachments carry no such flag.
fn is_voice_message(msg: &Message) -> bool {
    msg.flags.is_some_and(|flags| flags.contains(MessageFlags::IS_VOICE_MESSAGE))
}

fn attachment(attachment: &serenity::all::Attachment, in_voice_message: bool) -> Attachment {
    let mime_type = attachment.content_type.clone();
    let is_type = |prefix: &str| mime_type.as_deref().is_some_and(|mime| mime.starts_with(prefix));
    let kind = if is_type("image/") {
        "photo"
    } else if in_voice_message && is_type("audio/") {
        "voice"
    } else {
        "document"
    };
    Attachment {
        kind,
        url: attachment.url.clone(),
        file_name: attachment.filename.clone(),
        mime_type,
        size: u64::from(attachment.size),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const BOT: u64 = 5000;

    fn message(extra: Value) -> Message {
        let mut value = json!({
            "id": "10", "channel_id": "200", "guild_id": "100",
            "author": {"id": "111", "username": "alice", "global_name": "Alice", "discriminator": "0", "avatar": null},
            "content": "hello", "timestamp": "2024-01-01T00:00:00.000000+00:00", "edited_timestamp": null,
            "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
            "embeds": [], "pinned": false, "type": 0,
        });
        if let (Some(target), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
            target.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_guild_message_is_classified() {
        let msg = classify(&message(json!({"mention_roles": ["7"]})), BOT).unwrap();
        assert_eq!((msg.channel_id, msg.message_id, msg.guild_id), (200, 10, Some(100)));
        assert_eq!(msg.author, Author { id: 111, username: "alice".into(), name: "Alice".into(), is_bot: false });
        assert_eq!(msg.mention_roles, [7]);
        assert!(!msg.mentions_bot && !msg.replies_to_bot && !msg.is_direct());
    }

    #[test]
    fn own_and_empty_messages_are_skipped() {
        let own = message(
            json!({"author": {"id": "5000", "username": "switchboard", "discriminator": "0", "avatar": null, "bot": true}}),
        );
        assert_eq!(classify(&own, BOT).unwrap_err(), Skip::Own);
        assert_eq!(classify(&message(json!({"content": "  "})), BOT).unwrap_err(), Skip::NoContent);
    }

    #[test]
    fn mentions_replies_and_attachments_are_seen() {
        let bot = json!({"id": "5000", "username": "switchboard", "discriminator": "0", "avatar": null, "bot": true});
        let mut replied = serde_json::to_value(message(json!({"author": bot.clone()}))).unwrap();
        replied["referenced_message"] = Value::Null;
        let msg = classify(
            &message(json!({
                "content": "",
                "mentions": [bot],
                "referenced_message": replied,
                "attachments": [{"id": "1", "filename": "cat.png", "size": 3, "url": "http://x/cat.png",
                                 "proxy_url": "http://x/cat.png", "content_type": "image/png"},
                                {"id": "2", "filename": "a.pdf", "size": 4, "url": "http://x/a.pdf",
                                 "proxy_url": "http://x/a.pdf"}],
            })),
            BOT,
        )
        .unwrap();
        assert!(msg.mentions_bot && msg.replies_to_bot);
        // Not a reply (type 0): the reference is not taken for one.
        assert_eq!((msg.reply_to, msg.replied_to), (None, None));
        assert_eq!(msg.attachments[0].kind, "photo");
        assert_eq!(msg.attachments[1].kind, "document");
        assert_eq!(msg.attachments[1].size, 4);
    }

    #[test]
    fn a_voice_message_is_a_voice_note_and_an_audio_file_stays_a_document() {
        let recording = json!({"id": "1", "filename": "voice-message.ogg", "size": 9000,
            "url": "http://x/voice-message.ogg", "proxy_url": "http://x/voice-message.ogg",
            "content_type": "audio/ogg", "duration_secs": 3.5, "waveform": "AAAA"});
        let voice = message(json!({"content": "", "flags": 8192, "attachments": [recording.clone()]}));
        let voice = classify(&voice, BOT).unwrap();
        assert_eq!(
            (voice.attachments[0].kind, voice.attachments[0].mime_type.as_deref()),
            ("voice", Some("audio/ogg"))
        );
        let file = classify(&message(json!({"content": "", "attachments": [recording]})), BOT).unwrap();
        assert_eq!(file.attachments[0].kind, "document");
    }

    #[test]
    fn a_reply_carries_the_replied_message() {
        let bob = json!({"id": "222", "username": "bob", "global_name": "Bobby", "discriminator": "0", "avatar": null});
        let mut replied =
            serde_json::to_value(message(json!({"id": "9", "author": bob, "content": "meet at 6?"}))).unwrap();
        replied["referenced_message"] = Value::Null;
        let reference = json!({"type": 0, "message_id": "9", "channel_id": "200", "guild_id": "100"});
        let msg = message(json!({"type": 19, "message_reference": reference.clone(), "referenced_message": replied}));
        let msg = classify(&msg, BOT).unwrap();
        assert_eq!(msg.reply_to, Some(9));
        let replied = msg.replied_to.unwrap();
        assert_eq!(replied.sender, Sender { id: "222".into(), name: "Bobby".into(), is_bot: false });
        assert_eq!((replied.message_id.as_str(), replied.text.as_str()), ("9", "meet at 6?"));
        assert!(!replied.from_self && replied.quote.is_none());
        // A reply to a deleted message still says which one it answered.
        let deleted = classify(&message(json!({"type": 19, "message_reference": reference})), BOT).unwrap();
        assert_eq!((deleted.reply_to, deleted.replied_to), (Some(9), None));
    }
}
