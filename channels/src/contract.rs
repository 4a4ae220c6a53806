//! The bus contract: the JSON messages that channel adapters and agent workers exchange.
//!
//! Every message carries `v` (the contract version). Decoders ignore unknown fields and
//! default missing optional ones, so adapters written against an older or newer contract
//! keep working. `docs/bus.md` is the normative description of these types.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod address;
pub mod buttons;
pub mod commands;
mod dead_letter;
mod flags;
mod replied;
pub mod reply;
mod system;
pub use address::{BadAddress, ChatAddress, MAIN_AGENT, SessionKey, session_key};
pub use buttons::Button;
pub use dead_letter::DeadLetter;
pub use flags::MessageFlags;
pub use replied::{CUT_MARKER, MAX_REPLIED_CHARS, RepliedTo};

/// The contract version written into every message.
pub const CONTRACT_VERSION: u32 = 1;

/// Longest channel name, in UTF-8 bytes. Channel names are short words (`telegram`, `api`).
pub const MAX_CHANNEL_BYTES: usize = 64;
/// Longest chat id, in UTF-8 bytes: ample for Telegram and Discord ids (about 20 digits) and
/// for the names API clients choose. With the channel name it becomes a NATS subject, which
/// must fit the server's control line (see [`crate::subject`]).
pub const MAX_CHAT_ID_BYTES: usize = 256;
/// Longest sender id and forum topic / thread id, in UTF-8 bytes (they go into user and
/// session keys).
pub const MAX_SENDER_ID_BYTES: usize = 256;
pub const MAX_THREAD_ID_BYTES: usize = 256;
/// Longest message id, in UTF-8 bytes: it travels as the `Nats-Msg-Id` header and is built
/// from a chat id and a platform message id (`telegram:<chat>:<msg>`).
pub const MAX_MESSAGE_ID_BYTES: usize = 512;

/// `metadata.message_id` of an inbound message: the platform's own id of the message.
pub const MESSAGE_ID: &str = "message_id";
/// In an inbound message's metadata: `true` when more of the same burst may follow within
/// moments (a forwarded message, a photo of an album, a text the client split at the
/// platform's length limit). The worker then waits a moment for the rest before the turn
/// starts; other messages start their turn at once.
pub const BURST: &str = "burst";
/// In an outbound message's metadata: `true` when `chat_id` is a person's user id rather than
/// a chat: the adapter delivers to that person's direct chat (on Telegram the same id; Discord
/// opens the DM channel). Used to reach an owner or a stranger who has not written yet.
pub const TO_USER: &str = "to_user";

fn contract_version() -> u32 {
    CONTRACT_VERSION
}

/// Who wrote an inbound message, as the platform identifies them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sender {
    pub id: String,
    pub name: String,
    pub is_bot: bool,
}

/// A file attached to a message: a path in the agent's workspace or a URL.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Media {
    /// `photo`, `document`, `voice`, `audio`, `video` or `file`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// Whether an inbound message was written by a person or produced by switchboard itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InboundKind {
    #[default]
    User,
    /// Cron prompts, heartbeat wake-ups, sub-agent announcements.
    System,
}

/// Where a system message came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Origin {
    /// `cron`, `heartbeat`, `subagent`, …
    pub kind: String,
    /// The id of the job, sub-agent or other source.
    pub id: String,
}

