//! The REST side's state and its routes (everything under `/api/v10` but the gateway socket).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::commands::Commands;
use super::direct::Directs;
use super::interactions::Interactions;
use super::wire::{self, Answer, snowflake};
use super::{BOT_ID, Failure, SentMessage, components, events};

/// Discord's limit on `content`, in characters.
const MAX_CONTENT_CHARS: usize = 2000;
/// Discord's limit on a message's `nonce`, in characters.
const MAX_NONCE_CHARS: usize = 25;
/// The bucket of Discord's global rate limit (every call of the bot).
const GLOBAL_BUCKET: &str = "global";

/// A file part of a multipart request (`files[n]`).
#[derive(Debug, Clone)]
pub(super) struct Upload {
    pub(super) file_name: String,
    pub(super) bytes: Vec<u8>,
}

pub(super) struct State {
    /// `http://127.0.0.1:PORT`.
    base_url: String,
    pub(super) sent_log: Vec<SentMessage>,
    pub(super) failures: HashMap<String, VecDeque<Failure>>,
    /// Guild id → the roles the bot's member holds.
    pub(super) guilds: BTreeMap<u64, Vec<u64>>,
    /// Guild id → its boost level, where not 0.
    pub(super) premium_tiers: HashMap<u64, u8>,
    channels: HashMap<u64, Value>,
    /// Messages the bot created, by (channel id, message id).
    pub(super) created: HashMap<(u64, u64), Value>,
    /// Messages dispatched to the bot, by id (for `referenced_message`).
    seen: HashMap<u64, Value>,
    attachments: HashMap<String, Vec<u8>>,
    /// Nonces of messages created with `enforce_nonce`, and the message each created.
    nonces: HashMap<String, (u64, u64)>,
    /// Rate limits in force: bucket (`METHOD /path`, or the global one) → until when, and
    /// whether it is the global limit.
    limits: HashMap<String, (Instant, bool)>,
    pub(super) next_message_id: u64,
    next_attachment_id: u64,
    /// Pressed buttons' interactions and their responses.
    pub(super) interactions: Interactions,
    /// People's DM channels with the bot.
    pub(super) directs: Directs,
    /// The application commands registered, globally and per server.
    pub(super) commands: Commands,
}

impl State {
    pub(super) fn new(base_url: String) -> State {
        State {
            base_url,
            sent_log: Vec::new(),
            failures: HashMap::new(),
            guilds: BTreeMap::new(),
            premium_tiers: HashMap::new(),
            channels: HashMap::new(),
            created: HashMap::new(),
            seen: HashMap::new(),
            attachments: HashMap::new(),
            nonces: HashMap::new(),
            limits: HashMap::new(),
            next_message_id: 9000,
            next_attachment_id: 7000,
            interactions: Interactions::new(),
            directs: Directs::new(),
            commands: Commands::default(),
        }
    }

    /// The next queued failure for `route`, if any.
    pub(super) fn take_failure(&mut self, route: &str) -> Option<Failure> {
        self.failures.get_mut(route)?.pop_front()
    }

    /// Starts a rate limit on `bucket` (a concrete `METHOD /path`), or on every call.
    pub(super) fn start_rate_limit(&mut self, bucket: &str, retry_after_secs: f64, global: bool, now: Instant) {
        let until = now + Duration::from_secs_f64(retry_after_secs.max(0.0));
        let bucket = if global { GLOBAL_BUCKET } else { bucket };
        self.limits.insert(bucket.to_owned(), (until, global));
    }

    /// A 429 with the time left, if the global limit or `bucket`'s is still in force at `now`:
    /// calling again early only earns another 429.
    pub(super) fn rate_limit_in_force(&mut self, bucket: &str, now: Instant) -> Option<Answer> {
        self.limits.retain(|_, (until, _)| *until > now);
        let (until, global) = self.limits.get(GLOBAL_BUCKET).or_else(|| self.limits.get(bucket)).copied()?;
        let left = until.duration_since(now).as_secs_f64();
        // Discord's `retry_after` has millisecond precision.
        Some(Answer::RateLimited { retry_after_secs: (left * 1000.0).ceil() / 1000.0, global })
    }

    pub(super) fn add_channel(&mut self, channel: Value) {
        self.learn_direct(&channel);
        if let Some(id) = snowflake(&channel["id"]) {
            self.channels.insert(id, channel);
        }
    }

    /// Remembers a dispatched message so replies to it can carry it as `referenced_message`.
    pub(super) fn remember(&mut self, message: &Value) {
        self.learn_direct(message);
        if let Some(id) = snowflake(&message["id"]) {
            self.seen.insert(id, message.clone());
        }
    }

