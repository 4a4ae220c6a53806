//! What a Telegram message is, as far as routing and gating care: which chat and topic, who
//! wrote it, whether it addresses the bot, and what it carries.

use chrono::{DateTime, Utc};
use teloxide::types::{Message, MessageEntity, MessageEntityKind, MessageEntityRef, User, UserId};

use super::replied::replied_to;
use crate::contract::{RepliedTo, commands};

/// The bot's own identity, from `getMe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BotIdentity {
    pub id: UserId,
    /// Without the `@`.
    pub username: String,
}

/// The command the Telegram adapter answers itself (besides `/help`): Telegram's greeting.
pub(crate) const START: &str = "start";

/// A bare `/command` in a group counts as addressed to the bot only for known commands.
pub(crate) fn is_known_command(name: &str) -> bool {
    name.eq_ignore_ascii_case(START) || commands::find(name).is_some()
}

/// How a message addresses the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Address {
    /// An `@botname` mention or a text mention of the bot.
    Mention,
    /// A reply to one of the bot's messages.
    Reply,
    /// `/command@botname`, or a bare known `/command`.
    Command,
    /// Not addressed (a private chat is always addressed: see [`Incoming::addressed`]).
    None,
}

/// Who wrote a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Author {
    pub id: u64,
    pub username: Option<String>,
    pub name: String,
    pub is_bot: bool,
}

/// A file attached to a message, not downloaded yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attachment {
    /// `photo`, `document`, `voice`, `audio` or `video`.
    pub kind: &'static str,
    pub file_id: String,
    pub file_name: Option<String>,
    pub mime_type: Option<String>,
    pub size: u64,
}

/// A user's message, classified.
#[derive(Debug, Clone)]
pub(crate) struct Incoming {
    pub chat_id: i64,
    /// The forum topic, when the message is in one.
    pub topic: Option<i32>,
    pub message_id: i32,
    pub private: bool,
    pub chat_type: &'static str,
    pub chat_title: Option<String>,
    pub author: Author,
    /// Text or caption; a leading `/command@botname` is shortened to `/command`.
    pub text: String,
    /// The leading command addressed to this bot, lower case and without the slash.
    pub command: Option<String>,
    pub address: Address,
    pub attachments: Vec<Attachment>,
    /// The message this one replies to.
    pub replied_to: Option<RepliedTo>,
    pub date: DateTime<Utc>,
    /// More of a burst may follow: a forward, a photo of an album, a text split by the client.
    pub burst: bool,
}

impl Incoming {
    /// Whether the bot should treat the message as spoken to it.
    pub fn addressed(&self) -> bool {
        self.private || self.address != Address::None
    }

    /// This message's conversation (chat and topic), as its session key.
    pub fn place(&self) -> String {
        crate::contract::session_key(
            super::CHANNEL,
            &self.chat_id.to_string(),
            self.topic.map(|t| t.to_string()).as_deref(),
        )
    }
}

/// Why a message is not a user message the bot could answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Joins, pins, topic creation and other service messages; stickers and polls.
    NoContent,
    /// Channel posts and anonymous admins: no user to answer or check.
    NoAuthor,
    /// `/command@otherbot`: meant for another bot in the group.
    OtherBotsCommand,
}

/// Classifies a message for the bot `me`.
pub(crate) fn classify(msg: &Message, me: &BotIdentity) -> Result<Incoming, Skip> {
    let user = msg.from.as_ref().filter(|_| msg.sender_chat.is_none()).ok_or(Skip::NoAuthor)?;
    let (raw_text, raw_entities) = match (msg.text(), msg.caption()) {
        (Some(text), _) => (text, msg.entities()),
        (None, Some(caption)) => (caption, msg.caption_entities()),
        (None, None) => ("", None),
    };
    let sound = sound_entities(raw_text, raw_entities.unwrap_or_default());
    let entities = MessageEntityRef::parse(raw_text, &sound);
    let attachments = attachments(msg);
    if raw_text.trim().is_empty() && attachments.is_empty() {
        return Err(Skip::NoContent);
    }
    let leading = leading_command(raw_text, &entities);
    let (text, command) = match &leading {
        Some(cmd) if cmd.target.is_some_and(|bot| !bot.eq_ignore_ascii_case(&me.username)) => {
            return Err(Skip::OtherBotsCommand);
        }
        Some(cmd) => (format!("/{}{}", cmd.name, &raw_text[cmd.end..]), Some(cmd.name.to_ascii_lowercase())),
        None => (raw_text.to_owned(), None),
    };
    let address = address(msg, me, &entities, leading.as_ref());
    Ok(Incoming {
        chat_id: msg.chat.id.0,
        topic: msg.thread_id.filter(|_| msg.is_topic_message).map(|thread| thread.0.0),
        message_id: msg.id.0,
        private: msg.chat.is_private(),
        chat_type: chat_type(msg),
        chat_title: msg.chat.title().map(str::to_owned),
        author: author(user),
        text,
        command,
        address,
        attachments,
        replied_to: replied_to(msg, me.id),
        date: msg.date,
        burst: in_burst(msg, raw_text),
    })
}

