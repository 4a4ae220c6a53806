//! The SQLite store's search engine for the memory index
//! (`migrations/sqlite/0013_memory_index.sql`): FTS5 with BM25 ranking over `memory_chunks`,
//! kept in step by hand (external content table).

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::memory_index::{ChunkQuery, MemoryHit, MemoryQuery, spoken_by_agent};
use crate::store::shared::SearchEngine;
use crate::store::shared::memory_index::ChunkRow;

/// A search's row: chunk id, path, lines, snippet, BM25, and a conversation chunk's start
/// (empty for a file's), which says who wrote it.
type Hit = (i64, String, i64, i64, String, f64, String);

/// Words of context FTS5's `snippet()` shows around a match.
const SNIPPET_TOKENS: i64 = 24;

/// The FTS5 query for `terms`: each one quoted (so nothing in it is an operator), words of
/// three letters or more also as a prefix (`zebra` finds `zebras`), any of them matching.
pub(crate) fn fts5_query(terms: &[String]) -> String {
    terms
        .iter()
        .map(|term| {
            let quoted = format!("\"{}\"", term.replace('"', "\"\""));
            if term.chars().count() >= 3 { format!("{quoted}*") } else { quoted }
        })
        .collect::<Vec<_>>()
        .join(" OR ")
}

impl SearchEngine for SqliteStore {
    async fn search(&self, query: &MemoryQuery<'_>) -> Result<Vec<MemoryHit>, StoreError> {
        let paths = serde_json::to_string(query.paths).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let rows: Vec<Hit> = sqlx::query_as(
            "SELECT c.id, c.path, c.start_line, c.end_line, snippet(memory_fts, 0, '**', '**', '…', $5), bm25(memory_fts), \
                    CASE WHEN c.scope IS NULL THEN '' ELSE substr(c.body, 1, 64) END \
             FROM memory_fts JOIN memory_chunks c ON c.id = memory_fts.rowid \
             WHERE memory_fts MATCH $1 AND c.root = $2 \
               AND (c.path IN (SELECT value FROM json_each($3)) OR c.scope = $6) \
             ORDER BY bm25(memory_fts), c.path, c.start_line LIMIT $4",
        )
        .bind(fts5_query(query.terms))
        .bind(query.root)
        .bind(paths)
        .bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
        .bind(SNIPPET_TOKENS)
        .bind(query.scope)
        .fetch_all(self.pool())
        .await?;
        let line = |value: i64| u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("line {value}")));
        rows.into_iter()
            .map(|(chunk_id, path, start, end, snippet, bm25, start_of_message)| {
                // FTS5's bm25() is lower for better matches.
                let (start_line, end_line) = (line(start)?, line(end)?);
                let by_agent = spoken_by_agent(&start_of_message);
                Ok(MemoryHit { chunk_id, path, start_line, end_line, snippet, score: -bm25, by_agent })
            })
            .collect()
    }

    async fn file_chunks(&self, query: &ChunkQuery<'_>) -> Result<Vec<ChunkRow>, StoreError> {
        super::memory_embeddings::file_chunks(self, query).await
    }

    async fn cached_vectors(&self, model: &str, hashes: &[String]) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        super::memory_embeddings::cached_vectors(self, model, hashes).await
    }

    /// Adds one chunk to the table and to the FTS index (external content: told by hand).
    async fn add_chunk(
        tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
        root: &str,
        path: &str,
        (start, end): (i64, i64),
        text: &str,
        scope: Option<&str>,
    ) -> Result<(), StoreError> {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO memory_chunks (root, path, start_line, end_line, body, scope) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(root)
        .bind(path)
        .bind(start)
        .bind(end)
        .bind(text)
        .bind(scope)
        .fetch_one(&mut **tx)
        .await?;
        sqlx::query("INSERT INTO memory_fts (rowid, body) VALUES ($1, $2)")
            .bind(id)
            .bind(text)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Removes a file's chunks from the table and from the FTS index (which, holding external
    /// content, must be told the old text to forget).
    async fn remove_file_chunks(
        tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
        root: &str,
        path: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO memory_fts (memory_fts, rowid, body) \
             SELECT 'delete', id, body FROM memory_chunks WHERE root = $1 AND path = $2",
        )
        .bind(root)
        .bind(path)
        .execute(&mut **tx)
        .await?;
        sqlx::query("DELETE FROM memory_chunks WHERE root = $1 AND path = $2")
            .bind(root)
            .bind(path)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory_index::{MemoryChunk, MemoryIndex};

    fn chunk(line: u32, text: &str) -> MemoryChunk {
        MemoryChunk { start_line: line, end_line: line, text: text.into() }
    }

    async fn search(store: &SqliteStore, root: &str, paths: &[&str], words: &[&str]) -> Vec<(String, u64)> {
        let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
        let terms: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
        let query = MemoryQuery { root, paths: &paths, scope: None, terms: &terms, limit: 10 };
        let hits = store.search_memory(&query).await.unwrap();
        hits.into_iter().map(|hit| (hit.path, hit.start_line)).collect()
    }

    async fn integrity(store: &SqliteStore) {
        sqlx::query("INSERT INTO memory_fts (memory_fts, rank) VALUES ('integrity-check', 1)")
            .execute(store.pool())
            .await
            .expect("the FTS index matches its chunks");
    }

    #[test]
    fn queries_quote_every_term() {
        let terms = ["zebra", "or", "a\"b", "x*"].map(String::from);
        assert_eq!(fts5_query(&terms), "\"zebra\"* OR \"or\" OR \"a\"\"b\"* OR \"x*\"");
    }

    #[tokio::test]
    async fn files_are_replaced_forgotten_and_kept_apart_per_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
        store
            .index_memory_file("/a", "MEMORY.md", "1:x", &[chunk(1, "Zebra"), chunk(3, "Lion and zebra")])
            .await
            .unwrap();
        store.index_memory_file("/b", "MEMORY.md", "1:y", &[chunk(7, "zebra")]).await.unwrap();
        store.index_memory_file("/a", "USER.md", "1:z", &[chunk(2, "zebras")]).await.unwrap();
        assert_eq!(store.memory_fingerprint("/a", "MEMORY.md").await.unwrap().as_deref(), Some("1:x"));
        let hits = search(&store, "/a", &["MEMORY.md"], &["zebra", "lion"]).await;
        assert_eq!(hits, [("MEMORY.md".to_owned(), 3), ("MEMORY.md".to_owned(), 1)]);
        assert_eq!(search(&store, "/a", &["USER.md", "MEMORY.md"], &["zebra"]).await.len(), 3);
        assert!(search(&store, "/a", &[], &["zebra"]).await.is_empty());

        store.index_memory_file("/a", "MEMORY.md", "2:x", &[chunk(5, "Only a lion now")]).await.unwrap();
        assert!(search(&store, "/a", &["MEMORY.md"], &["zebra"]).await.is_empty());
        assert_eq!(search(&store, "/a", &["MEMORY.md"], &["lion"]).await, [("MEMORY.md".to_owned(), 5)]);
        store.forget_memory_file("/a", "MEMORY.md").await.unwrap();
        assert!(search(&store, "/a", &["MEMORY.md"], &["lion"]).await.is_empty());
        assert_eq!(store.memory_fingerprint("/a", "MEMORY.md").await.unwrap(), None);
        assert_eq!(search(&store, "/b", &["MEMORY.md"], &["zebra"]).await, [("MEMORY.md".to_owned(), 7)]);
        integrity(&store).await;
    }
}