/// A message for an agent, published by a channel adapter (or a scheduler) on `…in.<channel>.<chat>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InboundMessage {
    #[serde(default = "contract_version")]
    pub v: u32,
    /// Unique and stable per platform message: the deduplication key (`telegram:<chat>:<msg>`).
    pub id: String,
    pub channel: String,
    pub chat_id: String,
    pub sender: Sender,
    pub content: String,
    pub media: Vec<Media>,
    /// Platform id of the message this one answers, if any.
    pub reply_to: Option<String>,
    /// The message this one answers: its author, its (cut) text and the quoted part, when the
    /// platform sent it along. Left out of the JSON when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replied_to: Option<RepliedTo>,
    /// Telegram forum topic or Discord thread id.
    pub thread_id: Option<String>,
    pub is_group: bool,
    /// The bot was addressed (mention, reply to the bot, command).
    pub mentioned: bool,
    pub kind: InboundKind,
    pub origin: Option<Origin>,
    /// When the adapter accepted the message; a missing value reads as "now".
    #[serde(default = "Utc::now")]
    pub received_at: DateTime<Utc>,
    pub metadata: Map<String, Value>,
    /// What the publisher expects beyond an ordinary chat message (a client waiting for this
    /// message's own answer, …); left out of the JSON when none is set. Read through
    /// [`InboundMessage::effective_flags`].
    #[serde(skip_serializing_if = "MessageFlags::is_empty")]
    pub flags: MessageFlags,
}

impl Default for InboundMessage {
    fn default() -> Self {
        Self {
            v: CONTRACT_VERSION,
            id: String::new(),
            channel: String::new(),
            chat_id: String::new(),
            sender: Sender::default(),
            content: String::new(),
            media: Vec::new(),
            reply_to: None,
            replied_to: None,
            thread_id: None,
            is_group: false,
            mentioned: false,
            kind: InboundKind::User,
            origin: None,
            received_at: Utc::now(),
            metadata: Map::new(),
            flags: MessageFlags::default(),
        }
    }
}