/// Telegram's clients send a text longer than 4096 characters (UTF-16) as several messages;
/// a text this close to the limit was likely cut there.
const SPLIT_TEXT_UNITS: usize = 4000;

/// Whether more of a burst is likely to follow `msg`: it was forwarded (a forward of several
/// messages arrives as several), belongs to an album, or fills a message to the limit.
fn in_burst(msg: &Message, text: &str) -> bool {
    msg.forward_origin().is_some()
        || msg.media_group_id().is_some()
        || text.chars().map(char::len_utf16).sum::<usize>() >= SPLIT_TEXT_UNITS
}

/// The entities that start and end on character boundaries within the text. teloxide converts
/// their UTF-16 offsets without checking them: it asserts on an offset inside a character and
/// leaves one past the end unconverted (then `text()` may panic). Telegram sends none such; a
/// forged update could.
fn sound_entities(text: &str, entities: &[MessageEntity]) -> Vec<MessageEntity> {
    let boundaries: Vec<usize> = std::iter::once(0)
        .chain(text.chars().scan(0, |units, ch| {
            *units += ch.len_utf16();
            Some(*units)
        }))
        .collect();
    let on_boundary = |offset: usize| boundaries.binary_search(&offset).is_ok();
    entities
        .iter()
        .filter(|entity| {
            entity.offset.checked_add(entity.length).is_some_and(on_boundary) && on_boundary(entity.offset)
        })
        .cloned()
        .collect()
}

fn chat_type(msg: &Message) -> &'static str {
    if msg.chat.is_private() {
        "private"
    } else if msg.chat.is_supergroup() {
        "supergroup"
    } else if msg.chat.is_group() {
        "group"
    } else {
        "channel"
    }
}

fn author(user: &User) -> Author {
    Author { id: user.id.0, username: user.username.clone(), name: user.full_name(), is_bot: user.is_bot }
}

/// A `/command` or `/command@bot` at the very start of the text.
struct LeadingCommand<'a> {
    name: &'a str,
    target: Option<&'a str>,
    /// Byte offset in the text where the command token ends.
    end: usize,
}

