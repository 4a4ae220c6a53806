//! Memory scopes: whose long-term memory a run reads and writes.
//!
//! The owner's private memory (`MEMORY.md`, `USER.md`) belongs to the owner's direct chats
//! only. Every group chat has a file of its own, and so has every other person's direct chat.
//! The worker decides the scope from the chat ([`MemoryScope::decide`]), never the model; the
//! prompt shows only the scope's file, and the file tools refuse every other scope's files
//! ([`MemoryScope::reach`], checked on the real path).

mod reach;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use reach::{Reach, Refusal, Target, check_real_path};

/// The owner's long-term memory file.
pub const OWNER_MEMORY: &str = "MEMORY.md";
/// The owner's description of themselves.
pub const OWNER_PROFILE: &str = "USER.md";
/// The directory of every other scope's memory file.
pub const MEMORY_DIR: &str = "memory";

/// Longest file name (in bytes) written in full; a longer one is shortened and made unique by a
/// hash, well below the 255 bytes file systems allow.
const MAX_NAME_BYTES: usize = 120;

/// Whose memory a run uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum MemoryScope {
    /// No memory at all: every memory file is refused. What a run gets when nobody decided
    /// its scope, so a forgotten decision fails closed.
    #[default]
    None,
    /// The owner's direct chats: `MEMORY.md` and `USER.md`, and the whole workspace.
    Owner,
    /// A group chat (all its topics and threads): `memory/groups/<channel>_<chat_id>.md`.
    Group { channel: String, chat_id: String },
    /// A direct chat with someone who is not an owner: `memory/users/<channel>_<id>.md`.
    Person { channel: String, id: String },
}

/// The person a run acts for, as the scope decision needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acting<'a> {
    pub channel: &'a str,
    pub id: &'a str,
    /// Whether their effective level is owner.
    pub is_owner: bool,
}

/// What decides a run's scope: facts about the chat and the message, none from the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeFacts<'a> {
    pub channel: &'a str,
    pub chat_id: &'a str,
    pub is_group: bool,
    /// A person wrote the message (false: switchboard made it: cron, heartbeat, sub-agent).
    pub from_person: bool,
    /// The sender of a person's message; for a system message the person it names
    /// (`on_behalf_of`), `None` when it acts for nobody in particular.
    pub acting: Option<Acting<'a>>,
    /// The chat is one of the owners' recorded direct chats.
    pub owner_chat: bool,
}

impl MemoryScope {
    /// The scope of a run (see the module docs). A system message in a direct chat gets the
    /// owner's memory only in a chat an owner wrote in themselves: a job made for the owner
    /// but sent to someone else's chat must not carry the owner's memory there.
    pub fn decide(facts: &ScopeFacts<'_>) -> Self {
        if facts.is_group {
            return Self::Group { channel: facts.channel.to_owned(), chat_id: facts.chat_id.to_owned() };
        }
        let person =
            |acting: &Acting<'_>| Self::Person { channel: acting.channel.to_owned(), id: acting.id.to_owned() };
        let this_chat = || Self::Person { channel: facts.channel.to_owned(), id: facts.chat_id.to_owned() };
        match (facts.from_person, facts.acting) {
            (true, Some(acting)) if acting.is_owner => Self::Owner,
            (true, Some(acting)) => person(&acting),
            (false, Some(acting)) if !acting.is_owner => person(&acting),
            (false, _) if facts.owner_chat => Self::Owner,
            _ => this_chat(),
        }
    }

    pub fn is_owner(&self) -> bool {
        *self == Self::Owner
    }

    /// The scope's memory file, relative to the workspace; `None` for [`MemoryScope::None`].
    pub fn file(&self) -> Option<PathBuf> {
        match self {
            Self::None => None,
            Self::Owner => Some(PathBuf::from(OWNER_MEMORY)),
            Self::Group { channel, chat_id } => Some(scoped_file("groups", channel, chat_id)),
            Self::Person { channel, id } => Some(scoped_file("users", channel, id)),
        }
    }

    /// The memory file as the prompt and the flush name it (`/`-separated).
    pub fn file_shown(&self) -> Option<String> {
        self.file().map(|file| file.to_string_lossy().into_owned())
    }

    /// The scope as transcript rows record it for memory search, with the agent whose
    /// workspace holds it: `main/owner`, `main/group:telegram:-100123`,
    /// `main/person:discord:998877`; `None` for [`MemoryScope::None`] (never searched).
    pub fn label(&self, agent: &str) -> Option<String> {
        let scope = match self {
            Self::None => return None,
            Self::Owner => "owner".to_owned(),
            Self::Group { channel, chat_id } => format!("group:{channel}:{chat_id}"),
            Self::Person { channel, id } => format!("person:{channel}:{id}"),
        };
        Some(format!("{agent}/{scope}"))
    }

    /// What kind of chat this memory belongs to, for the prompt ("this group chat").
    pub fn describe(&self) -> &'static str {
        match self {
            Self::None => "no chat",
            Self::Owner => "the owner's direct chats",
            Self::Group { .. } => "this group chat",
            Self::Person { .. } => "this direct chat",
        }
    }

    /// Whether a run in this scope may use `relative` (a real path relative to the
    /// workspace root, symlinks resolved) as `target`. See [`Reach`].
    pub fn reach(&self, relative: &Path, target: Target, reach: Reach) -> bool {
        reach::allows(self, relative, target, reach)
    }
}

/// `memory/<kind>/<channel>_<id>.md`, safe for any channel and id.
fn scoped_file(kind: &str, channel: &str, id: &str) -> PathBuf {
    [MEMORY_DIR, kind, &format!("{}.md", file_stem(channel, id))].iter().collect()
}

/// `<channel>_<id>` with every byte other than a lowercase letter, a digit or `-` written as
/// `%XX` (uppercase hex). So the `_` between the two is never part of either, `/`, `.` and
/// `..` cannot occur, and two ids never share a name, even where file names ignore case.
/// Too long a name keeps its start and ends in `~` and a hash of the whole.
pub fn file_stem(channel: &str, id: &str) -> String {
    let stem = format!("{}_{}", escape(channel), escape(id));
    if stem.len() <= MAX_NAME_BYTES {
        return stem;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{channel}\0{id}").as_bytes());
    let hash = switchboard_channels::hex::hex(&digest[..16]);
    // Every character of the escaped form is ASCII, so any byte index is a boundary.
    format!("{}~{hash}", &stem[..MAX_NAME_BYTES - 33])
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
