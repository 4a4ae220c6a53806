//! The full-text index of memory files that `memory_search` ranks (see docs/memory.md,
//! "Search").
//!
//! The index is derived data: callers read a file, cut it into [`MemoryChunk`]s and hand them
//! over with a fingerprint; the store replaces the file's chunks when the fingerprint changed.
//! A query is plain words ([`MemoryQuery::terms`]), not a backend's query syntax, so each
//! backend builds its own: SQLite FTS5 `MATCH` with BM25 here, `tsvector`/`ts_rank` in a
//! PostgreSQL store.
//!
//! With embeddings on (`[memory.embeddings]`), the index also hands out the chunks a search
//! ranks by meaning ([`MemoryIndex::memory_chunks`]) and keeps their vectors by model and
//! [`text_hash`], so a chunk whose text is unchanged is never embedded again, whatever its id.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sha2::Digest;

use super::StoreError;
use crate::provider::{ChatMessage, Role};

/// The path prefix of a conversation's chunks and hits: `conversation/<session_key>`, with the
/// transcript id of a message as its line.
pub const CONVERSATION_PREFIX: &str = "conversation/";

/// Characters of one transcript message in one chunk; a longer message gets several.
const MESSAGE_CHUNK_CHARS: usize = 2_000;

/// A piece of a memory file: a paragraph or a run of lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryChunk {
    /// 1-based, inclusive.
    pub start_line: u32,
    pub end_line: u32,
    pub text: String,
}

/// Which files a search covers and what it looks for.
#[derive(Debug, Clone, Copy)]
pub struct MemoryQuery<'a> {
    /// The workspace the files belong to (its canonical path).
    pub root: &'a str,
    /// The files to search, relative to `root`: only these, whatever else is indexed.
    pub paths: &'a [String],
    /// The memory scope whose indexed conversations are searched too (see
    /// [`MemoryIndex::index_conversations`]); `None`: files only.
    pub scope: Option<&'a str>,
    /// Words to look for, lowercase, without operators; a chunk with any of them matches, and
    /// chunks with more of them, and rarer ones, rank higher.
    pub terms: &'a [String],
    pub limit: usize,
}

/// The chunks a search covers, for ranking by meaning: the same files and scope as a
/// [`MemoryQuery`].
#[derive(Debug, Clone, Copy)]
pub struct ChunkQuery<'a> {
    pub root: &'a str,
    pub paths: &'a [String],
    pub scope: Option<&'a str>,
    /// Chunks at most: those of the files first, then the scope's conversations, newest first.
    pub limit: usize,
}

/// A message of a conversation as [`MemoryIndex::conversation_messages`] reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationMessage {
    /// Its transcript id (a conversation hit's line).
    pub id: i64,
    /// As [`conversation_text`] shows it.
    pub text: String,
}

/// A chunk of the index as it is, with its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedChunk {
    /// Its id in the index (as in [`MemoryHit::chunk_id`]).
    pub id: i64,
    pub path: String,
    pub start_line: u64,
    pub end_line: u64,
    pub text: String,
}

/// One ranked match: a chunk of a file (its lines), or of a conversation (`path`
/// [`CONVERSATION_PREFIX`]`<session_key>`, the message's transcript id as its lines).
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryHit {
    /// The chunk's id in the index: tells apart the chunks of one long line or message.
    pub chunk_id: i64,
    pub path: String,
    pub start_line: u64,
    pub end_line: u64,
    /// The matching part of the chunk, matched words between `**`.
    pub snippet: String,
    /// Higher is better; comparable only within one search.
    pub score: f64,
    /// A conversation message the agent wrote (see [`spoken_by_agent`]), not one it was told.
    pub by_agent: bool,
}

#[async_trait]
pub trait MemoryIndex: Send + Sync {
    /// The fingerprint `path` was last indexed with, if it is indexed.
    async fn memory_fingerprint(&self, root: &str, path: &str) -> Result<Option<String>, StoreError>;

    /// Replaces the chunks of `path` with `chunks`, in one transaction.
    async fn index_memory_file(
        &self,
        root: &str,
        path: &str,
        fingerprint: &str,
        chunks: &[MemoryChunk],
    ) -> Result<(), StoreError>;

    /// Drops `path` from the index (the file is gone).
    async fn forget_memory_file(&self, root: &str, path: &str) -> Result<(), StoreError>;

