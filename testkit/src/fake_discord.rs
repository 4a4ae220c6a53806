//! A fake Discord (REST API v10 and gateway) on 127.0.0.1, a random port, speaking serenity
//! 0.12.5's wire protocol. Point serenity at it with
//! `HttpBuilder::new(FakeDiscord::TOKEN).proxy(fake.url()).ratelimiter_disabled(true).build()`
//! and `ClientBuilder::new_with_http(http, intents)` (the proxy is ignored while serenity's
//! ratelimiter is on).
//!
//! - REST under `/api/v10` (`Authorization: Bot fake-discord-token`, else 401): the gateway
//!   URL, the bot user and application, channels, guild members and roles, message
//!   create/edit/delete (JSON or multipart `payload_json` + `files[n]`) and typing. Every call is
//!   recorded with its arrival time and status ([`FakeDiscord::calls`]); failures can be
//!   scripted ([`FakeDiscord::fail_next`]).
//! - Discord's rules: a message create repeating the `nonce` of an earlier one with
//!   `enforce_nonce: true` returns the earlier message instead of posting again (a nonce is at
//!   most 25 characters); after a 429 a route (or, for the global limit, every route) keeps
//!   answering 429 until its `retry_after` has passed.
//! - The gateway at `ws://127.0.0.1:PORT/gateway`: HELLO, IDENTIFY → READY, heartbeats acked,
//!   RESUME with replay, and dispatches pushed by the test ([`FakeDiscord::dispatch`], payloads
//!   built with [`events`]).
//! - Plain files at `/attachments/{name}` ([`FakeDiscord::add_attachment`]), for attachment URLs.
//! - Uploads within Discord's limit for bots: a message's files together at most 10 MiB, in a
//!   server at boost level 2 or 3 ([`FakeDiscord::set_premium_tier`]) 50 or 100 MiB; more is
//!   413 `Request entity too large` (40005). `GET /guilds/{id}` reports the level
//!   (`premium_tier`).
//! - Buttons: message creates and edits take `components` (action rows of buttons), checked as
//!   Discord checks them (see `components`: up to 5 rows of 1–5, `custom_id` 1–100 characters
//!   and unique, a refusal is 400 Invalid Form Body, code 50035, with the field's path in
//!   `errors`) and kept with the message ([`FakeDiscord::buttons`]).
//!   [`FakeDiscord::press_button`] dispatches an `INTERACTION_CREATE` of type 3
//!   (MESSAGE_COMPONENT) for a button of a bot message, as serenity decodes it.
//! - Interaction responses, with Discord's rules (see `interactions`): the initial
//!   `POST /interactions/{id}/{token}/callback` (types 4, 5, 6, 7, 9) must come within 3 s
//!   of the dispatch, even one queued while no session was live
//!   ([`FakeDiscord::set_interaction_response_limit`]), else 404 `Unknown interaction` (10062),
//!   and only once, else 400 40060 `Interaction has already been acknowledged.`; follow-ups
//!   (`POST /webhooks/{application_id}/{token}`, `PATCH`/`DELETE …/messages/@original` or a
//!   follow-up's `…/messages/{id}`) then work for
//!   15 minutes ([`FakeDiscord::set_interaction_token_lifetime`]). Type 4 posts a message,
//!   type 5 a "thinking…" message (flags 128) that `@original` edits, type 7 edits the pressed
//!   message, type 6 only acknowledges (`@original` is then the pressed message).
//!   [`FakeDiscord::assert_interactions_acknowledged`] checks every press got a response.
//!   Interaction and webhook routes are recorded as `…/{token}/…` and need no bot token.
//! - Slash commands (see `commands`): `GET`/`PUT /applications/{id}/commands` and
//!   `…/guilds/{id}/commands` (bulk overwrite), checked with Discord's rules (names, lengths,
//!   options, choices, contexts; 400 Invalid Form Body with the field's path), listed as Discord
//!   lists them ([`FakeDiscord::application_commands`]); [`FakeDiscord::run_command`]
//!   dispatches an APPLICATION_COMMAND interaction (type 2) for a command offered there, which
//!   takes responses 4, 5 and 9 under the same 3 s and once-only rules.
//! - DMs to a person (see `direct`): `POST /users/@me/channels {"recipient_id"}` answers their
//!   DM channel (type 1, with `recipients`), the same one each time and the one their DMs came
//!   from ([`FakeDiscord::direct_channel_of`]); an unknown user is 400 `Invalid Recipient(s)`
//!   (50033, [`FakeDiscord::forget_user`]); sending to someone who does not accept DMs is 403
//!   `Cannot send messages to this user` (50007, [`FakeDiscord::refuse_direct_messages`]).

