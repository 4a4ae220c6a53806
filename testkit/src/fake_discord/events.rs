//! Builders for realistic gateway payloads (JSON shaped like Discord's), to pass to
//! [`FakeDiscord::send_message_create`](super::FakeDiscord::send_message_create) and
//! [`FakeDiscord::add_channel`](super::FakeDiscord::add_channel). Ids are the caller's and are
//! written as strings, as Discord does; the modifiers take a message and return it changed.
//! Every builder deserializes as serenity's `Message`/`Channel` (see the testkit's tests).

use serde_json::{Value, json};

use super::{APPLICATION_ID, BOT_ID, wire};

/// The id [`by_other_bot`] gives a message whose author was the fake's own bot.
pub const OTHER_BOT_ID: u64 = 6000;

/// A human user: `global_name` is the username with its first letter upper-cased.
pub fn user(id: u64, name: &str) -> Value {
    json!({
        "id": id.to_string(),
        "username": name,
        "discriminator": "0",
        "global_name": display_name(name),
        "avatar": null,
        "bot": false,
    })
}

fn display_name(name: &str) -> String {
    let mut chars = name.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_else(|| "User".to_owned())
}

/// A default (type 0) text message with every field serenity requires.
fn message(channel_id: u64, author: Value, message_id: u64, content: &str) -> Value {
    json!({
        "id": message_id.to_string(),
        "channel_id": channel_id.to_string(),
        "author": author,
        "content": content,
        "timestamp": wire::now_iso(),
        "edited_timestamp": null,
        "tts": false,
        "mention_everyone": false,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": false,
        "type": 0,
        "flags": 0,
        "components": [],
    })
}

/// A message in a guild text channel (or thread), with `guild_id` and `member.roles = []`.
pub fn guild_message(
    guild_id: u64,
    channel_id: u64,
    author_id: u64,
    author_name: &str,
    message_id: u64,
    content: &str,
) -> Value {
    let mut message = message(channel_id, user(author_id, author_name), message_id, content);
    message["guild_id"] = json!(guild_id.to_string());
    message["member"] = json!({
        "roles": [],
        "joined_at": "2024-01-01T00:00:00.000000+00:00",
        "deaf": false,
        "mute": false,
        "flags": 0,
        "pending": false,
        "nick": null,
    });
    message
}

/// A direct message: no `guild_id`, no `member`.
pub fn dm_message(channel_id: u64, author_id: u64, author_name: &str, message_id: u64, content: &str) -> Value {
    message(channel_id, user(author_id, author_name), message_id, content)
}

/// Adds a user to `mentions` (the fake's bot for [`BOT_ID`], else `user{id}`); the `<@id>` text is the caller's.
pub fn mentioning_user(mut message: Value, user_id: u64) -> Value {
    let mentioned = if user_id == BOT_ID { wire::bot_user() } else { user(user_id, &format!("user{user_id}")) };
    push(&mut message, "mentions", mentioned);
    message
}

/// Adds a role id to `mention_roles`; the `<@&id>` text is the caller's.
pub fn mentioning_role(mut message: Value, role_id: u64) -> Value {
    push(&mut message, "mention_roles", json!(role_id.to_string()));
    message
}

fn push(message: &mut Value, key: &str, item: Value) {
    match message.get_mut(key).and_then(Value::as_array_mut) {
        Some(items) => items.push(item),
        None => message[key] = json!([item]),
    }
}

/// Makes `message` a reply (type 19) to `replied`: `message_reference` plus `referenced_message`.
pub fn replying_to(mut message: Value, mut replied: Value) -> Value {
    if let Some(object) = replied.as_object_mut() {
        object.insert("referenced_message".to_owned(), Value::Null);
    }
    let mut reference = json!({
        "type": 0,
        "message_id": replied["id"],
        "channel_id": replied["channel_id"],
        "fail_if_not_exists": false,
    });
    if let Some(guild_id) = message.get("guild_id").filter(|id| !id.is_null()) {
        reference["guild_id"] = guild_id.clone();
    }
    message["message_reference"] = reference;
    message["referenced_message"] = replied;
    message["type"] = json!(19);
    message
}

/// The author becomes the fake's own bot (id 5000, `switchboard`).
pub fn from_bot(mut message: Value) -> Value {
    message["author"] = wire::bot_user();
    message
}

/// The author is flagged `bot: true`; an author that was the fake's bot becomes [`OTHER_BOT_ID`].
pub fn by_other_bot(mut message: Value) -> Value {
    if wire::snowflake(&message["author"]["id"]) == Some(BOT_ID) {
        message["author"] = user(OTHER_BOT_ID, "otherbot");
    }
    message["author"]["bot"] = json!(true);
    message
}

/// Adds an attachment (point `url` at the fake: [`FakeDiscord::add_attachment`](super::FakeDiscord::add_attachment)).
pub fn with_attachment(mut message: Value, id: u64, filename: &str, size: u64, url: &str) -> Value {
    let attachment = json!({
        "id": id.to_string(),
        "filename": filename,
        "size": size,
        "url": url,
        "proxy_url": url,
        "content_type": content_type(filename),
    });
    push(&mut message, "attachments", attachment);
    message
}

