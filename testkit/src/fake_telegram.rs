//! A fake Telegram Bot API server on 127.0.0.1, a random port, speaking teloxide's wire protocol:
//! `POST {api_url}/bot{TOKEN}/{Method}` (method names matched case-insensitively, JSON or
//! multipart bodies) and `GET {api_url}/file/bot{TOKEN}/{file_path}` for downloads.
//!
//! Tests push incoming updates ([`FakeTelegram::push_message`], built with [`updates`]), script
//! failures ([`FakeTelegram::fail_next`]) and inspect every call the bot made. Answers are shaped
//! like Telegram's so teloxide deserializes them, and error descriptions are the exact strings
//! teloxide maps to its `ApiError` variants (one exception below).
//!
//! Uploads (`sendPhoto`, `sendDocument`, `sendVoice` with a file part) follow the Bot API's
//! limits: a file over 50 MB is refused with 413 `Request Entity Too Large`, a photo over
//! 10 MB with 400 `Bad Request: PHOTO_SAVE_FILE_INVALID`. The uploaded bytes are kept with the
//! sent message ([`SentMessage::file_bytes`]).
//!
//! Inline keyboards and callback queries, as the Bot API does them:
//! - `sendMessage` (and the media sends), `editMessageText` and `editMessageReplyMarkup` take
//!   `reply_markup.inline_keyboard` (rows of `{text, callback_data}` buttons). `callback_data`
//!   must be 1–64 bytes (else 400 `Bad Request: BUTTON_DATA_INVALID`); a button with a text and
//!   no action gets 400 `… Text buttons are unallowed in the inline keyboard`. The keyboard
//!   comes back in the message's `reply_markup` and is kept with the message
//!   ([`FakeTelegram::buttons`], [`SentMessage::reply_markup`]).
//! - Like Telegram, `editMessageText` without `reply_markup` removes the keyboard, and
//!   `editMessageReplyMarkup` without one (or with an empty one) removes it too; an edit that
//!   changes neither text nor keyboard gets 400 `message is not modified`.
//! - [`FakeTelegram::press_button`] pushes a `callback_query` update for a button of a bot
//!   message and returns the query id. Each query must be answered with `answerCallbackQuery`
//!   once, within [`FakeTelegram::set_callback_answer_limit`] of the press (15 s by default,
//!   about what Telegram allows; the clock starts when the update is pushed, not when the bot
//!   fetches it, as a real press is timed from the tap); an unknown, already answered or late query gets 400
//!   `Bad Request: query is too old and response timeout expired or query ID is invalid`. That
//!   is the real server's spelling; teloxide 0.17's `ApiError::InvalidQueryId` expects
//!   "query id", so teloxide reports it as `ApiError::Unknown`.
//!   [`FakeTelegram::assert_callback_queries_answered`] checks every press got its answer.

mod buttons;
mod server;
mod state;
pub mod updates;
mod wire;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::watch;

use crate::fake_server::{CallLog, Describe, ServerTask, bind_loopback, lock};
use state::State;

/// A scripted failure for the next call of one method (see [`FakeTelegram::fail_next`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 429 `Too Many Requests: retry after N` with `parameters.retry_after = N`.
    TooManyRequests {
        /// Seconds the client must wait.
        retry_after: u32,
    },
    /// 409 `Conflict: terminated by other getUpdates request; …` (another poller).
    Conflict,
    /// 502 `Bad Gateway` (teloxide waits 10 s before returning this error).
    ServerError,
    /// 400 `Bad Request: can't parse entities: Unsupported start tag "foo" at byte offset 0`.
    CantParseEntities,
    /// 400 `Bad Request: message is not modified: …`.
    NotModified,
    /// Any status with any description.
    Status {
        /// HTTP status and `error_code`.
        code: u16,
        /// The `description` field.
        description: String,
    },
    /// The request (its body read) is held this long, then answered 502 `Bad Gateway` and not
    /// carried out: as if it never reached Telegram. For a bot killed while it waits
    /// ([`FakeTelegram::wait_for_held`] says when a request is being held).
    Hang(Duration),
}

