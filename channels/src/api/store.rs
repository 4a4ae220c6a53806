//! What the API reads and keeps in switchboard's database: sessions and their messages, runs,
//! and the outbox (messages for API chats that no request was waiting for). The store
//! implements [`ApiStore`]; this crate sees only the trait.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use crate::contract::OutboundMessage;

#[derive(Debug, Error)]
#[error("the API's store: {0}")]
pub struct ApiStoreError(pub String);

/// A session as listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionSummary {
    pub key: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Messages in its transcript (every role) and outbox.
    pub messages: u64,
    /// The sum of its runs' known costs in USD; none when no run of it had a price.
    pub cost_usd: Option<f64>,
}

/// One line of a session as a person reads it back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionMessage {
    /// `user`, `assistant`, `tool` (a tool's result) or `outbox` (sent to the chat by the
    /// agent outside a turn of this session: a reminder, a `message` from elsewhere).
    pub role: String,
    pub content: String,
    pub at: DateTime<Utc>,
    /// The run that wrote it; none for outbox lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Assistant lines: the tools it called, `{name, arguments}`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<Value>,
    /// Tool lines: the tool's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A page of a session's messages, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessagePage {
    pub messages: Vec<SessionMessage>,
    /// Pass as `before` for the page of older messages; `None` on the oldest page.
    pub before: Option<i64>,
}

/// A run as listed, and in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunView {
    pub id: String,
    pub session_key: String,
    /// `turn`, a compaction's `memory_flush` or `summary`, `expired` (a message that waited
    /// longer than `worker.max_wait_secs` and got a note instead), or `command` / `no_turn` (a
    /// chat command, a message settled without a turn: recorded, but no model was called).
    pub kind: String,
    /// `running`, `completed` or `failed`.
    pub status: String,
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, what the provider served from its prompt cache ...
    pub cache_read_tokens: u64,
    /// ... and what it wrote into it.
    pub cache_write_tokens: u64,
    /// The token counts are switchboard's estimate (the model server reported none).
    pub tokens_estimated: bool,
    pub cost_usd: Option<f64>,
    /// Model calls the run made.
    pub iterations: u32,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// `GET /v1/runs/{id}` only: the tools it called, `{name, arguments, result, is_error}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
}

/// Which sessions a caller may see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionScope {
    /// Every session of every channel.
    All,
    /// The API chats whose ids start with this (a chat token's `<identity>/`).
    ApiChatsUnder(String),
}

/// Which runs [`ApiStore::runs`] lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunFilter<'a> {
    /// Only this session's.
    pub session: Option<&'a str>,
    /// Only those started before this.
    pub before: Option<DateTime<Utc>>,
    /// Chat commands and messages settled without a turn too (kinds `command`, `no_turn`).
    pub commands: bool,
}

/// A message for the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEntry {
    pub message: OutboundMessage,
    /// The session it belongs to (`api:<chat>`, or `<agent>/api:<chat>`).
    pub session_key: String,
    /// A turn of that session wrote it, so its transcript holds it already (a reply nobody
    /// waited for); otherwise the outbox is where the session's messages show it.
    pub in_transcript: bool,
    /// Post it to the configured webhook.
    pub webhook: bool,
}

/// An outbox message whose webhook post is due.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookDue {
    /// Its place in the outbox.
    pub seq: i64,
    pub message: OutboundMessage,
    pub session_key: String,
    /// This try's number, from 1.
    pub attempt: u32,
}

#[async_trait]
pub trait ApiStore: Send + Sync {
    /// Sessions in `scope`, most recently active first; `before`: only those active before it.
    async fn sessions(
        &self,
        scope: &SessionScope,
        before: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, ApiStoreError>;

    /// The newest `limit` messages of session `key` older than position `before`.
    async fn session_messages(
        &self,
        key: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<MessagePage, ApiStoreError>;

    /// Forgets session `key`: its messages, summary and outbox. Its runs stay listed (without
    /// their reply text) for usage accounting. False when there was no such session.
    async fn delete_session(&self, key: &str) -> Result<bool, ApiStoreError>;

    /// The newest runs, of one session when `session` is given, started before `before`: the
    /// runs that called the model, and with `commands` the chat commands and the messages
    /// settled without a turn too.
    async fn runs(&self, filter: &RunFilter<'_>, limit: usize) -> Result<Vec<RunView>, ApiStoreError>;

    /// One run with its tool calls.
    async fn run(&self, id: &str) -> Result<Option<RunView>, ApiStoreError>;

    /// Keeps `entry` (once: false when a message with its id was kept before).
    async fn keep_outbound(&self, entry: &OutboxEntry) -> Result<bool, ApiStoreError>;

    /// Outbox messages whose webhook post is due, taken for `lease` (no other process takes
    /// them meanwhile; a process that dies leaves them due again after it).
    async fn claim_webhooks(&self, lease: std::time::Duration, limit: usize) -> Result<Vec<WebhookDue>, ApiStoreError>;

    /// The outcome of a webhook post: `retry_at` for another try, `None` when it is done
    /// (delivered, or given up).
    async fn webhook_outcome(&self, seq: i64, retry_at: Option<DateTime<Utc>>) -> Result<(), ApiStoreError>;
}