fn leading_command<'a>(text: &'a str, entities: &[MessageEntityRef<'a>]) -> Option<LeadingCommand<'a>> {
    let entity = entities.iter().find(|e| matches!(e.kind(), MessageEntityKind::BotCommand) && e.start() == 0)?;
    let token = entity.text().strip_prefix('/')?;
    let (name, target) = match token.split_once('@') {
        Some((name, bot)) => (name, Some(bot)),
        None => (token, None),
    };
    // Entity offsets are UTF-16 but the command token is ASCII, so its byte length is its end.
    Some(LeadingCommand { name, target, end: entity.text().len().min(text.len()) })
}

fn address(
    msg: &Message,
    me: &BotIdentity,
    entities: &[MessageEntityRef<'_>],
    cmd: Option<&LeadingCommand>,
) -> Address {
    let mentioned = entities.iter().any(|entity| match entity.kind() {
        MessageEntityKind::Mention => entity.text().trim_start_matches('@').eq_ignore_ascii_case(&me.username),
        MessageEntityKind::TextMention { user } => user.id == me.id,
        _ => false,
    });
    if mentioned {
        return Address::Mention;
    }
    // In a forum topic, a message that replies to nothing "replies" to the topic's creation
    // message, which says nothing about the bot.
    let replied_to_bot = msg
        .reply_to_message()
        .filter(|replied| replied.forum_topic_created().is_none())
        .and_then(|replied| replied.from.as_ref())
        .is_some_and(|from| from.id == me.id);
    if replied_to_bot {
        return Address::Reply;
    }
    match cmd {
        Some(cmd) if cmd.target.is_some() => Address::Command,
        Some(cmd) if is_known_command(cmd.name) => Address::Command,
        _ => Address::None,
    }
}

fn attachments(msg: &Message) -> Vec<Attachment> {
    let mut found = Vec::new();
    // Telegram sends every size of a photo; the last is the largest.
    if let Some(photo) = msg.photo().and_then(<[_]>::last) {
        found.push(Attachment {
            kind: "photo",
            file_id: photo.file.id.0.clone(),
            file_name: None,
            mime_type: Some("image/jpeg".into()),
            size: u64::from(photo.file.size),
        });
    }
    if let Some(doc) = msg.document() {
        found.push(Attachment {
            kind: "document",
            file_id: doc.file.id.0.clone(),
            file_name: doc.file_name.clone(),
            mime_type: doc.mime_type.as_ref().map(ToString::to_string),
            size: u64::from(doc.file.size),
        });
    }
    if let Some(voice) = msg.voice() {
        found.push(Attachment {
            kind: "voice",
            file_id: voice.file.id.0.clone(),
            file_name: None,
            mime_type: voice.mime_type.as_ref().map(ToString::to_string),
            size: u64::from(voice.file.size),
        });
    }
    if let Some(audio) = msg.audio() {
        found.push(Attachment {
            kind: "audio",
            file_id: audio.file.id.0.clone(),
            file_name: audio.file_name.clone(),
            mime_type: audio.mime_type.as_ref().map(ToString::to_string),
            size: u64::from(audio.file.size),
        });
    }
    if let Some(video) = msg.video() {
        found.push(Attachment {
            kind: "video",
            file_id: video.file.id.0.clone(),
            file_name: video.file_name.clone(),
            mime_type: video.mime_type.as_ref().map(ToString::to_string),
            size: u64::from(video.file.size),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entity_past_the_end_of_the_text_is_ignored() {
        // Found by fuzzing: a mention reaching past the end of the text panicked in `text()`.
        let update: teloxide::types::Update = serde_json::from_str(
            r#"{"update_id": 1, "message": {"message_id": 7, "date": 1764000000,
                "chat": {"id": -100123, "type": "supergroup", "title": "G"},
                "from": {"id": 111, "is_bot": false, "first_name": "Alice"},
                "text": "hey @switchboard_bot what's up? \u00e9", "entities": [{"type": "mention", "offset": 4, "length": 38}]}}"#,
        )
        .unwrap();
        let teloxide::types::UpdateKind::Message(message) = &update.kind else { panic!("not a message") };
        let me = BotIdentity { id: UserId(5000), username: "switchboard_bot".into() };
        let msg = classify(message, &me).unwrap();
        assert_eq!(msg.text, "hey @switchboard_bot what's up? é");
        assert_eq!(msg.address, Address::None);
    }

    #[test]
    fn an_entity_inside_a_character_is_ignored() {
        // Found by fuzzing: an entity ending inside the surrogate pair of an emoji, and one
        // starting inside it, failed an assertion in teloxide; the sound mention still counts.
        let update: teloxide::types::Update = serde_json::from_str(
            r#"{"update_id": 1, "message": {"message_id": 7, "date": 1764000000,
                "chat": {"id": -100123, "type": "supergroup", "title": "G"},
                "from": {"id": 111, "is_bot": false, "first_name": "Alice"},
                "text": "\ud83d\ude00 @switchboard_bot", "entities": [{"type": "bold", "offset": 0, "length": 1},
                {"type": "italic", "offset": 1, "length": 2}, {"type": "mention", "offset": 3, "length": 16}]}}"#,
        )
        .unwrap();
        let teloxide::types::UpdateKind::Message(message) = &update.kind else { panic!("not a message") };
        let me = BotIdentity { id: UserId(5000), username: "switchboard_bot".into() };
        let msg = classify(message, &me).unwrap();
        assert_eq!(msg.address, Address::Mention);
    }
}
