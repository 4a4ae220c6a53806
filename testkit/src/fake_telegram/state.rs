//! The fake's state and the synchronous methods (everything but `getUpdates`'s waiting).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::buttons::{self, CallbackQueries};
use super::wire::{self, Answer, EDIT_NOT_FOUND, INVALID_FILE_ID, int, string};
use super::{Failure, SentMessage};

/// A file uploaded in a multipart request, keyed by the parameter that referenced it.
#[derive(Debug, Clone)]
pub(super) struct Upload {
    pub(super) file_name: String,
    pub(super) bytes: Vec<u8>,
}

/// A message the bot sent, kept for edits and for `reply_to_message`.
struct Stored {
    message: Value,
    /// The text as last sent, markup included (what "not modified" compares).
    raw_text: Option<String>,
    /// The inline keyboard (`{"inline_keyboard": …}`), also in `message["reply_markup"]`.
    reply_markup: Option<Value>,
}

/// A registered downloadable file.
struct StoredFile {
    path: String,
    bytes: Vec<u8>,
}

pub(super) struct State {
    pub(super) updates: VecDeque<Value>,
    next_update_id: i64,
    pub(super) confirmed_offset: i64,
    pub(super) sent_log: Vec<SentMessage>,
    /// Subscribers to sent messages (see `FakeTelegram::sent_feed`).
    pub(super) feeds: Vec<tokio::sync::mpsc::UnboundedSender<SentMessage>>,
    pub(super) failures: HashMap<String, VecDeque<Failure>>,
    pub(super) reject_html: Vec<String>,
    /// Methods of requests held by a `Failure::Hang`, one entry per request.
    pub(super) held: Vec<String>,
    /// How long calls of a method take to answer (see `FakeTelegram::set_latency`).
    pub(super) latency: HashMap<String, Duration>,
    files: HashMap<String, StoredFile>,
    /// Keyed by (chat id, message id).
    sent: HashMap<(i64, i64), Stored>,
    /// Incoming messages by (chat id, message id), for `reply_to_message`.
    seen: HashMap<(i64, i64), Value>,
    /// Chat objects seen in incoming messages, reused in the bot's own messages.
    chats: HashMap<i64, Value>,
    next_message_id: i64,
    webhook_url: String,
    /// Pressed buttons' queries and their answers.
    pub(super) callbacks: CallbackQueries,
}

impl State {
    pub(super) fn new() -> State {
        State {
            updates: VecDeque::new(),
            next_update_id: 1,
            confirmed_offset: 0,
            sent_log: Vec::new(),
            feeds: Vec::new(),
            failures: HashMap::new(),
            latency: HashMap::new(),
            reject_html: Vec::new(),
            held: Vec::new(),
            files: HashMap::new(),
            sent: HashMap::new(),
            seen: HashMap::new(),
            chats: HashMap::new(),
            next_message_id: 1000,
            webhook_url: String::new(),
            callbacks: CallbackQueries::new(),
        }
    }

    /// Queues an update, assigning `update_id` if absent; remembers its message's chat.
    pub(super) fn push_update(&mut self, mut update: Value) -> i64 {
        let id = match update.get("update_id").and_then(Value::as_i64) {
            Some(id) => id,
            None => {
                update["update_id"] = json!(self.next_update_id);
                self.next_update_id
            }
        };
        self.next_update_id = self.next_update_id.max(id + 1);
        if let Some(message) = update.get("message").or_else(|| update.get("edited_message")) {
            self.remember_incoming(message);
        }
        self.updates.push_back(update);
        id
    }

    fn remember_incoming(&mut self, message: &Value) {
        let Some(chat_id) = message.pointer("/chat/id").and_then(Value::as_i64) else { return };
        self.chats.insert(chat_id, message["chat"].clone());
        if let Some(message_id) = message.get("message_id").and_then(Value::as_i64) {
            self.seen.insert((chat_id, message_id), message.clone());
        }
    }

    /// The next queued failure for `method`, if any.
    pub(super) fn take_failure(&mut self, method: &str) -> Option<Failure> {
        self.failures.get_mut(method)?.pop_front()
    }

    /// Confirms `offset` (dropping older updates) and returns up to `limit` pending updates.
    pub(super) fn take_batch(&mut self, offset: Option<i64>, limit: usize) -> Vec<Value> {
        if let Some(offset) = offset
            && offset > self.confirmed_offset
        {
            self.confirmed_offset = offset;
        }
        let confirmed = self.confirmed_offset;
        self.updates.retain(|update| update.get("update_id").and_then(Value::as_i64).unwrap_or(0) >= confirmed);
        self.updates.iter().take(limit).cloned().collect()
    }