mod commands;
mod components;
mod direct;
mod form;
mod gateway;
mod interactions;
mod server;
mod state;
mod wire;

pub mod events;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::watch;

use crate::fake_server::{CallLog, Describe, ServerTask, bind_loopback, local_addr, lock};
use gateway::Gateway;
use state::State;

/// The bot's user id.
pub const BOT_ID: u64 = 5000;
/// The bot's username.
pub const BOT_NAME: &str = "switchboard";
/// The bot's application id.
pub const APPLICATION_ID: u64 = 5001;

/// A scripted failure for the next call of one route (see [`FakeDiscord::fail_next`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// 429 as Discord sends it (see [`FakeDiscord::fail_next`]): `Retry-After` (seconds,
    /// rounded up), `X-RateLimit-Reset-After`, and `{"message": "You are being rate limited.",
    /// "retry_after": …, "global": …}`. Until `retry_after_secs` have passed, every further call
    /// of the same path (of any path, when `global`) is answered 429 too, with the time left.
    RateLimited {
        /// Seconds the client must wait (`retry_after` in the body), e.g. 0.3.
        retry_after_secs: f64,
        /// Discord's global limit (all calls of the bot), not the limit of one route.
        global: bool,
    },
    /// 500 `{"message":"500: Internal Server Error","code":0}`; the call has no effect.
    ServerError,
    /// The call takes effect (a message is created, an edit made) and then its answer is lost.
    AnswerLost(LostAnswer),
    /// Any status with any JSON body.
    Status {
        /// The HTTP status.
        code: u16,
        /// The JSON body, e.g. `{"message": "Missing Permissions", "code": 50013}`.
        body: Value,
    },
}

/// How the answer of a call that took effect is lost (see [`Failure::AnswerLost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostAnswer {
    /// A 500, as a gateway between the client and Discord may send.
    ServerError,
    /// The connection breaks before the answer is complete.
    ConnectionDropped,
}

/// One recorded REST call (including failed and unauthorized ones) or attachment download.
#[derive(Debug, Clone)]
pub struct Call {
    /// `GET`, `POST`, `PATCH`, `DELETE`, …
    pub method: String,
    /// Method and path with numeric ids as `{id}`: `"POST /channels/{id}/messages"`; downloads
    /// are `"GET /attachments/{name}"`.
    pub route: String,
    /// The path without `/api/v10`: `/channels/100/messages` (downloads: `/attachments/x.png`).
    pub path: String,
    /// The JSON body (null if none); for multipart, `payload_json`'s fields plus
    /// `files: [{"field", "filename", "bytes_len"}]`.
    pub body: Value,
    /// When the request arrived.
    pub at: Instant,
    /// The HTTP status answered; 0 when the connection was cut instead.
    pub status: u16,
    /// Whether the answer was an error (or none came).
    pub failed: bool,
}

impl Describe for Call {
    fn describe(&self) -> String {
        let failed = if self.failed { " (failed)" } else { "" };
        format!("{} {}{failed} {}", self.method, self.path, self.body)
    }
}