/// Why a decoded message cannot be processed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    #[error("field `{0}` must not be empty")]
    Missing(&'static str),
    #[error("unsupported contract version {0} (this build speaks {CONTRACT_VERSION})")]
    Version(u32),
    #[error("a user message needs a non-empty `sender.id`: users are keyed `<channel>:<sender.id>`")]
    NoSender,
    #[error("field `{field}` is {len} bytes long; the limit is {limit} bytes")]
    TooLong { field: &'static str, len: usize, limit: usize },
    #[error("field `{field}` is {len} characters long; the limit is {limit} characters")]
    TooManyChars { field: &'static str, len: usize, limit: usize },
    #[error("field `{field}` has {count} entries; the limit is {limit}")]
    TooMany { field: &'static str, count: usize, limit: usize },
    #[error("`media.kind` {0:?} is not one of photo, document, voice, audio, video or file")]
    MediaKind(String),
}

/// What `media.kind` may say (docs/bus.md).
pub const MEDIA_KINDS: [&str; 6] = ["photo", "document", "voice", "audio", "video", "file"];

/// Refuses an attachment of a kind no adapter or worker knows what to do with.
fn check_media(media: &[Media]) -> Result<(), ContractError> {
    match media.iter().find(|item| !MEDIA_KINDS.contains(&item.kind.as_str())) {
        Some(item) => Err(ContractError::MediaKind(item.kind.chars().take(40).collect())),
        None => Ok(()),
    }
}

/// Refuses a value longer than `limit` UTF-8 bytes.
pub fn check_length(field: &'static str, value: &str, limit: usize) -> Result<(), ContractError> {
    if value.len() > limit { Err(ContractError::TooLong { field, len: value.len(), limit }) } else { Ok(()) }
}

/// The limits every id that reaches the bus keeps (see the `MAX_*` constants).
fn check_ids(id: &str, channel: &str, chat_id: &str, thread_id: Option<&str>) -> Result<(), ContractError> {
    check_length("id", id, MAX_MESSAGE_ID_BYTES)?;
    check_length("channel", channel, MAX_CHANNEL_BYTES)?;
    check_length("chat_id", chat_id, MAX_CHAT_ID_BYTES)?;
    check_length("thread_id", thread_id.unwrap_or_default(), MAX_THREAD_ID_BYTES)
}

impl InboundMessage {
    /// A user message with a fresh id; adapters set platform ids themselves.
    pub fn user(channel: &str, chat_id: &str, sender: Sender, content: &str) -> Self {
        Self {
            id: new_id(),
            channel: channel.to_owned(),
            chat_id: chat_id.to_owned(),
            sender,
            content: content.to_owned(),
            ..Self::default()
        }
    }

    /// A system message (cron prompt, heartbeat, sub-agent result) for a chat. `id` is its
    /// deduplication key and must be stable for one occurrence (`cron:<job>:<time>`), so a
    /// scheduler that publishes it twice still causes one run.
    pub fn system(id: String, chat: ChatAddress, origin: Origin, content: &str) -> Self {
        Self {
            id,
            channel: chat.channel,
            chat_id: chat.chat_id,
            thread_id: chat.thread_id,
            is_group: chat.is_group,
            // Addressed to the agent: in a group, the prompt must not call it overheard chatter.
            mentioned: true,
            sender: Sender { id: "switchboard".into(), name: "switchboard".into(), is_bot: true },
            content: content.to_owned(),
            kind: InboundKind::System,
            origin: Some(origin),
            ..Self::default()
        }
    }

    /// Whether the adapter said more of this message's burst may follow ([`BURST`]).
    pub fn in_burst(&self) -> bool {
        self.metadata.get(BURST).and_then(Value::as_bool) == Some(true)
    }

    /// The platform's id of this message (`metadata.message_id`, set by chat adapters), which
    /// answers quote.
    pub fn platform_message_id(&self) -> Option<String> {
        self.metadata.get(MESSAGE_ID).and_then(Value::as_str).map(str::to_owned)
    }

    /// The channel replies to this message are published on: [`reply::REPLY_CHANNEL`] when it names
    /// an instance of this message's own channel (`api@host-8080` for `api`), else the channel.
    /// Any other value is ignored, so a message cannot send its replies to another channel.
    pub fn reply_channel(&self) -> String {
        reply::routed_channel(self).unwrap_or(&self.channel).to_owned()
    }

    /// The chat this message came from, to address an answer to it later.
    pub fn chat(&self) -> ChatAddress {
        ChatAddress {
            channel: self.channel.clone(),
            chat_id: self.chat_id.clone(),
            thread_id: self.thread_id.clone(),
            is_group: self.is_group,
        }
    }

    /// The session this message belongs to: `channel:chat_id`, plus `:topic:N` on Telegram
    /// forum topics or `:thread:N` elsewhere.
    pub fn session_key(&self) -> String {
        session_key(&self.channel, &self.chat_id, self.thread_id.as_deref())
    }

    /// Checks what serde cannot: required strings are present and the version is known.
    ///
    /// A user message must name its sender: levels, tools and budgets belong to the user
    /// `<channel>:<sender.id>`, and without an id every such message would be charged to one
    /// shared nameless user. System messages have no sender of their own.
    pub fn validate(&self) -> Result<(), ContractError> {
        check_version(self.v)?;
        non_empty("id", &self.id)?;
        non_empty("channel", &self.channel)?;
        non_empty("chat_id", &self.chat_id)?;
        check_ids(&self.id, &self.channel, &self.chat_id, self.thread_id.as_deref())?;
        check_length("sender.id", &self.sender.id, MAX_SENDER_ID_BYTES)?;
        if self.kind == InboundKind::User && self.sender.id.is_empty() {
            return Err(ContractError::NoSender);
        }
        check_media(&self.media)?;
        self.replied_to.as_ref().map_or(Ok(()), RepliedTo::validate)
    }
}

/// What an outbound message is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboundKind {
    /// The answer of a run.
    #[default]
    Reply,
    /// An intermediate update while a run goes on.
    Progress,
    /// Something switchboard says by itself (errors, command answers).
    Notice,
}

/// A message for a chat, published by a worker on `…out.<channel>.<chat>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OutboundMessage {
    #[serde(default = "contract_version")]
    pub v: u32,
    /// Unique per outbound message and stable across redeliveries of the same run.
    pub id: String,
    /// The inbound message id this answers, if any.
    pub in_reply_to: Option<String>,
    pub channel: String,
    pub chat_id: String,
    pub thread_id: Option<String>,
    pub content: String,
    pub media: Vec<Media>,
    /// Platform message id to quote, if the adapter should reply to a specific message.
    pub reply_to: Option<String>,
    pub kind: OutboundKind,
    /// Rows of buttons under the message (a Telegram inline keyboard, Discord components);
    /// left out of the JSON when there are none. Adapters that cannot show buttons send the
    /// text alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub buttons: Vec<Vec<Button>>,
    #[serde(default = "Utc::now")]
    pub created_at: DateTime<Utc>,
    pub metadata: Map<String, Value>,
}

impl Default for OutboundMessage {
    fn default() -> Self {
        Self {
            v: CONTRACT_VERSION,
            id: String::new(),
            in_reply_to: None,
            channel: String::new(),
            chat_id: String::new(),
            thread_id: None,
            content: String::new(),
            media: Vec::new(),
            reply_to: None,
            kind: OutboundKind::Reply,
            buttons: Vec::new(),
            created_at: Utc::now(),
            metadata: Map::new(),
        }
    }
}

impl OutboundMessage {
    /// An answer addressed to the chat (and thread) the inbound message came from.
    pub fn answering(inbound: &InboundMessage, id: String, kind: OutboundKind, content: String) -> Self {
        Self {
            id,
            in_reply_to: Some(inbound.id.clone()),
            channel: inbound.reply_channel(),
            chat_id: inbound.chat_id.clone(),
            thread_id: inbound.thread_id.clone(),
            content,
            reply_to: inbound.platform_message_id(),
            kind,
            ..Self::default()
        }
    }

    pub fn validate(&self) -> Result<(), ContractError> {
        check_version(self.v)?;
        non_empty("id", &self.id)?;
        non_empty("channel", &self.channel)?;
        non_empty("chat_id", &self.chat_id)?;
        check_ids(&self.id, &self.channel, &self.chat_id, self.thread_id.as_deref())?;
        check_media(&self.media)?;
        buttons::check_buttons(&self.buttons)
    }

    /// Whether `chat_id` names a person to reach in their direct chat ([`TO_USER`]).
    pub fn to_user(&self) -> bool {
        self.metadata.get(TO_USER).and_then(Value::as_bool) == Some(true)
    }
}

/// Token counts reported by the model provider, or estimated where it reported none.
///
/// `input_tokens` is everything the model read, cached or not; `cache_read_tokens` and
/// `cache_write_tokens` are the parts of it the provider served from its prompt cache or
/// wrote into it (they are priced differently: see `[prices]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input the provider read from its prompt cache (part of `input_tokens`). Left out of the
    /// JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Input the provider wrote into its prompt cache (part of `input_tokens`; Anthropic). Left
    /// out of the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Some of the counts are switchboard's estimate: the provider did not report usage (many
    /// local servers send none in streamed answers). Left out of the JSON when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl Usage {
    /// Counts the provider reported.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self { input_tokens, output_tokens, ..Self::default() }
    }

    /// Counts switchboard estimated.
    pub fn estimate(input_tokens: u64, output_tokens: u64) -> Self {
        Self { input_tokens, output_tokens, estimated: true, ..Self::default() }
    }

    /// These counts with `read` input tokens served from the provider's cache and `written`
    /// written into it (each at most the input).
    pub fn with_cache(self, read: u64, written: u64) -> Self {
        let read = read.min(self.input_tokens);
        let written = written.min(self.input_tokens - read);
        Self { cache_read_tokens: read, cache_write_tokens: written, ..self }
    }

    /// Adds `other`; the sum is estimated when either part is.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.estimated |= other.estimated;
    }

    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// The input read at the full price: neither from the cache nor into it.
    pub fn uncached_input(&self) -> u64 {
        self.input_tokens.saturating_sub(self.cache_read_tokens + self.cache_write_tokens)
    }

    /// The share of the input served from the cache, in percent (0 without input).
    pub fn cached_percent(&self) -> u64 {
        match self.input_tokens {
            0 => 0,
            input => self.cache_read_tokens * 100 / input,
        }
    }
}

