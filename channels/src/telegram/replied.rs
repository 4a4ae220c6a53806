//! The message a Telegram message replies to, for the bus's `replied_to`: its author, its text
//! or caption (a marker such as `[photo]` when it has neither), and the fragment quoted.

use teloxide::types::{Message, UserId};

use crate::contract::{RepliedTo, Sender};

/// The replied-to message of `msg`, if it answers one in the same chat; `me` is the bot.
pub(crate) fn replied_to(msg: &Message, me: UserId) -> Option<RepliedTo> {
    // In a forum topic, a message that replies to nothing "replies" to the topic's creation
    // message: not a message anyone answered.
    let replied = msg.reply_to_message().filter(|replied| replied.forum_topic_created().is_none())?;
    let from_self = replied.from.as_ref().is_some_and(|from| from.id == me);
    let text = match replied.text().or_else(|| replied.caption()) {
        Some(text) => text.to_owned(),
        None => marker(replied),
    };
    let quote = msg.quote().map(|quote| quote.text.as_str());
    Some(RepliedTo::new(replied.id.0.to_string(), author(replied), from_self, &text, quote))
}

/// Who wrote a message: a channel or an anonymous admin speaks as its chat, else its user.
fn author(msg: &Message) -> Sender {
    if let Some(chat) = &msg.sender_chat {
        let name = chat.title().or_else(|| chat.username()).unwrap_or_default();
        return Sender { id: chat.id.0.to_string(), name: name.to_owned(), is_bot: false };
    }
    match &msg.from {
        Some(user) => Sender { id: user.id.0.to_string(), name: user.full_name(), is_bot: user.is_bot },
        None => Sender::default(),
    }
}

/// What stands for a message without text: the kind of file it carries (named as attachments
/// are on the bus), a sticker's emoji.
fn marker(msg: &Message) -> String {
    let kinds = [
        (msg.photo().is_some(), "[photo]"),
        (msg.document().is_some(), "[document]"),
        (msg.voice().is_some(), "[voice]"),
        (msg.audio().is_some(), "[audio]"),
        (msg.video().is_some(), "[video]"),
    ];
    if let Some((_, marker)) = kinds.iter().find(|(present, _)| *present) {
        return (*marker).to_owned();
    }
    match msg.sticker().map(|sticker| sticker.emoji.as_deref()) {
        Some(Some(emoji)) => format!("[sticker {emoji}]"),
        Some(None) => "[sticker]".to_owned(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const ME: UserId = UserId(5000);

    fn message(extra: Value) -> Message {
        let mut value = json!({"message_id": 7, "date": 1764000000,
            "chat": {"id": -100123, "type": "supergroup", "title": "G"},
            "from": {"id": 111, "is_bot": false, "first_name": "Alice"}, "text": "what?"});
        if let (Some(target), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
            target.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap()
    }

    fn bob(extra: Value) -> Value {
        let mut value = json!({"message_id": 6, "date": 1764000000,
            "chat": {"id": -100123, "type": "supergroup", "title": "G"},
            "from": {"id": 222, "is_bot": false, "first_name": "Bob", "last_name": "B"}});
        if let (Some(target), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
            target.extend(extra.clone());
        }
        value
    }

    #[test]
    fn a_reply_carries_the_author_the_text_and_the_quote() {
        let quote = json!({"text": "at six", "position": 9, "is_manual": true});
        let msg = message(json!({"reply_to_message": bob(json!({"text": "let's meet at six"})), "quote": quote}));
        let replied = replied_to(&msg, ME).unwrap();
        assert_eq!(replied.message_id, "6");
        assert_eq!(replied.sender, Sender { id: "222".into(), name: "Bob B".into(), is_bot: false });
        assert_eq!((replied.text.as_str(), replied.quote.as_deref()), ("let's meet at six", Some("at six")));
        assert!(!replied.from_self);
    }

    #[test]
    fn photos_use_their_caption_or_a_marker() {
        let photo = json!([{"file_id": "p", "file_unique_id": "u", "width": 90, "height": 67, "file_size": 10}]);
        let captioned = message(json!({"reply_to_message": bob(json!({"photo": photo, "caption": "the view"}))}));
        assert_eq!(replied_to(&captioned, ME).unwrap().text, "the view");
        let bare = message(json!({"reply_to_message": bob(json!({"photo": photo}))}));
        assert_eq!(replied_to(&bare, ME).unwrap().text, "[photo]");
    }

    #[test]
    fn the_bots_own_messages_and_topic_creation_are_told_apart() {
        let own = json!({"message_id": 6, "date": 1764000000, "chat": {"id": -100123, "type": "supergroup", "title": "G"},
            "from": {"id": 5000, "is_bot": true, "first_name": "Helper"}, "text": "earlier answer"});
        let replied = replied_to(&message(json!({"reply_to_message": own})), ME).unwrap();
        assert!(replied.from_self && replied.sender.is_bot);
        let created = bob(json!({"forum_topic_created": {"name": "Plans", "icon_color": 7322096}}));
        let in_topic = message(json!({"reply_to_message": created, "message_thread_id": 6, "is_topic_message": true}));
        assert_eq!(replied_to(&in_topic, ME), None);
        assert_eq!(replied_to(&message(json!({})), ME), None);
    }
}
