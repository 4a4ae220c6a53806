//! Builders for realistic incoming messages (JSON shaped like Telegram's), to pass to
//! [`FakeTelegram::push_message`](super::FakeTelegram::push_message). Message ids are the
//! caller's; the modifiers take a message and return it changed. Entity offsets and lengths are
//! in UTF-16 code units, as Telegram counts them.

use serde_json::{Value, json};

use super::{BOT_FIRST_NAME, BOT_ID, BOT_USERNAME, wire};

/// A human user: `first_name` is the username with its first letter upper-cased.
pub fn user(user_id: i64, username: &str) -> Value {
    json!({ "id": user_id, "is_bot": false, "first_name": first_name(username), "username": username })
}

fn first_name(username: &str) -> String {
    let mut chars = username.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_else(|| "User".to_owned())
}

fn text_message(chat: Value, from: Value, message_id: i64, text: &str) -> Value {
    json!({ "message_id": message_id, "date": wire::now(), "chat": chat, "from": from, "text": text })
}

/// A text message in a private chat (the chat id is the user's id).
pub fn private_text(chat_and_user_id: i64, username: &str, message_id: i64, text: &str) -> Value {
    let chat = json!({
        "id": chat_and_user_id, "type": "private", "first_name": first_name(username), "username": username,
    });
    text_message(chat, user(chat_and_user_id, username), message_id, text)
}

/// A text message in a supergroup (`chat_id` negative, e.g. -1001234567890).
pub fn group_text(chat_id: i64, user_id: i64, username: &str, message_id: i64, text: &str) -> Value {
    let chat = json!({ "id": chat_id, "type": "supergroup", "title": "Test Group" });
    text_message(chat, user(user_id, username), message_id, text)
}

/// A text message in a forum topic; like Telegram, it carries a `reply_to_message` pointing at the
/// topic's `forum_topic_created` service message (replace it with [`reply_to`] for a real reply).
pub fn topic_text(chat_id: i64, thread_id: i64, user_id: i64, username: &str, message_id: i64, text: &str) -> Value {
    let chat = json!({ "id": chat_id, "type": "supergroup", "title": "Test Forum", "is_forum": true });
    let mut message = text_message(chat.clone(), user(user_id, username), message_id, text);
    message["message_thread_id"] = json!(thread_id);
    message["is_topic_message"] = json!(true);
    message["reply_to_message"] = json!({
        "message_id": thread_id,
        "date": wire::now(),
        "chat": chat,
        "from": user(user_id, username),
        "message_thread_id": thread_id,
        "is_topic_message": true,
        "forum_topic_created": { "name": "Test Topic", "icon_color": 7_322_096 },
    });
    message
}

/// Sets `entities` (or `caption_entities` on a message with a caption and no text).
pub fn with_entities(mut message: Value, entities: Value) -> Value {
    let key = entities_key(&message);
    message[key] = entities;
    message
}

/// `caption_entities` for a captioned message without text, else `entities`.
fn entities_key(message: &Value) -> &'static str {
    if message.get("text").is_none() && message.get("caption").is_some() { "caption_entities" } else { "entities" }
}

/// Appends one entity to `entities` (or `caption_entities`).
fn add_entity(mut message: Value, entity: Value) -> Value {
    let key = entities_key(&message);
    match message.get_mut(key).and_then(Value::as_array_mut) {
        Some(entities) => entities.push(entity),
        None => message[key] = json!([entity]),
    }
    message
}

/// The message's text, or its caption.
fn text_of(message: &Value) -> &str {
    message.get("text").or_else(|| message.get("caption")).and_then(Value::as_str).unwrap_or_default()
}

fn utf16_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// Adds a `mention` entity over the first `@username` in the text; panics if there is none.
pub fn mention_of(message: Value, username: &str) -> Value {
    let mention = format!("@{}", username.trim_start_matches('@'));
    let text = text_of(&message);
    let start = text.find(&mention).unwrap_or_else(|| panic!("mention_of: {mention:?} not in {text:?}"));
    let entity = json!({ "type": "mention", "offset": utf16_len(&text[..start]), "length": utf16_len(&mention) });
    add_entity(message, entity)
}

/// Adds a `text_mention` entity (a mention of a user without a username) at UTF-16 `offset`.
pub fn text_mention_of(message: Value, user_id: i64, first_name: &str, offset: usize, length: usize) -> Value {
    let user = json!({ "id": user_id, "is_bot": user_id == BOT_ID, "first_name": first_name });
    add_entity(message, json!({ "type": "text_mention", "offset": offset, "length": length, "user": user }))
}

/// Adds a `bot_command` entity over the leading `/cmd` or `/cmd@bot`; panics if the text has none.
pub fn bot_command(message: Value) -> Value {
    let text = text_of(&message);
    assert!(text.starts_with('/'), "bot_command: {text:?} does not start with '/'");
    let command = text.split_whitespace().next().unwrap_or_default();
    let entity = json!({ "type": "bot_command", "offset": 0, "length": utf16_len(command) });
    add_entity(message, entity)
}

