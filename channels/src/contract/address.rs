//! Where a message goes and the session key that names it: a chat, and a Telegram topic or a
//! Discord thread in it, written `channel:chat[:topic|thread:id]` on the bus, in the stores and
//! wherever people name a chat.

use serde::{Deserialize, Serialize};

/// Where a message goes: a chat, and a Telegram topic or Discord thread in it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatAddress {
    pub channel: String,
    pub chat_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    pub is_group: bool,
}

impl ChatAddress {
    /// The session key of this chat (see [`InboundMessage::session_key`]).
    pub fn session_key(&self) -> String {
        session_key(&self.channel, &self.chat_id, self.thread_id.as_deref())
    }

    /// Reads a chat written like its session key (the inverse of [`ChatAddress::session_key`]):
    /// `telegram:-100123`, `telegram:-100123:topic:7`, `discord:55:thread:9`, `api:me`. Used
    /// where people name a chat: config, the CLI, tool arguments.
    ///
    /// Whether the chat is a group is not in a session key; it is inferred: a topic or thread
    /// lives in a group, and Telegram groups have negative ids.
    pub fn parse(text: &str) -> Result<ChatAddress, BadAddress> {
        let bad = || BadAddress(text.to_owned());
        let (channel, rest) = text.trim().split_once(':').ok_or_else(bad)?;
        if channel.is_empty() || channel.contains(char::is_whitespace) || rest.is_empty() {
            return Err(bad());
        }
        let (chat_id, thread_id) = match rest.rsplitn(3, ':').collect::<Vec<_>>().as_slice() {
            [thread, word @ ("topic" | "thread"), chat] => {
                // The word session keys use on this channel, so a typo is not read as a chat id.
                let expected = if channel == "telegram" { "topic" } else { "thread" };
                if *word != expected || thread.is_empty() || chat.is_empty() {
                    return Err(bad());
                }
                (*chat, Some((*thread).to_owned()))
            }
            _ => (rest, None),
        };
        let is_group = thread_id.is_some() || (channel == "telegram" && chat_id.starts_with('-'));
        Ok(ChatAddress { channel: channel.to_owned(), chat_id: chat_id.to_owned(), thread_id, is_group })
    }
}

/// A chat name that is not written like a session key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a chat address: write channel:chat_id, optionally with :topic:N (Telegram) or :thread:N \
     (e.g. telegram:-100123:topic:7, discord:55:thread:9, api:me)"
)]
pub struct BadAddress(pub String);

/// The session key for a chat, optionally narrowed to a topic or thread.
pub fn session_key(channel: &str, chat_id: &str, thread_id: Option<&str>) -> String {
    match thread_id {
        // Telegram calls its sub-chats forum topics; Discord and others call them threads.
        Some(thread) if channel == "telegram" => format!("{channel}:{chat_id}:topic:{thread}"),
        Some(thread) => format!("{channel}:{chat_id}:thread:{thread}"),
        None => format!("{channel}:{chat_id}"),
    }
}

/// The agent configured by `[agent]`: its session keys carry no prefix, so data written
/// before named agents existed stays valid.
pub const MAIN_AGENT: &str = "main";

/// A session's key: one agent's conversation in one chat (or in an isolated session such as
/// a cron job's `cron:ab12cd34`). Its text form, the same on the bus, in the stores and in the
/// API, is the chat's key ([`session_key`]) for the main agent and `<agent>/<chat's key>` for
/// the others. Made only here: [`SessionKey::of_chat`], [`SessionKey::named`], or
/// [`SessionKey::stored`] for one read back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionKey(String);

impl SessionKey {
    /// `agent`'s session in `chat`.
    pub fn of_chat(agent: &str, chat: &ChatAddress) -> Self {
        Self::named(agent, &chat.session_key())
    }

    /// `agent`'s session called `base`: a chat's key (`telegram:-100123:topic:7`) or an
    /// isolated session's name (`cron:ab12cd34`).
    pub fn named(agent: &str, base: &str) -> Self {
        if agent == MAIN_AGENT { Self(base.to_owned()) } else { Self(format!("{agent}/{base}")) }
    }

    /// A key as it was stored or sent (`ops/telegram:-100123`).
    pub fn stored(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key without `agent`'s prefix: the chat's key or the isolated session's name
    /// (unchanged when it has no such prefix).
    pub fn base(&self, agent: &str) -> &str {
        if agent == MAIN_AGENT {
            return &self.0;
        }
        self.0.strip_prefix(agent).and_then(|rest| rest.strip_prefix('/')).unwrap_or(&self.0)
    }
}

impl std::ops::Deref for SessionKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for SessionKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<SessionKey> for String {
    fn eq(&self, other: &SessionKey) -> bool {
        *self == other.0
    }
}

impl From<SessionKey> for String {
    fn from(key: SessionKey) -> String {
        key.0
    }
}

impl PartialEq<str> for SessionKey {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SessionKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}