/// One recorded API call (every method, including failed and unauthorized ones).
#[derive(Debug, Clone)]
pub struct Call {
    /// The method name, lower-case (`"sendmessage"`); file downloads are `"download_file"`.
    pub method: String,
    /// The JSON body, or multipart text fields as strings plus files as `{"file_name", "bytes_len"}`.
    pub params: Value,
    /// When the request arrived.
    pub at: Instant,
    /// Whether the answer was an error.
    pub failed: bool,
}

impl Describe for Call {
    fn describe(&self) -> String {
        let failed = if self.failed { " (failed)" } else { "" };
        format!("{}{failed} {}", self.method, self.params)
    }
}

/// A message the bot sent successfully (`sendMessage`, `sendPhoto`, `sendDocument`, `sendVoice`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMessage {
    /// The method name, lower-case.
    pub method: String,
    /// The id the fake assigned (increasing from 1000).
    pub message_id: i64,
    /// The target chat.
    pub chat_id: i64,
    /// The text or caption, exactly as sent (markup included).
    pub text: Option<String>,
    /// `parse_mode` as sent (`"HTML"`, `"MarkdownV2"`, …).
    pub parse_mode: Option<String>,
    /// The forum topic, if any.
    pub message_thread_id: Option<i64>,
    /// From `reply_parameters.message_id` or the legacy `reply_to_message_id`.
    pub reply_to_message_id: Option<i64>,
    /// The uploaded file's name, for uploads.
    pub file_name: Option<String>,
    /// The uploaded file's bytes, for uploads.
    pub file_bytes: Option<Vec<u8>>,
    /// The inline keyboard as sent (`{"inline_keyboard": [[…]]}`), if it had buttons; later
    /// edits show in [`FakeTelegram::buttons`].
    pub reply_markup: Option<Value>,
}

impl SentMessage {
    /// The text or caption as Telegram shows it: in HTML mode, tags removed and the basic
    /// entities decoded.
    pub fn shown(&self) -> String {
        let text = self.text.clone().unwrap_or_default();
        match &self.parse_mode {
            Some(mode) if mode.eq_ignore_ascii_case("html") => wire::strip_html(&text),
            _ => text,
        }
    }
}

/// One button of an inline keyboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineButton {
    /// The label.
    pub text: String,
    /// What a press sends back in the callback query.
    pub callback_data: Option<String>,
    /// A link button's URL.
    pub url: Option<String>,
}

/// A successful `answerCallbackQuery`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackAnswer {
    /// The query answered.
    pub query_id: String,
    /// The notification text, if any.
    pub text: Option<String>,
    /// Whether the text is shown as an alert.
    pub show_alert: bool,
    /// When the answer arrived.
    pub at: Instant,
}

/// The fake bot's identity, as `getMe` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotInfo {
    /// The bot's user id (4242).
    pub id: i64,
    /// The bot's username, without `@` (`switchboard_test_bot`).
    pub username: String,
    /// The bot's first name (`Switchboard`).
    pub first_name: String,
}

/// The bot's user id.
pub const BOT_ID: i64 = 4242;
/// The bot's username, without `@`.
pub const BOT_USERNAME: &str = "switchboard_test_bot";
/// The bot's first name.
pub const BOT_FIRST_NAME: &str = "Switchboard";

struct Shared {
    state: Mutex<State>,
    /// Bumped on every pushed update: wakes long-polling `getUpdates`.
    pushed: watch::Sender<u64>,
    /// Every call, in the order they were answered.
    calls: CallLog<Call>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn record(&self, call: Call) {
        self.calls.record(call);
    }
}

/// The running fake; a cheap `Clone` handle. The server stops when the last handle is dropped.
#[derive(Clone)]
pub struct FakeTelegram {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Arc<ServerTask>,
}

impl FakeTelegram {
    /// The token the fake accepts; any other gets 401 `Unauthorized`.
    pub const TOKEN: &str = "123456:TEST-TOKEN";