/// Sets `reply_to_message`.
pub fn reply_to(mut message: Value, replied: Value) -> Value {
    message["reply_to_message"] = replied;
    message
}

/// Sets `quote`: the part of the replied-to message the sender selected, with its offset in
/// that message in UTF-16 units, as Telegram sends it beside `reply_to_message`.
pub fn with_quote(mut message: Value, text: &str, position: usize) -> Value {
    message["quote"] = json!({ "text": text, "position": position, "is_manual": true });
    message
}

/// A message the bot itself sent (`from` = the bot), to use with [`reply_to`].
pub fn from_bot(chat_id: i64, message_id: i64, text: &str) -> Value {
    let chat = if chat_id > 0 {
        json!({ "id": chat_id, "type": "private", "first_name": "User" })
    } else {
        json!({ "id": chat_id, "type": "supergroup", "title": "Test Group" })
    };
    let bot = json!({ "id": BOT_ID, "is_bot": true, "first_name": BOT_FIRST_NAME, "username": BOT_USERNAME });
    text_message(chat, bot, message_id, text)
}

/// A `callback_query` for a press on a button of `message` (a bot message, e.g. from
/// [`from_bot`] or a `sendMessage` result) by `from` (see [`user`]), to pass to
/// [`FakeTelegram::push_callback_query`](super::FakeTelegram::push_callback_query); an empty
/// `id` lets the fake pick one. `chat_instance` is derived from the chat id.
pub fn callback_query(id: &str, from: Value, message: Value, data: &str) -> Value {
    let chat_id = message.pointer("/chat/id").and_then(Value::as_i64).unwrap_or_default();
    json!({
        "id": id,
        "from": from,
        "message": message,
        "chat_instance": format!("{}", chat_id.wrapping_mul(-7919).wrapping_add(1_000_003)),
        "data": data,
    })
}

/// Turns a message's `text` (if any, non-empty) into its caption, as media messages have no text.
fn text_to_caption(mut message: Value) -> Value {
    let Some(object) = message.as_object_mut() else { return message };
    let text = object.remove("text");
    let entities = object.remove("entities");
    if let Some(text) = text.filter(|text| text.as_str().is_some_and(|text| !text.is_empty())) {
        object.insert("caption".to_owned(), text);
        if let Some(entities) = entities {
            object.insert("caption_entities".to_owned(), entities);
        }
    }
    message
}

fn file_meta(file_id: &str, size: u64) -> Value {
    json!({ "file_id": file_id, "file_unique_id": format!("u-{file_id}"), "file_size": size })
}

/// Adds `photo`: a 90×67 thumbnail (`{file_id}-thumb`) and the 1280×960 original (`file_id`, last);
/// any text becomes the caption.
pub fn photo(message: Value, file_id: &str, size: u64) -> Value {
    let mut message = text_to_caption(message);
    let mut thumb = file_meta(&format!("{file_id}-thumb"), size / 20 + 1);
    thumb["width"] = json!(90);
    thumb["height"] = json!(67);
    let mut full = file_meta(file_id, size);
    full["width"] = json!(1280);
    full["height"] = json!(960);
    message["photo"] = json!([thumb, full]);
    message
}

/// Adds `document`; any text becomes the caption.
pub fn document(message: Value, file_id: &str, file_name: &str, mime: &str, size: u64) -> Value {
    let mut message = text_to_caption(message);
    let mut document = file_meta(file_id, size);
    document["file_name"] = json!(file_name);
    document["mime_type"] = json!(mime);
    message["document"] = document;
    message
}

/// Adds `voice` (audio/ogg); any text becomes the caption.
pub fn voice(message: Value, file_id: &str, duration: u32, size: u64) -> Value {
    let mut message = text_to_caption(message);
    let mut voice = file_meta(file_id, size);
    voice["duration"] = json!(duration);
    voice["mime_type"] = json!("audio/ogg");
    message["voice"] = voice;
    message
}

/// Sets `caption` (removing `text`, which media messages do not have).
pub fn with_caption(mut message: Value, caption: &str) -> Value {
    if let Some(object) = message.as_object_mut() {
        object.remove("text");
    }
    message["caption"] = json!(caption);
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mention_offsets_count_utf16_units() {
        let message = mention_of(private_text(1, "ann", 1, "😀 hi @switchboard_test_bot!"), "switchboard_test_bot");
        assert_eq!(message["entities"], json!([{ "type": "mention", "offset": 6, "length": 21 }]));
    }

    #[test]
    fn photo_moves_text_into_the_caption() {
        let message = photo(private_text(1, "ann", 1, "look"), "ph", 2000);
        assert_eq!((message.get("text"), &message["caption"]), (None, &json!("look")));
        assert_eq!(message["photo"][1]["file_id"], json!("ph"));
    }
}