    /// The best matches of the query, best first.
    async fn search_memory(&self, query: &MemoryQuery<'_>) -> Result<Vec<MemoryHit>, StoreError>;

    /// Indexes, for searches in `root`, the transcript messages written in memory scope
    /// `scope` since the last call (see [`conversation_chunks`]). Transcript rows are never
    /// changed, so what is indexed stays right.
    async fn index_conversations(&self, root: &str, scope: &str) -> Result<(), StoreError>;

    /// Up to `limit` messages of a conversation from transcript id `from_id` on, only those
    /// written in `scope`, oldest first, as [`conversation_text`] shows them.
    async fn conversation_messages(
        &self,
        scope: &str,
        session_key: &str,
        from_id: i64,
        limit: usize,
    ) -> Result<Vec<ConversationMessage>, StoreError>;

    /// The indexed chunks `query` covers, at most `query.limit`: the files' chunks first, then
    /// the scope's conversation chunks, newest first.
    async fn memory_chunks(&self, query: &ChunkQuery<'_>) -> Result<Vec<IndexedChunk>, StoreError>;

    /// The vectors of `model` kept for these [`text_hash`]es; hashes without one are not in
    /// the map.
    async fn cached_embeddings(&self, model: &str, hashes: &[String]) -> Result<HashMap<String, Vec<f32>>, StoreError>;

    /// Keeps vectors of `model` by [`text_hash`]; a hash that has one keeps it.
    async fn store_embeddings(&self, model: &str, vectors: &[(String, Vec<f32>)]) -> Result<(), StoreError>;
}

/// What embeddings are cached by: the SHA-256 of a chunk's text, in hex.
pub fn text_hash(text: &str) -> String {
    switchboard_channels::hex::hex(&sha2::Sha256::digest(text.as_bytes()))
}

/// A vector as bytes to keep: its numbers as little-endian `f32`s.
pub fn vector_to_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The vector [`vector_to_bytes`] made; `None` when the length is no multiple of four.
pub fn vector_from_bytes(bytes: &[u8]) -> Option<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let numbers = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    Some(numbers.collect())
}

/// How a transcript message reads in search: a header with its time (UTC, to the minute) and
/// who spoke, then its text. `None` for what is not conversation: tool results, system
/// messages, an assistant message that only called tools.
pub fn conversation_text(message: &ChatMessage, at: DateTime<Utc>) -> Option<String> {
    conversation_parts(message, at).map(|(header, text)| format!("{header}{text}"))
}

/// A message's header and text, as [`conversation_text`] joins them.
fn conversation_parts(message: &ChatMessage, at: DateTime<Utc>) -> Option<(String, &str)> {
    let text = message.content.trim();
    let speaker = match message.role {
        Role::User => message.author.as_ref().map_or_else(|| "user".to_owned(), |author| author.label()),
        Role::Assistant => "assistant".to_owned(),
        Role::System | Role::Tool => return None,
    };
    (!text.is_empty()).then(|| (header(at, &speaker), text))
}

/// `[2026-11-20 14:03 UTC] Ann (id 7): `: what starts every chunk of a message.
fn header(at: DateTime<Utc>, speaker: &str) -> String {
    format!("[{} UTC] {speaker}: ", at.format("%Y-%m-%d %H:%M"))
}

/// Whether a conversation chunk's text (its start is enough) is one the agent wrote: its
/// header names `assistant` as the speaker (a person is always named with an id).
pub fn spoken_by_agent(chunk_start: &str) -> bool {
    chunk_start.starts_with('[')
        && chunk_start.split_once(" UTC] ").is_some_and(|(_, rest)| rest.starts_with("assistant: "))
}

/// The chunks of one transcript message (transcript id `id`): its [`conversation_text`], cut
/// into pieces of at most 2,000 characters that all carry the id as their line and start
/// with the message's header, so each piece says when and by whom.
pub fn conversation_chunks(id: i64, message: &ChatMessage, at: DateTime<Utc>) -> Vec<(i64, String)> {
    let Some((header, text)) = conversation_parts(message, at) else { return Vec::new() };
    let room = MESSAGE_CHUNK_CHARS.saturating_sub(header.chars().count()).max(MESSAGE_CHUNK_CHARS / 2);
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(room).map(|piece| (id, format!("{header}{}", piece.iter().collect::<String>()))).collect()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::provider::Author;

    #[test]
    fn every_piece_of_a_long_message_says_when_and_who() {
        let at = Utc.with_ymd_and_hms(2026, 11, 20, 14, 3, 59).unwrap();
        let long = ChatMessage::user_by(Author { id: "7".into(), name: "Ann".into() }, "word ".repeat(900));
        let pieces = conversation_chunks(12, &long, at);
        assert_eq!(pieces.len(), 3);
        for (id, text) in &pieces {
            assert_eq!(*id, 12);
            assert!(text.starts_with("[2026-11-20 14:03 UTC] Ann (id 7): "), "{text}");
            assert!(text.chars().count() <= MESSAGE_CHUNK_CHARS, "{}", text.chars().count());
            assert!(!spoken_by_agent(text));
        }
        let reply = ChatMessage::assistant("Noted.", Vec::new());
        let [(_, text)] = &conversation_chunks(13, &reply, at)[..] else { panic!("one chunk") };
        assert_eq!(text, "[2026-11-20 14:03 UTC] assistant: Noted.");
        assert!(spoken_by_agent(text));
        let named = ChatMessage::user_by(Author { id: "8".into(), name: "assistant".into() }, "hi");
        assert!(!spoken_by_agent(&conversation_text(&named, at).unwrap()), "a person named assistant");
        assert!(conversation_chunks(14, &ChatMessage::assistant("  ", Vec::new()), at).is_empty());
    }
}