    pub(super) fn add_file(&mut self, file_id: &str, bytes: Vec<u8>) -> String {
        let path = format!("files/file_{}", self.files.len() + 1);
        self.files.insert(file_id.to_owned(), StoredFile { path: path.clone(), bytes });
        path
    }

    /// The bytes of a registered file, by its `file_path`.
    pub(super) fn file_bytes(&self, path: &str) -> Option<Vec<u8>> {
        self.files.values().find(|file| file.path == path).map(|file| file.bytes.clone())
    }

    /// Answers every method except `getUpdates`.
    pub(super) fn handle(&mut self, method: &str, params: &Value, uploads: &HashMap<String, Upload>) -> Answer {
        match method {
            "getme" => Answer::Ok(wire::bot_me()),
            "getwebhookinfo" => Answer::Ok(
                json!({ "url": self.webhook_url, "has_custom_certificate": false, "pending_update_count": 0 }),
            ),
            "setwebhook" => {
                self.webhook_url = string(params, "url").unwrap_or_default();
                Answer::Ok(json!(true))
            }
            "deletewebhook" => self.delete_webhook(params),
            "setmycommands" | "deletemycommands" | "sendchataction" | "deletemessage" | "setmessagereaction" => {
                Answer::Ok(json!(true))
            }
            "getmycommands" => Answer::Ok(json!([])),
            "sendmessage" | "sendphoto" | "senddocument" | "sendvoice" => self.send(method, params, uploads),
            "editmessagetext" => self.edit(params),
            "editmessagereplymarkup" => self.edit_reply_markup(params),
            "answercallbackquery" => self.callbacks.answer(params, Instant::now()),
            "getfile" => self.get_file(params),
            _ => Answer::error(404, "Not Found"),
        }
    }

    pub(super) fn has_webhook(&self) -> bool {
        !self.webhook_url.is_empty()
    }

    pub(super) fn set_webhook_url(&mut self, url: &str) {
        self.webhook_url = url.to_owned();
    }

    fn delete_webhook(&mut self, params: &Value) -> Answer {
        self.webhook_url.clear();
        if params.get("drop_pending_updates").and_then(Value::as_bool) == Some(true) {
            self.updates.clear();
        }
        Answer::Ok(json!(true))
    }

    /// HTML text containing a needle from [`State::reject_html`] fails like broken markup.
    fn rejects(&self, params: &Value) -> bool {
        let html = string(params, "parse_mode").is_some_and(|mode| mode.eq_ignore_ascii_case("html"));
        let text = string(params, "text").unwrap_or_default();
        html && self.reject_html.iter().any(|needle| text.contains(needle.as_str()))
    }

    fn send(&mut self, method: &str, params: &Value, uploads: &HashMap<String, Upload>) -> Answer {
        let Some(chat_id) = int(params, "chat_id") else { return Answer::bad_request("Bad Request: chat not found") };
        if method == "sendmessage" && self.rejects(params) {
            return Answer::bad_request(wire::CANT_PARSE);
        }
        let (text_key, text) = match method {
            "sendmessage" => ("text", string(params, "text")),
            _ => ("caption", string(params, "caption")),
        };
        if method == "sendmessage" && text.as_deref().unwrap_or("").is_empty() {
            return Answer::bad_request("Bad Request: message text is empty");
        }
        if let Some(refused) = refuse_upload(method, uploads) {
            return refused;
        }
        let keyboard = match buttons::inline_keyboard(params) {
            Ok(keyboard) => keyboard,
            Err(refused) => return refused,
        };
        let mut message = self.new_message(chat_id, params);
        set_keyboard(&mut message, keyboard.as_ref());
        if let Some(text) = &text {
            message[text_key] = json!(render(params, text));
        }
        let file_name = self.attach_media(method, &mut message, params, uploads);
        let file_bytes = method.strip_prefix("send").and_then(|kind| uploads.get(kind)).map(|u| u.bytes.clone());
        let message_id = message["message_id"].as_i64().unwrap_or_default();
        let sent = SentMessage {
            method: method.to_owned(),
            message_id,
            chat_id,
            text: text.clone(),
            parse_mode: string(params, "parse_mode"),
            message_thread_id: int(params, "message_thread_id"),
            reply_to_message_id: wire::reply_to_id(params),
            file_name,
            file_bytes,
            reply_markup: keyboard.clone(),
        };
        self.feeds.retain(|feed| feed.send(sent.clone()).is_ok());
        self.sent_log.push(sent);
        let stored = Stored { message: message.clone(), raw_text: text, reply_markup: keyboard };
        self.sent.insert((chat_id, message_id), stored);
        Answer::Ok(message)
    }