/// A message the bot created successfully: through `POST /channels/{id}/messages`, an
/// interaction response of type 4, or an interaction follow-up.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    /// The id the fake assigned (increasing from 9000).
    pub message_id: u64,
    /// The target channel.
    pub channel_id: u64,
    /// `content` as sent (empty if none).
    pub content: String,
    /// `message_reference.message_id`: the message replied to.
    pub message_reference: Option<u64>,
    /// `allowed_mentions` as sent.
    pub allowed_mentions: Option<Value>,
    /// The uploaded files' names, in order.
    pub file_names: Vec<String>,
    /// The uploaded files' bytes, in the same order.
    pub file_bytes: Vec<Vec<u8>>,
    /// `nonce` as sent (a number is given as its decimal text).
    pub nonce: Option<String>,
    /// `components` as sent (`[]` if none); later edits show in [`FakeDiscord::buttons`].
    pub components: Value,
}

/// A button of a message's components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentButton {
    /// 1 primary, 2 secondary, 3 success, 4 danger, 5 link, 6 premium.
    pub style: u8,
    /// The label.
    pub label: Option<String>,
    /// What a press sends back in the interaction (not for link buttons).
    pub custom_id: Option<String>,
    /// A link button's URL.
    pub url: Option<String>,
    /// Whether the button is greyed out.
    pub disabled: bool,
}

/// A press dispatched as an `INTERACTION_CREATE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interaction {
    /// The interaction id.
    pub id: u64,
    /// Its token (for the callback and the webhook routes).
    pub token: String,
}

/// A successful initial interaction response.
#[derive(Debug, Clone, PartialEq)]
pub struct InteractionCallback {
    /// The interaction answered.
    pub interaction_id: u64,
    /// The response type: 4, 5, 6, 7 or 9.
    pub kind: u8,
    /// The response's `data` (null if none).
    pub data: Value,
    /// When the response arrived.
    pub at: Instant,
}

/// The fake bot's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotUser {
    /// The bot's user id (5000).
    pub id: u64,
    /// The bot's username (`switchboard`).
    pub name: String,
    /// The bot's application id (5001).
    pub application_id: u64,
}

struct Shared {
    rest: Mutex<State>,
    gateway: Mutex<Gateway>,
    /// Every REST call and download, in the order they were answered.
    calls: CallLog<Call>,
    /// Successful IDENTIFYs plus RESUMEs, for [`FakeDiscord::wait_connected`].
    connected: watch::Sender<usize>,
}

impl Shared {
    fn rest(&self) -> MutexGuard<'_, State> {
        lock(&self.rest)
    }

    fn gateway(&self) -> MutexGuard<'_, Gateway> {
        lock(&self.gateway)
    }

    fn record(&self, call: Call) {
        self.calls.record(call);
    }
}

/// The running fake; a cheap `Clone` handle. The server stops when the last handle is dropped.
#[derive(Clone)]
pub struct FakeDiscord {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _server: Arc<ServerTask>,
}

impl FakeDiscord {
    /// The token the fake accepts (REST `Authorization: Bot …`, gateway IDENTIFY/RESUME).
    pub const TOKEN: &str = "fake-discord-token";

    /// Starts a server on 127.0.0.1, a random port.
    pub async fn start() -> FakeDiscord {
        let (listener, _) = bind_loopback("FakeDiscord").await;
        FakeDiscord::serve(listener)
    }

    /// Starts a server on `addr`: a Discord that comes up where a client has been trying to
    /// reach it (pick the address with a listener bound to port 0 and dropped).
    pub async fn start_at(addr: SocketAddr) -> std::io::Result<FakeDiscord> {
        Ok(FakeDiscord::serve(tokio::net::TcpListener::bind(addr).await?))
    }

    fn serve(listener: tokio::net::TcpListener) -> FakeDiscord {
        let addr = local_addr("FakeDiscord", &listener);
        let shared = Arc::new(Shared {
            rest: Mutex::new(State::new(format!("http://{addr}"))),
            gateway: Mutex::new(Gateway::new()),
            calls: CallLog::new(),
            connected: watch::Sender::new(0),
        });
        let server = ServerTask::serve("FakeDiscord", listener, server::router(shared.clone()));
        FakeDiscord { addr, shared, _server: Arc::new(server) }
    }

    /// `http://127.0.0.1:PORT`, what serenity's `HttpBuilder::proxy` takes.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `ws://127.0.0.1:PORT/gateway`, what `GET /api/v10/gateway` answers.
    pub fn gateway_url(&self) -> String {
        self.shared.rest().gateway_url()
    }

