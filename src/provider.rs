//! Model providers: the [`Provider`] trait, the chat types the agent loop speaks, the
//! OpenAI-compatible and Anthropic implementations, the failover chain, the price table and the
//! embeddings client ([`embeddings`]).

pub mod anthropic;
mod clients;
pub mod embeddings;
pub mod failover;
pub mod history;
mod http;
mod http_provider;
pub mod images;
pub mod limit;
pub mod openai;
pub mod pricing;
mod retry;
mod retry_after;
pub(crate) mod sse;
pub mod transcribe;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_channels::contract::{SessionKey, Usage};
use thiserror::Error;

pub(crate) use http::error_chain;
pub use retry::{MAX_RETRY_AFTER, RetryPolicy, with_retries};

/// Who wrote a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (a JSON object, usually).
    pub arguments: Value,
}

/// One message of a conversation, as stored in the transcript and sent to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    /// Assistant messages: the tools it called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Tool messages: the call this result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Tool messages: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// User messages: the person who wrote it, when one person did (not a merged batch, not a
    /// system message). Stored with the transcript; shown to the model in group chats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<Author>,
    /// User messages: images attached to it (photos the adapter saved). Models with `vision`
    /// see the newest user message's images as image parts (see [`images`]); the text names
    /// their paths either way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageRef>,
    /// User messages: the turn's context line (when it was sent, by whom, where; see
    /// [`crate::prompt::context`]), shown to the model before the text. Stored with the
    /// message, so every later turn sends it exactly as the first did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The newest user message only: what it recalled from memory, shown after the text for
    /// this turn (last, so that the next turn, which sends the message without it, still
    /// shares everything before it with this one). Never stored.
    #[serde(skip)]
    pub recalled: Option<String>,
}

/// An image attached to a user message: a file the adapter saved, and its type as the
/// platform named it (the file's own bytes decide what is sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// The person who wrote a user message, as their chat platform names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Author {
    /// The platform's id of the person (`sender.id` on the bus).
    pub id: String,
    /// Their display name.
    #[serde(default)]
    pub name: String,
}

impl Author {
    /// How the model is told who spoke: `Alice (id 111)`; the id tells apart two people with
    /// one name, and a person who renamed themselves stays recognisable.
    pub fn label(&self) -> String {
        match self.name.trim() {
            "" => format!("id {}", self.id),
            name => format!("{name} (id {})", self.id),
        }
    }

    /// The characters of [`Author::label`], counted without building it (token estimates
    /// count every message of a history on every turn).
    pub fn label_chars(&self) -> usize {
        let id = self.id.chars().count();
        match self.name.trim() {
            "" => "id ".len() + id,
            name => name.chars().count() + " (id ".len() + id + ")".len(),
        }
    }
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            author: None,
            images: Vec::new(),
            context: None,
            recalled: None,
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self { role: Role::User, ..Self::system(content) }
    }

    /// A user message written by `author`.
    pub fn user_by(author: Author, content: impl Into<String>) -> Self {
        Self { author: Some(author), ..Self::user(content) }
    }

    /// This message as the model sees it in a group chat: a user message's author named in a
    /// prefix (`[Alice (id 111)] text`). A prefix rather than OpenAI's `name` field, which
    /// Anthropic and llama.cpp ignore and which refuses names with spaces. A message with a
    /// context line needs none: the line names the speaker.
    pub fn with_speaker(&self) -> ChatMessage {
        match (&self.role, &self.author) {
            (Role::User, Some(author)) if self.context.is_none() => {
                ChatMessage { content: format!("[{}] {}", author.label(), self.content), author: None, ..self.clone() }
            }
            _ => self.clone(),
        }
    }

    /// The text the model reads: the context line (when set), the content, then what was
    /// recalled (when set). Providers send this; the transcript keeps the parts apart.
    pub fn text_for_model(&self) -> Cow<'_, str> {
        match &self.recalled {
            None => self.text_without_recall(),
            Some(recalled) => Cow::Owned(format!("{}\n\n{recalled}", self.text_without_recall())),
        }
    }

    /// The context line and the content: what later turns send of this message.
    pub fn text_without_recall(&self) -> Cow<'_, str> {
        match &self.context {
            None => Cow::Borrowed(&self.content),
            Some(context) if self.content.is_empty() => Cow::Borrowed(context),
            Some(context) => Cow::Owned(format!("{context}\n\n{}", self.content)),
        }
    }

    /// This user message with `images` attached.
    pub fn with_images(self, images: Vec<ImageRef>) -> Self {
        Self { images, ..self }
    }

    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self { role: Role::Assistant, tool_calls, ..Self::system(content) }
    }

    pub fn tool_result(call: &ToolCall, content: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            tool_call_id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            ..Self::system(content)
        }
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides. Sent as `auto` with tools: llama-cpp-python shows the model no tools
    /// at all when `tool_choice` is left out.
    #[default]
    Auto,
    /// No tool call.
    None,
    /// Some tool call.
    Required,
    /// A call of this tool. Small local models often call tools only when told which.
    Named(String),
}

impl ToolChoice {
    /// `agent.tool_choice` as written: `auto` (or empty), `none`, `required`, or a tool's name.
    pub fn parse(text: &str) -> ToolChoice {
        match text.trim() {
            "" | "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            name => ToolChoice::Named(name.to_owned()),
        }
    }
}