    /// Starts a server on 127.0.0.1, a random port.
    pub async fn start() -> FakeTelegram {
        let shared =
            Arc::new(Shared { state: Mutex::new(State::new()), pushed: watch::Sender::new(0), calls: CallLog::new() });
        let (listener, addr) = bind_loopback("FakeTelegram").await;
        let server = ServerTask::serve("FakeTelegram", listener, server::router(shared.clone()));
        FakeTelegram { addr, shared, server: Arc::new(server) }
    }

    /// `http://127.0.0.1:PORT`, what teloxide's `Bot::set_api_url` takes.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bot's identity (id 4242, `switchboard_test_bot`, `Switchboard`).
    pub fn bot(&self) -> BotInfo {
        BotInfo { id: BOT_ID, username: BOT_USERNAME.to_owned(), first_name: BOT_FIRST_NAME.to_owned() }
    }

    /// Queues an update; assigns `update_id` (increasing from 1) if absent and returns it.
    pub fn push_update(&self, update: Value) -> i64 {
        let id = self.shared.state().push_update(update);
        self.shared.pushed.send_modify(|generation| *generation += 1);
        id
    }

    /// Queues `{"update_id": …, "message": message}` and returns the update id.
    pub fn push_message(&self, message: Value) -> i64 {
        self.push_update(serde_json::json!({ "message": message }))
    }

    /// The highest offset a `getUpdates` call has sent (updates below it are gone, like Telegram).
    pub fn confirmed_offset(&self) -> i64 {
        self.shared.state().confirmed_offset
    }

    /// Sets a webhook, as one left from an earlier setup: `getUpdates` fails with 409 until it
    /// is deleted, as on Telegram.
    pub fn set_webhook(&self, url: &str) {
        self.shared.state().set_webhook_url(url);
    }

    /// Updates queued and not yet confirmed.
    pub fn pending_updates(&self) -> usize {
        self.shared.state().updates.len()
    }