    /// Registers bytes under `name`; returns the URL serving them.
    pub(super) fn add_attachment(&mut self, name: &str, bytes: Vec<u8>) -> String {
        self.attachments.insert(name.to_owned(), bytes);
        format!("{}/attachments/{name}", self.base_url)
    }

    pub(super) fn attachment(&self, name: &str) -> Option<Vec<u8>> {
        self.attachments.get(name).cloned()
    }

    /// Answers one authorized REST call; `path` is relative to `/api/v10`.
    pub(super) fn handle(&mut self, method: &str, path: &str, body: &Value, uploads: &[Upload]) -> Answer {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let id = |index: usize| parts.get(index).and_then(|part| part.parse::<u64>().ok());
        match (method, parts.as_slice()) {
            ("GET", ["gateway"]) => Answer::ok(json!({ "url": self.gateway_url() })),
            ("GET", ["gateway", "bot"]) => Answer::ok(self.bot_gateway()),
            ("GET", ["users", "@me"]) => Answer::ok(wire::current_user()),
            ("POST", ["users", "@me", "channels"]) => self.open_direct(body),
            ("GET", ["oauth2", "applications", "@me"]) => Answer::ok(wire::application()),
            ("GET", ["channels", _]) => self.channel(id(1)),
            ("POST", ["channels", _, "messages"]) => self.create_message(id(1), body, uploads),
            ("PATCH", ["channels", _, "messages", _]) => self.edit_message(id(1), id(3), body),
            ("DELETE", ["channels", _, "messages", _]) => self.delete_message(id(1), id(3)),
            ("POST", ["channels", _, "typing"]) if id(1).is_some() => Answer::NoContent,
            ("GET", ["guilds", _]) => self.guild(id(1)),
            ("GET", ["guilds", _, "members", _]) => self.member(id(1), id(3)),
            ("GET", ["guilds", _, "roles"]) => self.roles(id(1)),
            ("POST", ["interactions", _, token, "callback"]) => self.interaction_callback(id(1), token, body),
            ("POST", ["webhooks", _, token]) => self.followup(id(1), token, body),
            ("PATCH", ["webhooks", _, token, "messages", target]) => {
                self.edit_webhook_message(id(1), token, target, body)
            }
            ("DELETE", ["webhooks", _, token, "messages", target]) => self.delete_webhook_message(id(1), token, target),
            ("GET", ["applications", _, "commands"]) => self.list_commands(id(1), None),
            ("PUT", ["applications", _, "commands"]) => self.overwrite_commands(id(1), None, body),
            ("GET", ["applications", _, "guilds", _, "commands"]) if id(3).is_some() => {
                self.list_commands(id(1), id(3))
            }
            ("PUT", ["applications", _, "guilds", _, "commands"]) if id(3).is_some() => {
                self.overwrite_commands(id(1), id(3), body)
            }
            _ => Answer::not_found(),
        }
    }

    /// `ws://127.0.0.1:PORT/gateway`, without a query (serenity appends `?v=10`).
    pub(super) fn gateway_url(&self) -> String {
        format!("{}/gateway", self.base_url.replacen("http://", "ws://", 1))
    }