/// One call to the model. It borrows the turn's messages and shares the registry's tool
/// schemas: a turn with a long history and many tools calls the model several times, and
/// copying both for each call (and again for each entry of a model chain) was a large part
/// of what a turn in flight held.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest<'a> {
    pub model: String,
    pub messages: Cow<'a, [ChatMessage]>,
    pub tools: Vec<Arc<ToolSpec>>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// Sent only with tools.
    pub tool_choice: ToolChoice,
    /// What the provider may group requests by for its prompt cache (OpenAI's
    /// `prompt_cache_key`): the same for every request of one conversation.
    pub cache_key: Option<String>,
}

impl ChatRequest<'_> {
    /// The same request for `model`, borrowing this one's messages (a chain's next entry).
    pub fn for_model(&self, model: &str) -> ChatRequest<'_> {
        ChatRequest {
            model: model.to_owned(),
            messages: Cow::Borrowed(&self.messages),
            tools: self.tools.clone(),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            tool_choice: self.tool_choice.clone(),
            cache_key: self.cache_key.clone(),
        }
    }

    /// A copy that owns its messages, to keep past the call (recording fakes).
    pub fn into_owned(self) -> ChatRequest<'static> {
        let ChatRequest { model, messages, tools, max_tokens, temperature, tool_choice, cache_key } = self;
        let messages = Cow::Owned(messages.into_owned());
        ChatRequest { model, messages, tools, max_tokens, temperature, tool_choice, cache_key }
    }
}

/// The prompt-cache grouping key of `agent`'s conversation `session_key` (see
/// [`ChatRequest::cache_key`]): a hash, so the provider never learns chat ids.
pub fn cache_key(agent: &str, session_key: &SessionKey) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{agent}\0{session_key}").as_bytes());
    switchboard_channels::hex::hex(&digest[..16])
}

/// The model's answer to one call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    /// The model that answered, as the provider names it.
    pub model: String,
    pub finish_reason: Option<String>,
}

/// Receives streamed text as it arrives.
pub type TextSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

#[derive(Debug, Error)]
pub enum ProviderError {
    #[error("the provider answered HTTP {status}: {message}")]
    Http { status: u16, message: String, retry_after: Option<Duration> },
    #[error("the conversation is longer than the model's context window: {0}")]
    ContextOverflow(String),
    #[error("cannot reach the provider: {0}")]
    Network(String),
    #[error("the provider did not answer within {0:?}")]
    Timeout(Duration),
    #[error("cannot read the provider's answer: {0}")]
    Decode(String),
    /// The provider's configuration is unusable (bad URL, a header value with a newline…).
    #[error("invalid provider configuration: {0}")]
    Config(String),
    /// A streamed answer broke off after some of its text had already been passed on; it is
    /// not retried, so the user never sees the same text twice.
    #[error("the answer broke off after part of it was streamed: {0}")]
    Interrupted(String),
}

impl ProviderError {
    /// Worth trying again: rate limits, server errors, timeouts and network failures.
    pub fn is_transient(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => *status == 429 || *status == 408 || *status >= 500,
            ProviderError::Network(_) | ProviderError::Timeout(_) => true,
            ProviderError::ContextOverflow(_)
            | ProviderError::Decode(_)
            | ProviderError::Config(_)
            | ProviderError::Interrupted(_) => false,
        }
    }

    /// The context window the provider named when it refused a request as too long.
    pub fn context_limit(&self) -> Option<u64> {
        match self {
            ProviderError::ContextOverflow(message) => http::overflow_limit(message),
            _ => None,
        }
    }

    /// The wait the provider asked for, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A model vendor's API.
#[async_trait]
pub trait Provider: Send + Sync {
    /// A short name for logs and run records (`openai`, the configured entry name, …).
    fn name(&self) -> &str;

    /// Sends one request. With `stream`, text is passed to it as it arrives; the returned
    /// response holds the whole text either way.
    async fn complete(
        &self,
        request: &ChatRequest<'_>,
        stream: Option<TextSink<'_>>,
    ) -> Result<ChatResponse, ProviderError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_rows_without_an_author_still_decode_and_new_ones_keep_it() {
        let old: ChatMessage = serde_json::from_str(r#"{"role":"user","content":"hi"}"#).unwrap();
        assert_eq!(old, ChatMessage::user("hi"));
        assert_eq!(serde_json::to_string(&old).unwrap(), r#"{"role":"user","content":"hi"}"#);
        let alice = ChatMessage::user_by(Author { id: "111".into(), name: "Alice".into() }, "hi");
        let json = serde_json::to_string(&alice).unwrap();
        assert_eq!(json, r#"{"role":"user","content":"hi","author":{"id":"111","name":"Alice"}}"#);
        assert_eq!(serde_json::from_str::<ChatMessage>(&json).unwrap(), alice);
    }

    #[test]
    fn speakers_are_named_in_one_short_form() {
        let alice = ChatMessage::user_by(Author { id: "111".into(), name: "Alice".into() }, "hi");
        assert_eq!(alice.with_speaker().content, "[Alice (id 111)] hi");
        let nameless = ChatMessage::user_by(Author { id: "9".into(), name: " ".into() }, "hi");
        assert_eq!(nameless.with_speaker().content, "[id 9] hi");
        let answer = ChatMessage::assistant("hello", Vec::new());
        assert_eq!(answer.with_speaker(), answer, "only people's messages are named");
    }

    #[test]
    fn a_labels_length_is_counted_as_it_is_written() {
        for (id, name) in [("111", "Alice"), ("9", " "), ("42", " Zoë 🦊 "), ("ид-7", "")] {
            let author = Author { id: id.into(), name: name.into() };
            assert_eq!(author.label_chars(), author.label().chars().count(), "{id} {name:?}");
        }
    }
}