    /// A new bot message in `chat_id`: id, date, chat, from, thread and the replied-to message.
    fn new_message(&mut self, chat_id: i64, params: &Value) -> Value {
        let message_id = self.next_message_id;
        self.next_message_id += 1;
        let chat = self.chats.get(&chat_id).cloned().unwrap_or_else(|| default_chat(chat_id));
        let mut message =
            json!({ "message_id": message_id, "date": wire::now(), "chat": chat, "from": wire::bot_user() });
        if let Some(thread_id) = int(params, "message_thread_id") {
            message["message_thread_id"] = json!(thread_id);
            message["is_topic_message"] = json!(true);
        }
        if let Some(replied) = wire::reply_to_id(params).and_then(|id| self.message(chat_id, id)) {
            message["reply_to_message"] = replied;
        }
        message
    }

    /// A message known to the fake (sent by the bot or pushed), without its own reply.
    fn message(&self, chat_id: i64, message_id: i64) -> Option<Value> {
        let key = (chat_id, message_id);
        let mut message =
            self.sent.get(&key).map(|stored| stored.message.clone()).or_else(|| self.seen.get(&key).cloned())?;
        if let Some(object) = message.as_object_mut() {
            object.remove("reply_to_message");
        }
        Some(message)
    }

    /// Adds the `photo`/`document`/`voice` object; returns the uploaded file's name, if any.
    fn attach_media(
        &mut self,
        method: &str,
        message: &mut Value,
        params: &Value,
        uploads: &HashMap<String, Upload>,
    ) -> Option<String> {
        let key = method.strip_prefix("send").filter(|kind| *kind != "message")?;
        let upload = uploads.get(key);
        let file_id = match (upload, string(params, key)) {
            (None, Some(existing)) => existing,
            _ => format!("sent-{key}-{}", message["message_id"]),
        };
        let size = upload.map_or(1024, |upload| upload.bytes.len());
        message[key] = media_json(key, &file_id, upload, size);
        if let Some(upload) = upload {
            self.add_file(&file_id, upload.bytes.clone());
        }
        upload.map(|upload| upload.file_name.clone())
    }

    fn edit(&mut self, params: &Value) -> Answer {
        if params.get("inline_message_id").is_some() {
            return Answer::Ok(json!(true));
        }
        let (Some(chat_id), Some(message_id)) = (int(params, "chat_id"), int(params, "message_id")) else {
            return Answer::bad_request(EDIT_NOT_FOUND);
        };
        if self.rejects(params) {
            return Answer::bad_request(wire::CANT_PARSE);
        }
        let markup = match buttons::inline_keyboard(params) {
            Ok(markup) => markup,
            Err(refused) => return refused,
        };
        let stored = match self.editable(chat_id, message_id) {
            Ok(stored) => stored,
            Err(refused) => return refused,
        };
        let text = string(params, "text").unwrap_or_default();
        if stored.raw_text.as_deref() == Some(text.as_str()) && stored.reply_markup == markup {
            return Answer::bad_request(wire::NOT_MODIFIED);
        }
        stored.message["text"] = json!(render(params, &text));
        stored.raw_text = Some(text);
        // Like Telegram, an edit without `reply_markup` removes the inline keyboard.
        stored.set_markup(markup);
        Answer::Ok(stored.message.clone())
    }

    /// `editMessageReplyMarkup`: replaces the inline keyboard; none (or an empty one) removes it.
    fn edit_reply_markup(&mut self, params: &Value) -> Answer {
        if params.get("inline_message_id").is_some() {
            return Answer::Ok(json!(true));
        }
        let (Some(chat_id), Some(message_id)) = (int(params, "chat_id"), int(params, "message_id")) else {
            return Answer::bad_request(EDIT_NOT_FOUND);
        };
        let markup = match buttons::inline_keyboard(params) {
            Ok(markup) => markup,
            Err(refused) => return refused,
        };
        let stored = match self.editable(chat_id, message_id) {
            Ok(stored) => stored,
            Err(refused) => return refused,
        };
        if stored.reply_markup == markup {
            return Answer::bad_request(wire::NOT_MODIFIED);
        }
        stored.set_markup(markup);
        Answer::Ok(stored.message.clone())
    }