    /// The bot's identity (id 5000, `switchboard`, application 5001).
    pub fn bot(&self) -> BotUser {
        BotUser { id: BOT_ID, name: BOT_NAME.to_owned(), application_id: APPLICATION_ID }
    }

    /// Adds a guild to READY; `bot_role_ids` are the roles the bot's member holds.
    pub fn add_guild(&self, guild_id: u64, bot_role_ids: &[u64]) {
        self.shared.rest().guilds.insert(guild_id, bot_role_ids.to_vec());
    }

    /// Makes `GET /channels/{id}` answer `channel` (see [`events::text_channel`] and friends).
    /// Sets a guild's boost level (0–3, `premium_tier`), which sets its upload limit.
    pub fn set_premium_tier(&self, guild_id: u64, tier: u8) {
        self.shared.rest().premium_tiers.insert(guild_id, tier);
    }

    pub fn add_channel(&self, channel: Value) {
        self.shared.rest().add_channel(channel);
    }

    /// Registers bytes served at `/attachments/{name}`; returns that URL.
    pub fn add_attachment(&self, name: &str, bytes: Vec<u8>) -> String {
        self.shared.rest().add_attachment(name, bytes)
    }

    /// The DM channel of `user_id` with the bot, once it exists (opened through REST, added
    /// with [`FakeDiscord::add_channel`], or a DM of theirs dispatched).
    pub fn direct_channel_of(&self, user_id: u64) -> Option<u64> {
        self.shared.rest().directs.channel_of(user_id)
    }

    /// `user_id` does not accept DMs from the bot: message creates in their DM channel are
    /// refused with 403 `Cannot send messages to this user` (50007).
    pub fn refuse_direct_messages(&self, user_id: u64) {
        self.shared.rest().directs.closed.insert(user_id);
    }

    /// Discord knows no user `user_id`: opening a DM with them is 400 `Invalid Recipient(s)` (50033).
    pub fn forget_user(&self, user_id: u64) {
        self.shared.rest().directs.unknown.insert(user_id);
    }

    /// Sets the `heartbeat_interval` sent in later HELLOs (default 41 250 ms, like Discord).
    pub fn set_heartbeat_interval(&self, interval: Duration) {
        self.shared.gateway().heartbeat_interval_ms = interval.as_millis().max(1) as u64;
    }

    /// Sends a dispatch to the session (logged for RESUME while disconnected; queued until the
    /// next READY if no session exists yet). Returns its sequence number.
    pub fn dispatch(&self, event: &str, data: Value) -> u64 {
        if event == "MESSAGE_CREATE" {
            self.shared.rest().remember(&data);
        }
        self.shared.gateway().dispatch(event, data)
    }

    /// Sends a raw text frame on the live gateway connection, outside the session's sequence
    /// (an unknown op, a frame that is not JSON); false when no connection is live.
    pub fn send_raw(&self, text: &str) -> bool {
        self.shared.gateway().send_raw(text)
    }

    /// Dispatches `MESSAGE_CREATE` (build `message` with [`events`]); returns its sequence number.
    pub fn send_message_create(&self, message: Value) -> u64 {
        self.dispatch("MESSAGE_CREATE", message)
    }

    /// Waits until `n` sessions were established (successful IDENTIFYs plus RESUMEs); panics on timeout.
    pub async fn wait_connected(&self, n: usize, timeout: Duration) {
        let mut connected = self.shared.connected.subscribe();
        let reached = tokio::time::timeout(timeout, connected.wait_for(|count| *count >= n)).await;
        if !matches!(reached, Ok(Ok(_))) {
            let (identifies, resumes) = (self.identifies(), self.resumes());
            panic!(
                "FakeDiscord: wanted {n} connection(s) within {timeout:?}; identifies {identifies}, resumes {resumes}"
            );
        }
    }

    /// Closes the live gateway connection with close code 4000 (Unknown error); serenity resumes.
    /// Does nothing while no connection is live.
    pub fn drop_connection(&self) {
        self.shared.gateway().drop_connection();
    }