/// What happened in a run, published on `…events.<channel>.<chat>` (best effort, not durable).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    #[serde(default = "contract_version")]
    pub v: u32,
    pub run_id: String,
    pub session_key: String,
    pub channel: String,
    pub chat_id: String,
    #[serde(default)]
    pub inbound_id: Option<String>,
    /// The Telegram forum topic or Discord thread the run's chat is in (the inbound message's
    /// `thread_id`), so that adapters show typing and drafts there without reading session
    /// keys. Left out when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// Platform id of the message the run answers (the one its reply quotes), for a streamed
    /// draft to quote it the same way. Left out when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    #[serde(default = "Utc::now")]
    pub at: DateTime<Utc>,
    #[serde(flatten)]
    pub body: RunEventBody,
}

impl RunEvent {
    /// An event of run `run_id` answering `inbound`, addressed where its reply will go.
    pub fn answering(inbound: &InboundMessage, run_id: &str, session_key: &str, body: RunEventBody) -> Self {
        Self {
            v: CONTRACT_VERSION,
            run_id: run_id.to_owned(),
            session_key: session_key.to_owned(),
            channel: inbound.channel.clone(),
            chat_id: inbound.chat_id.clone(),
            inbound_id: Some(inbound.id.clone()),
            thread_id: inbound.thread_id.clone(),
            reply_to: inbound.platform_message_id(),
            at: Utc::now(),
            body,
        }
    }

