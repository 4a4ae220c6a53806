//! The full-text index of memory files that `memory_search` ranks (see docs/memory.md,
//! "Search").
//!
//! The index is derived data: callers read a file, cut it into [`MemoryChunk`]s and hand them
//! over with a fingerprint; the store replaces the file's chunks when the fingerprint changed.
//! A query is plain words ([`MemoryQuery::terms`]), not a backend's query syntax, so each
//! backend builds its own: SQLite FTS5 `MATCH` with BM25 here, `tsvector`/`ts_rank` in a
//! PostgreSQL store.

use async_trait::async_trait;

use super::StoreError;

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
    /// Words to look for, lowercase, without operators; a chunk with any of them matches, and
    /// chunks with more of them, and rarer ones, rank higher.
    pub terms: &'a [String],
    pub limit: usize,
}

/// One ranked match.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryHit {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    /// The matching part of the chunk, matched words between `**`.
    pub snippet: String,
    /// Higher is better; comparable only within one search.
    pub score: f64,
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
}