    /// Forgets the session and closes the connection: serenity's RESUME gets op 9 INVALID_SESSION
    /// and it IDENTIFYs again (after serenity's own wait of up to 5 s between shard starts).
    pub fn invalidate_session(&self) {
        self.shared.gateway().invalidate_session();
    }

    /// Successful IDENTIFYs so far.
    pub fn identifies(&self) -> usize {
        self.shared.gateway().identifies
    }

    /// Successful RESUMEs so far.
    pub fn resumes(&self) -> usize {
        self.shared.gateway().resumes
    }

    /// Heartbeats (op 1) received so far, on any connection.
    pub fn heartbeats(&self) -> usize {
        self.shared.gateway().heartbeats
    }

    /// Calls answered 429 so far: Discord counts them toward its invalid-request limit.
    pub fn rate_limited_calls(&self) -> usize {
        self.shared.calls.with(|calls| calls.iter().filter(|call| call.status == 429).count())
    }

    /// Every REST call and download so far, in the order they were answered.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.all()
    }

    /// The calls of one route, e.g. `"POST /channels/{id}/messages"`.
    pub fn calls_to(&self, method_and_route: &str) -> Vec<Call> {
        self.shared.calls.matching(|call| call.route == method_and_route)
    }

    /// Waits until `n` calls of `route` were answered; panics with a listing of all calls on timeout.
    pub async fn wait_for_calls(&self, route: &str, n: usize, timeout: Duration) -> Vec<Call> {
        self.shared.calls.wait_for(("FakeDiscord", route), |call| call.route == route, n, timeout).await
    }

    /// Messages created successfully, in order.
    pub fn sent_messages(&self) -> Vec<SentMessage> {
        self.shared.rest().sent_log.clone()
    }

    /// Successful `PATCH /channels/{id}/messages/{id}` calls, in order.
    pub fn edits(&self) -> Vec<Call> {
        self.calls_to("PATCH /channels/{id}/messages/{id}").into_iter().filter(|call| !call.failed).collect()
    }

    /// A message the bot created, as it is now (edits and responses applied).
    pub fn message(&self, channel_id: u64, message_id: u64) -> Option<Value> {
        self.shared.rest().created_message(channel_id, message_id)
    }

    /// The buttons of a message the bot created, row by row, as they are now (empty if none).
    pub fn buttons(&self, channel_id: u64, message_id: u64) -> Vec<Vec<ComponentButton>> {
        let message = self.message(channel_id, message_id).unwrap_or_default();
        components::buttons_of(&message["components"])
    }

    /// Presses the button with `custom_id` on a message the bot created, as user `user_id`:
    /// dispatches an `INTERACTION_CREATE` (type 3) and returns its id and token. The
    /// interaction comes from the channel's guild (with `member`) if the channel was added with
    /// a `guild_id` ([`FakeDiscord::add_channel`]), else from a DM (with `user`). Panics if the
    /// message is unknown or has no enabled button with that id.
    pub fn press_button(&self, channel_id: u64, message_id: u64, user_id: u64, custom_id: &str) -> Interaction {
        let (message, guild_id) = {
            let rest = self.shared.rest();
            (rest.created_message(channel_id, message_id), rest.guild_of(channel_id))
        };
        let Some(message) = message else {
            panic!("press_button: the bot created no message {message_id} in {channel_id}")
        };
        let buttons = components::buttons_of(&message["components"]);
        let found =
            buttons.iter().flatten().any(|button| button.custom_id.as_deref() == Some(custom_id) && !button.disabled);
        assert!(found, "press_button: no enabled button {custom_id:?} on message {message_id}: {buttons:?}");
        let user = events::user(user_id, &format!("user{user_id}"));
        self.dispatch_interaction(events::button_interaction(0, "", guild_id, message, user, custom_id))
    }

    /// Dispatches `INTERACTION_CREATE` with `interaction` (see [`events::button_interaction`];
    /// an `id` of 0 or an empty `token` get fresh ones) and starts its clocks; returns its id
    /// and token.
    pub fn dispatch_interaction(&self, mut interaction: Value) -> Interaction {
        let (id, token) = {
            let mut rest = self.shared.rest();
            let (fresh_id, fresh_token) = rest.interactions.next_id();
            let id = wire::snowflake(&interaction["id"]).filter(|id| *id != 0).unwrap_or(fresh_id);
            let token =
                interaction["token"].as_str().filter(|token| !token.is_empty()).map_or(fresh_token, str::to_owned);
            let channel_id = wire::snowflake(&interaction["channel_id"]).unwrap_or_default();
            let message_id = wire::snowflake(&interaction["message"]["id"]).unwrap_or_default();
            let kind = interaction["type"].as_u64().unwrap_or_default();
            rest.interactions.created(id, kind, &token, (channel_id, message_id), Instant::now());
            (id, token)
        };
        interaction["id"] = Value::String(id.to_string());
        interaction["token"] = Value::String(token.clone());
        self.dispatch("INTERACTION_CREATE", interaction);
        Interaction { id, token }
    }

    /// The application commands registered globally (`None`) or in a server, as Discord lists
    /// them (`GET …/commands`).
    pub fn application_commands(&self, guild_id: Option<u64>) -> Vec<Value> {
        self.shared.rest().commands.table(guild_id)
    }

    /// User `user_id` uses the slash command `/name` with `options` (name, value) in
    /// `channel_id`: dispatches an `INTERACTION_CREATE` of type 2 (APPLICATION_COMMAND) and
    /// returns its id and token. The channel is a server's if it was added with a `guild_id`
    /// ([`FakeDiscord::add_channel`]), else a DM. As Discord's client, panics unless the
    /// command is offered there (a server's own, or a global one whose `contexts` include the
    /// place) and the options are its own, with its required ones and allowed choices.
    pub fn run_command(&self, channel_id: u64, user_id: u64, name: &str, options: &[(&str, &str)]) -> Interaction {
        let (command, guild_id) = {
            let rest = self.shared.rest();
            let guild_id = rest.guild_of(channel_id);
            (rest.commands.visible(guild_id, name), guild_id)
        };
        let Some(command) = command else {
            let place = guild_id.map_or_else(|| "a DM".to_owned(), |guild| format!("guild {guild}"));
            panic!("run_command: no /{name} is registered for {place}: {:#?}", self.application_commands(guild_id))
        };
        let options = commands::invocation_options(&command, options);
        let user = events::user(user_id, &format!("user{user_id}"));
        self.dispatch_interaction(events::command_interaction((0, ""), guild_id, channel_id, user, &command, options))
    }

    /// Sets how long after an interaction its initial response is accepted (default 3 s).
    pub fn set_interaction_response_limit(&self, limit: Duration) {
        self.shared.rest().interactions.response_limit = limit;
    }

    /// Sets how long an interaction's token works for follow-ups (default 15 minutes).
    pub fn set_interaction_token_lifetime(&self, lifetime: Duration) {
        self.shared.rest().interactions.token_lifetime = lifetime;
    }

    /// Successful initial interaction responses, in order.
    pub fn interaction_callbacks(&self) -> Vec<InteractionCallback> {
        self.shared.rest().interactions.callbacks.clone()
    }

    /// Ids of dispatched interactions that got no initial response, in order.
    pub fn unacknowledged_interactions(&self) -> Vec<u64> {
        self.shared.rest().interactions.unacknowledged()
    }

    /// Panics, listing them, if any dispatched interaction got no initial response.
    pub fn assert_interactions_acknowledged(&self) {
        let open = self.unacknowledged_interactions();
        assert!(open.is_empty(), "FakeDiscord: interactions never acknowledged: {open:?}");
    }

    /// Makes the next call of `route` fail; several queued failures apply one per call, in order.
    /// A [`Failure::RateLimited`] then holds back the path it was served on (or every path)
    /// as Discord would.
    pub fn fail_next(&self, route: &str, failure: Failure) {
        self.shared.rest().failures.entry(route.to_owned()).or_default().push_back(failure);
    }
}