    fn bot_gateway(&self) -> Value {
        json!({
            "url": self.gateway_url(),
            "shards": 1,
            "session_start_limit": { "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1 },
        })
    }

    fn channel(&self, channel_id: Option<u64>) -> Answer {
        match channel_id.and_then(|id| self.channels.get(&id)) {
            Some(channel) => Answer::ok(channel.clone()),
            None => Answer::error(404, "Unknown Channel", 10003),
        }
    }

    /// `GET /guilds/{id}`: the guild, with its boost level.
    fn guild(&self, guild_id: Option<u64>) -> Answer {
        let Some(guild_id) = guild_id.filter(|id| self.guilds.contains_key(id)) else {
            return Answer::error(404, "Unknown Guild", 10004);
        };
        let tier = self.premium_tiers.get(&guild_id).copied().unwrap_or(0);
        let boosts = [0, 2, 7, 14][usize::from(tier.min(3))];
        Answer::ok(json!({
            "id": guild_id.to_string(),
            "name": format!("guild-{guild_id}"),
            "icon": null,
            "owner_id": "1",
            "afk_channel_id": null,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": [],
            "emojis": [],
            "features": [],
            "mfa_level": 0,
            "premium_tier": tier,
            "premium_subscription_count": boosts,
            "preferred_locale": "en-US",
            "nsfw_level": 0,
        }))
    }

    /// The upload limit of a message in `channel_id`: 10 MiB, more in boosted guilds.
    fn upload_limit(&self, channel_id: u64) -> usize {
        let tier = self.guild_of(channel_id).and_then(|guild| self.premium_tiers.get(&guild)).copied();
        match tier {
            Some(2) => 50 << 20,
            Some(3) => 100 << 20,
            _ => 10 << 20,
        }
    }

    fn member(&self, guild_id: Option<u64>, user_id: Option<u64>) -> Answer {
        let (Some(guild_id), Some(user_id)) = (guild_id, user_id) else { return Answer::not_found() };
        let Some(bot_roles) = self.guilds.get(&guild_id) else { return Answer::error(404, "Unknown Guild", 10004) };
        let (user, roles) = if user_id == BOT_ID {
            (wire::bot_user(), bot_roles.clone())
        } else {
            (events::user(user_id, &format!("user{user_id}")), Vec::new())
        };
        let roles: Vec<String> = roles.iter().map(u64::to_string).collect();
        Answer::ok(json!({
            "user": user,
            "nick": null,
            "avatar": null,
            "roles": roles,
            "joined_at": "2024-01-01T00:00:00.000000+00:00",
            "premium_since": null,
            "deaf": false,
            "mute": false,
            "flags": 0,
            "pending": false,
        }))
    }

    /// `@everyone` (the guild's id) plus the bot's roles, named `role-{id}`.
    fn roles(&self, guild_id: Option<u64>) -> Answer {
        let Some((guild_id, bot_roles)) = guild_id.and_then(|id| self.guilds.get_key_value(&id)) else {
            return Answer::error(404, "Unknown Guild", 10004);
        };
        let everyone = role_json(*guild_id, "@everyone", 0);
        let others = bot_roles.iter().enumerate().map(|(index, id)| role_json(*id, &format!("role-{id}"), index + 1));
        Answer::ok(Value::Array(std::iter::once(everyone).chain(others).collect()))
    }

    /// A guild channel's guild, for channels registered with `add_channel`.
    pub(super) fn guild_of(&self, channel_id: u64) -> Option<u64> {
        self.channels.get(&channel_id).and_then(|channel| snowflake(&channel["guild_id"]))
    }

    /// A message the bot created, as it is now.
    pub(super) fn created_message(&self, channel_id: u64, message_id: u64) -> Option<Value> {
        self.created.get(&(channel_id, message_id)).cloned()
    }

    pub(super) fn create_message(&mut self, channel_id: Option<u64>, body: &Value, uploads: &[Upload]) -> Answer {
        let Some(channel_id) = channel_id else { return Answer::not_found() };
        if let Some(refused) = self.directs.refuses_messages_in(channel_id) {
            return refused;
        }
        let content = body["content"].as_str().unwrap_or_default().to_owned();
        let has_embeds = body["embeds"].as_array().is_some_and(|embeds| !embeds.is_empty());
        if content.is_empty() && uploads.is_empty() && !has_embeds {
            return Answer::error(400, "Cannot send an empty message", 50006);
        }
        if content.chars().count() > MAX_CONTENT_CHARS {
            return too_long("content", MAX_CONTENT_CHARS);
        }
        if uploads.iter().map(|upload| upload.bytes.len()).sum::<usize>() > self.upload_limit(channel_id) {
            return Answer::error(413, "Request entity too large", 40005);
        }
        let nonce = match &body["nonce"] {
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            _ => None,
        };
        if nonce.as_ref().is_some_and(|nonce| nonce.chars().count() > MAX_NONCE_CHARS) {
            return too_long("nonce", MAX_NONCE_CHARS);
        }
        let components = match checked_components(body) {
            Ok(components) => components.unwrap_or_else(|| json!([])),
            Err(refused) => return refused,
        };
        let enforced = nonce.clone().filter(|_| body["enforce_nonce"] == json!(true));
        if let Some(earlier) = enforced.as_ref().and_then(|nonce| self.nonces.get(nonce)) {
            // Discord answers a repeated nonce with the message it created the first time.
            return match self.created.get(earlier) {
                Some(message) => Answer::ok(message.clone()),
                None => Answer::error(404, "Unknown Message", 10008),
            };
        }
        let message_id = self.next_message_id;
        self.next_message_id += 1;
        let mut message = self.new_message(channel_id, message_id, &content, body);
        message["attachments"] = Value::Array(uploads.iter().map(|upload| self.store_upload(upload)).collect());
        message["nonce"] = nonce.clone().map_or(Value::Null, Value::String);
        message["components"] = components.clone();
        self.sent_log.push(SentMessage {
            message_id,
            channel_id,
            content,
            message_reference: snowflake(&body["message_reference"]["message_id"]),
            allowed_mentions: body.get("allowed_mentions").filter(|value| !value.is_null()).cloned(),
            file_names: uploads.iter().map(|upload| upload.file_name.clone()).collect(),
            file_bytes: uploads.iter().map(|upload| upload.bytes.clone()).collect(),
            nonce,
            components,
        });
        if let Some(nonce) = enforced {
            self.nonces.insert(nonce, (channel_id, message_id));
        }
        self.created.insert((channel_id, message_id), message.clone());
        Answer::ok(message)
    }

    /// The bot's new message, with `message_reference`/`referenced_message` for replies.
    pub(super) fn new_message(&self, channel_id: u64, message_id: u64, content: &str, body: &Value) -> Value {
        let mut message = json!({
            "id": message_id.to_string(),
            "channel_id": channel_id.to_string(),
            "author": wire::bot_user(),
            "content": content,
            "timestamp": wire::now_iso(),
            "edited_timestamp": null,
            "tts": body["tts"].as_bool().unwrap_or(false),
            "mention_everyone": false,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": body.get("embeds").filter(|embeds| embeds.is_array()).cloned().unwrap_or_else(|| json!([])),
            "pinned": false,
            "type": 0,
            "flags": 0,
            "components": [],
        });
        if let Some(replied_id) = snowflake(&body["message_reference"]["message_id"]) {
            let replied = self.known_message(channel_id, replied_id);
            message["type"] = json!(19);
            message["message_reference"] = json!({
                "type": 0, "message_id": replied_id.to_string(), "channel_id": channel_id.to_string(),
            });
            message["referenced_message"] = replied.unwrap_or(Value::Null);
        }
        message
    }

    /// A message the fake knows (created by the bot or dispatched to it), without its own reply.
    fn known_message(&self, channel_id: u64, message_id: u64) -> Option<Value> {
        let mut message =
            self.created.get(&(channel_id, message_id)).or_else(|| self.seen.get(&message_id)).cloned()?;
        message["referenced_message"] = Value::Null;
        Some(message)
    }

    /// Makes an uploaded file downloadable and returns its attachment object.
    fn store_upload(&mut self, upload: &Upload) -> Value {
        let id = self.next_attachment_id;
        self.next_attachment_id += 1;
        let url = self.add_attachment(&format!("{id}-{}", upload.file_name), upload.bytes.clone());
        json!({
            "id": id.to_string(),
            "filename": upload.file_name,
            "size": upload.bytes.len(),
            "url": url,
            "proxy_url": url,
            "content_type": events::content_type(&upload.file_name),
        })
    }

    pub(super) fn edit_message(&mut self, channel_id: Option<u64>, message_id: Option<u64>, body: &Value) -> Answer {
        let key = channel_id.zip(message_id);
        let Some(message) = key.and_then(|key| self.created.get_mut(&key)) else {
            if message_id.is_some_and(|id| self.seen.contains_key(&id)) {
                return Answer::error(403, "Cannot edit a message authored by another user", 50005);
            }
            return Answer::error(404, "Unknown Message", 10008);
        };
        let content = body["content"].as_str();
        if content.is_some_and(|content| content.chars().count() > MAX_CONTENT_CHARS) {
            return too_long("content", MAX_CONTENT_CHARS);
        }
        let components = match checked_components(body) {
            Ok(components) => components,
            Err(refused) => return refused,
        };
        if let Some(content) = content {
            message["content"] = json!(content);
        }
        if let Some(embeds) = body.get("embeds").filter(|embeds| embeds.is_array()) {
            message["embeds"] = embeds.clone();
        }
        if let Some(components) = components {
            message["components"] = components;
        }
        message["edited_timestamp"] = json!(wire::now_iso());
        Answer::ok(message.clone())
    }

    fn delete_message(&mut self, channel_id: Option<u64>, message_id: Option<u64>) -> Answer {
        let Some(key) = channel_id.zip(message_id) else { return Answer::not_found() };
        self.created.remove(&key);
        Answer::NoContent
    }
}

/// A body's `components`, checked as Discord checks them; `None` when absent.
fn checked_components(body: &Value) -> Result<Option<Value>, Answer> {
    body.get("components")
        .filter(|found| !found.is_null())
        .map(|found| components::check(found, &["components"]))
        .transpose()
}

/// 400 Invalid Form Body for a `field` over `limit` characters, with Discord's `errors` tree.
fn too_long(field: &str, limit: usize) -> Answer {
    let message = format!("Must be {limit} or fewer in length.");
    let error = json!({ "code": "BASE_TYPE_MAX_LENGTH", "message": message });
    Answer::Json(
        400,
        json!({ "message": "Invalid Form Body", "code": 50035, "errors": { field: { "_errors": [error] } } }),
    )
}

fn role_json(id: u64, name: &str, position: usize) -> Value {
    json!({
        "id": id.to_string(),
        "name": name,
        "color": 0,
        "colors": { "primary_color": 0, "secondary_color": null, "tertiary_color": null },
        "hoist": false,
        "icon": null,
        "unicode_emoji": null,
        "position": position,
        "permissions": if position == 0 { "1024" } else { "2048" },
        "managed": false,
        "mentionable": false,
        "flags": 0,
    })
}