    /// Every call so far, in the order they were answered.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.all()
    }

    /// The calls of one method (case-insensitive, e.g. `"sendMessage"` or `"sendmessage"`).
    pub fn calls_to(&self, method: &str) -> Vec<Call> {
        let method = method.to_ascii_lowercase();
        self.shared.calls.matching(|call| call.method == method)
    }

    /// How many calls of one method (case-insensitive) were answered, without copying them.
    pub fn count_calls(&self, method: &str) -> usize {
        let method = method.to_ascii_lowercase();
        self.shared.calls.with(|calls| calls.iter().filter(|call| call.method == method).count())
    }

    /// Waits until `n` calls of `method` were answered; panics with a listing of all calls on timeout.
    pub async fn wait_for_calls(&self, method: &str, n: usize, timeout: Duration) -> Vec<Call> {
        let lower = method.to_ascii_lowercase();
        self.shared.calls.wait_for(("FakeTelegram", method), |call| call.method == lower, n, timeout).await
    }

    /// Messages sent successfully, in order.
    pub fn sent_messages(&self) -> Vec<SentMessage> {
        self.shared.state().sent_log.clone()
    }

    /// Every message sent successfully from now on, as it is sent (for a load generator that
    /// answers each reply with the chat's next message).
    pub fn sent_feed(&self) -> tokio::sync::mpsc::UnboundedReceiver<SentMessage> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.shared.state().feeds.push(tx);
        rx
    }

    /// Successful `editMessageText` calls, in order.
    pub fn edits(&self) -> Vec<Call> {
        self.calls_to("editmessagetext").into_iter().filter(|call| !call.failed).collect()
    }

    /// Makes the next call of `method` fail; several queued failures apply one per call, in order.
    pub fn fail_next(&self, method: &str, failure: Failure) {
        self.shared.state().failures.entry(method.to_ascii_lowercase()).or_default().push_back(failure);
    }

    /// Answers every later call of `method` only after `latency`, as the real Bot API does
    /// a round trip away (tens to hundreds of milliseconds).
    pub fn set_latency(&self, method: &str, latency: Duration) {
        self.shared.state().latency.insert(method.to_ascii_lowercase(), latency);
    }

    /// How many connections the bot opened to the fake so far. A client that keeps its
    /// connections alive opens a few and reuses them; one that abandons HTTP/1.1 requests
    /// midway (hyper then closes the connection) keeps opening new ones.
    pub fn connections_accepted(&self) -> usize {
        self.server.accepted()
    }

    /// HTML-mode `sendMessage`/`editMessageText` whose text contains `needle` get 400 can't parse entities.
    pub fn reject_html_containing(&self, needle: &str) {
        self.shared.state().reject_html.push(needle.to_owned());
    }

    /// The current inline keyboard of a message the bot sent, row by row (empty if none).
    pub fn buttons(&self, chat_id: i64, message_id: i64) -> Vec<Vec<InlineButton>> {
        let message = self.shared.state().bot_message(chat_id, message_id);
        message.map(|message| buttons::buttons_of(&message["reply_markup"])).unwrap_or_default()
    }

    /// Presses the button with `callback_data` on a message the bot sent, as user `from` (see
    /// [`updates::user`]): pushes the `callback_query` update and returns the query id. Panics
    /// if the message is unknown or its keyboard has no such button.
    pub fn press_button(&self, chat_id: i64, message_id: i64, from: Value, callback_data: &str) -> String {
        let message = self.shared.state().bot_message(chat_id, message_id);
        let Some(message) = message else { panic!("press_button: the bot sent no message {message_id} in {chat_id}") };
        let keyboard = buttons::buttons_of(&message["reply_markup"]);
        let found = keyboard.iter().flatten().any(|button| button.callback_data.as_deref() == Some(callback_data));
        assert!(found, "press_button: no button {callback_data:?} on message {message_id}: {keyboard:?}");
        self.push_callback_query(updates::callback_query("", from, message, callback_data))
    }

    /// Pushes `{"update_id": …, "callback_query": query}` (build it with
    /// [`updates::callback_query`]; an empty or missing `id` gets a fresh one) and starts the
    /// query's answer clock. Returns the query id. (A `callback_query` pushed with
    /// [`FakeTelegram::push_update`] has no clock: answering it gets "query is too old".)
    pub fn push_callback_query(&self, mut query: Value) -> String {
        let id = {
            let mut state = self.shared.state();
            let id = match query.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()) {
                Some(id) => id.to_owned(),
                None => state.callbacks.next_id(),
            };
            state.callbacks.pressed(&id, Instant::now());
            id
        };
        query["id"] = Value::String(id.clone());
        self.push_update(serde_json::json!({ "callback_query": query }));
        id
    }

    /// Sets how long after a press `answerCallbackQuery` is still accepted (default 15 s).
    pub fn set_callback_answer_limit(&self, limit: Duration) {
        self.shared.state().callbacks.limit = limit;
    }

    /// Successful `answerCallbackQuery` calls, in order.
    pub fn callback_answers(&self) -> Vec<CallbackAnswer> {
        self.shared.state().callbacks.answers.clone()
    }

    /// Ids of pushed callback queries no successful `answerCallbackQuery` answered, in order.
    pub fn unanswered_callback_queries(&self) -> Vec<String> {
        self.shared.state().callbacks.unanswered()
    }

    /// Panics, listing them, if any pushed callback query went unanswered.
    pub fn assert_callback_queries_answered(&self) {
        let unanswered = self.unanswered_callback_queries();
        assert!(unanswered.is_empty(), "FakeTelegram: callback queries never answered: {unanswered:?}");
    }

    /// Waits until a request of `method` is being held by a [`Failure::Hang`]; panics on timeout.
    pub async fn wait_for_held(&self, method: &str, timeout: Duration) {
        let method = method.to_ascii_lowercase();
        let deadline = Instant::now() + timeout;
        while !self.shared.state().held.contains(&method) {
            assert!(Instant::now() < deadline, "FakeTelegram: no {method} request was held within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Registers a downloadable file for `getFile`; returns its `file_path`.
    pub fn add_file(&self, file_id: &str, bytes: Vec<u8>) -> String {
        self.shared.state().add_file(file_id, bytes)
    }
}