/// A MIME type guessed from a file name's extension.
pub(super) fn content_type(filename: &str) -> &'static str {
    let extension = filename.rsplit_once('.').map(|(_, extension)| extension.to_ascii_lowercase());
    match extension.as_deref() {
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("txt" | "md") => "text/plain; charset=utf-8",
        Some("json") => "application/json",
        Some("pdf") => "application/pdf",
        Some("ogg") => "audio/ogg",
        _ => "application/octet-stream",
    }
}

/// An `INTERACTION_CREATE` payload for a press on the button `custom_id` of `message` (a bot
/// message, as created through REST) by `user` (see [`user`]): type 3 (MESSAGE_COMPONENT),
/// with `member` in a guild or `user` in a DM, and every field serenity requires. An `id` of 0
/// or an empty `token` let [`FakeDiscord::dispatch_interaction`](super::FakeDiscord::dispatch_interaction) pick them.
pub fn button_interaction(
    id: u64,
    token: &str,
    guild_id: Option<u64>,
    message: Value,
    user: Value,
    custom_id: &str,
) -> Value {
    let channel_id = wire::snowflake(&message["channel_id"]).unwrap_or_default();
    let data = json!({ "custom_id": custom_id, "component_type": 2 });
    let mut interaction = interaction(3, (id, token), guild_id, channel_id, user, data);
    interaction["message"] = message;
    interaction
}

/// An `INTERACTION_CREATE` payload for the slash command `command` (as Discord lists it after
/// a `PUT`: its `id`, `name`, `guild_id` for a server's own) used by `user` in `channel_id` of
/// `guild_id` (a DM for `None`), with `options` (`{"name", "type", "value"}`): type 2
/// (APPLICATION_COMMAND). Ids as for [`button_interaction`].
pub fn command_interaction(
    (id, token): (u64, &str),
    guild_id: Option<u64>,
    channel_id: u64,
    user: Value,
    command: &Value,
    options: Vec<Value>,
) -> Value {
    let mut data = json!({ "id": command["id"], "name": command["name"], "type": 1, "options": options });
    if let Some(guild) = command.get("guild_id").filter(|guild| !guild.is_null()) {
        data["guild_id"] = guild.clone();
    }
    interaction(2, (id, token), guild_id, channel_id, user, data)
}

/// The fields every interaction of type `kind` carries.
fn interaction(
    kind: u8,
    (id, token): (u64, &str),
    guild_id: Option<u64>,
    channel_id: u64,
    user: Value,
    data: Value,
) -> Value {
    let mut interaction = json!({
        "id": id.to_string(),
        "application_id": APPLICATION_ID.to_string(),
        "type": kind,
        "data": data,
        "channel_id": channel_id.to_string(),
        "channel": { "id": channel_id.to_string(), "type": if guild_id.is_some() { 0 } else { 1 } },
        "token": token,
        "version": 1,
        "app_permissions": "2248473465835073",
        "locale": "en-US",
        "entitlements": [],
        "attachment_size_limit": 26_214_400,
    });
    match guild_id {
        Some(guild_id) => {
            interaction["guild_id"] = json!(guild_id.to_string());
            interaction["guild_locale"] = json!("en-US");
            interaction["member"] = interaction_member(user);
            interaction["authorizing_integration_owners"] = json!({ "0": guild_id.to_string() });
            interaction["context"] = json!(0);
        }
        None => {
            interaction["user"] = user;
            interaction["authorizing_integration_owners"] = json!({ "0": "0" });
            interaction["context"] = json!(1);
        }
    }
    interaction
}

/// A guild member as interactions carry it: with its `user` and `permissions`.
fn interaction_member(user: Value) -> Value {
    json!({
        "user": user,
        "roles": [],
        "joined_at": "2024-01-01T00:00:00.000000+00:00",
        "deaf": false,
        "mute": false,
        "flags": 0,
        "pending": false,
        "nick": null,
        "avatar": null,
        "permissions": "2248473465835073",
    })
}

/// A guild text channel (type 0) named `general`.
pub fn text_channel(guild_id: u64, channel_id: u64) -> Value {
    json!({
        "id": channel_id.to_string(),
        "type": 0,
        "guild_id": guild_id.to_string(),
        "name": "general",
        "position": 0,
        "permission_overwrites": [],
        "nsfw": false,
        "topic": null,
        "last_message_id": null,
        "parent_id": null,
        "rate_limit_per_user": 0,
        "flags": 0,
    })
}

/// A public thread (type 11) under `parent_id`.
pub fn thread(guild_id: u64, thread_id: u64, parent_id: u64) -> Value {
    json!({
        "id": thread_id.to_string(),
        "type": 11,
        "guild_id": guild_id.to_string(),
        "parent_id": parent_id.to_string(),
        "name": "thread",
        "owner_id": BOT_ID.to_string(),
        "last_message_id": null,
        "rate_limit_per_user": 0,
        "message_count": 0,
        "member_count": 1,
        "flags": 0,
        "thread_metadata": {
            "archived": false,
            "auto_archive_duration": 1440,
            "archive_timestamp": "2024-01-01T00:00:00.000000+00:00",
            "locked": false,
        },
    })
}

/// A DM channel (type 1) with one recipient, `user{id}`.
pub fn dm_channel(channel_id: u64, user_id: u64) -> Value {
    json!({
        "id": channel_id.to_string(),
        "type": 1,
        "last_message_id": null,
        "recipients": [user(user_id, &format!("user{user_id}"))],
        "flags": 0,
    })
}