    /// The bot's own message, or the error Telegram gives for editing another one.
    fn editable(&mut self, chat_id: i64, message_id: i64) -> Result<&mut Stored, Answer> {
        let seen = self.seen.contains_key(&(chat_id, message_id));
        self.sent.get_mut(&(chat_id, message_id)).ok_or_else(|| {
            Answer::bad_request(if seen { "Bad Request: message can't be edited" } else { EDIT_NOT_FOUND })
        })
    }

    /// A message the bot sent, as it is now (with its current `reply_markup`).
    pub(super) fn bot_message(&self, chat_id: i64, message_id: i64) -> Option<Value> {
        self.sent.get(&(chat_id, message_id)).map(|stored| stored.message.clone())
    }

    fn get_file(&self, params: &Value) -> Answer {
        let file_id = string(params, "file_id").unwrap_or_default();
        match self.files.get(&file_id) {
            Some(file) => Answer::Ok(json!({
                "file_id": file_id,
                "file_unique_id": unique_id(&file_id),
                "file_size": file.bytes.len(),
                "file_path": file.path,
            })),
            None => Answer::bad_request(INVALID_FILE_ID),
        }
    }
}

impl Stored {
    /// Sets the inline keyboard after an edit, and the edit's date.
    fn set_markup(&mut self, markup: Option<Value>) {
        set_keyboard(&mut self.message, markup.as_ref());
        self.message["edit_date"] = json!(wire::now());
        self.reply_markup = markup;
    }
}

/// Sets (or removes) a message's `reply_markup`, as Telegram returns inline keyboards.
fn set_keyboard(message: &mut Value, keyboard: Option<&Value>) {
    match (keyboard, message.as_object_mut()) {
        (Some(keyboard), Some(object)) => object.insert("reply_markup".to_owned(), keyboard.clone()),
        (None, Some(object)) => object.remove("reply_markup"),
        _ => None,
    };
}

/// The text as Telegram would show it: HTML markup removed in HTML mode.
fn render(params: &Value, text: &str) -> String {
    match string(params, "parse_mode") {
        Some(mode) if mode.eq_ignore_ascii_case("html") => wire::strip_html(text),
        _ => text.to_owned(),
    }
}

/// Bots upload at most 50 MB per file, and photos of at most 10 MB.
const UPLOAD_MAX_BYTES: usize = 50 * 1024 * 1024;
const PHOTO_MAX_BYTES: usize = 10 * 1024 * 1024;

/// Telegram's answer to an upload over its limits, if it is.
fn refuse_upload(method: &str, uploads: &HashMap<String, Upload>) -> Option<Answer> {
    let size = uploads.values().map(|upload| upload.bytes.len()).max()?;
    if size > UPLOAD_MAX_BYTES {
        return Some(Answer::error(413, "Request Entity Too Large"));
    }
    (method == "sendphoto" && size > PHOTO_MAX_BYTES)
        .then(|| Answer::bad_request("Bad Request: PHOTO_SAVE_FILE_INVALID"))
}

/// A chat object for an id never seen in an incoming message: private if positive, else a supergroup.
fn default_chat(chat_id: i64) -> Value {
    if chat_id > 0 {
        json!({ "id": chat_id, "type": "private", "first_name": "User" })
    } else {
        json!({ "id": chat_id, "type": "supergroup", "title": "Group" })
    }
}

/// A short unique id derived from a file id, like Telegram's `file_unique_id`.
pub(super) fn unique_id(file_id: &str) -> String {
    format!("u-{file_id}")
}

/// The media object of a sent message.
fn media_json(kind: &str, file_id: &str, upload: Option<&Upload>, size: usize) -> Value {
    let mut media = json!({ "file_id": file_id, "file_unique_id": unique_id(file_id), "file_size": size });
    match kind {
        "photo" => {
            media["width"] = json!(800);
            media["height"] = json!(600);
            json!([media])
        }
        "document" => {
            if let Some(upload) = upload {
                media["file_name"] = json!(upload.file_name);
            }
            media
        }
        _ => {
            media["duration"] = json!(1);
            media["mime_type"] = json!("audio/ogg");
            media
        }
    }
}