    /// The key a run is known by to adapters: the inbound id it answers, else its run id (a
    /// reply's `in_reply_to` or `run_id` metadata names the same run).
    pub fn run_key(&self) -> &str {
        self.inbound_id.as_deref().unwrap_or(&self.run_id)
    }
}

/// The event-specific part of a [`RunEvent`], tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum RunEventBody {
    #[serde(rename = "run.started")]
    Started,
    /// Streamed text of the reply as it is generated.
    #[serde(rename = "chunk")]
    Chunk { text: String },
    #[serde(rename = "tool.call")]
    ToolCall { call_id: String, name: String, arguments: Value },
    #[serde(rename = "tool.result")]
    ToolResult { call_id: String, name: String, content: String, is_error: bool },
    #[serde(rename = "run.completed")]
    Completed {
        reply: String,
        #[serde(default)]
        usage: Usage,
        #[serde(default)]
        model: String,
        /// Estimated cost in USD; absent when unknown (a model without a configured price).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// The files that go with the reply (from the run's `outbox/`); absent when none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        media: Vec<Media>,
    },
    #[serde(rename = "run.failed")]
    Failed { error: String },
    /// A message for the chat from outside any run its subscribers watch (a cron reminder, a
    /// `message` sent from another chat, a reply nobody waited for), kept in the API's outbox:
    /// published by the API process that kept it, so every API process can show it live.
    #[serde(rename = "message")]
    Message {
        id: String,
        content: String,
        /// The files that came with it; absent when none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        media: Vec<Media>,
    },
    /// An event type this build does not know (from a newer worker).
    #[serde(other)]
    Unknown,
}

impl RunEventBody {
    /// `run.completed` with `reply`, without files.
    pub fn completed(reply: impl Into<String>, usage: Usage, model: impl Into<String>, cost_usd: Option<f64>) -> Self {
        Self::Completed { reply: reply.into(), usage, model: model.into(), cost_usd, media: Vec::new() }
    }
}

/// A fresh, time-ordered unique id.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

fn check_version(v: u32) -> Result<(), ContractError> {
    if v == 0 || v > CONTRACT_VERSION { Err(ContractError::Version(v)) } else { Ok(()) }
}

fn non_empty(field: &'static str, value: &str) -> Result<(), ContractError> {
    if value.is_empty() { Err(ContractError::Missing(field)) } else { Ok(()) }
}

#[cfg(test)]
mod tests;
