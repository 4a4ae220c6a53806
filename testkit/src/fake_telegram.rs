//! A fake Telegram Bot API server on 127.0.0.1, a random port, speaking teloxide's wire protocol:
//! `POST {api_url}/bot{TOKEN}/{Method}` (method names matched case-insensitively, JSON or
//! multipart bodies) and `GET {api_url}/file/bot{TOKEN}/{file_path}` for downloads.
//!
//! Tests push incoming updates ([`FakeTelegram::push_message`], built with [`updates`]), script
//! failures ([`FakeTelegram::fail_next`]) and inspect every call the bot made. Answers are shaped
//! like Telegram's so teloxide deserializes them, and error descriptions are the exact strings
//! teloxide maps to its `ApiError` variants.

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
    _server: Arc<ServerTask>,
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
        FakeTelegram { addr, shared, _server: Arc::new(server) }
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

    /// HTML-mode `sendMessage`/`editMessageText` whose text contains `needle` get 400 can't parse entities.
    pub fn reject_html_containing(&self, needle: &str) {
        self.shared.state().reject_html.push(needle.to_owned());
    }

    /// Registers a downloadable file for `getFile`; returns its `file_path`.
    pub fn add_file(&self, file_id: &str, bytes: Vec<u8>) -> String {
        self.shared.state().add_file(file_id, bytes)
    }
}
