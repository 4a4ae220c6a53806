//! [`MemoryIndex`] for the PostgreSQL store: the SQLite store's tables, with PostgreSQL's own
//! full-text search where that one has FTS5. Each chunk's words are a generated `tsvector`
//! (the `simple` configuration: no stemming and no stop words, like FTS5's `unicode61`), a
//! GIN index finds the matches, `ts_rank` orders them and `ts_headline` cuts the snippet.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::{Postgres, Transaction};

use super::PostgresStore;
use crate::store::StoreError;
use crate::store::memory_index::{
    ChunkQuery, IndexedChunk, MemoryChunk, MemoryHit, MemoryIndex, MemoryQuery, spoken_by_agent, vector_from_bytes,
};
use crate::store::shared::memory::{ChunkRow, indexed_chunk, line};
use crate::store::values::sql_limit;

/// A search's row: chunk id, path, lines, snippet, rank, and a conversation chunk's start
/// (empty for a file's), which says who wrote it.
type Hit = (i64, String, i64, i64, String, f32, String);

/// How `ts_headline` cuts a snippet: about as much as FTS5's `snippet()` shows.
const HEADLINE: &str = "StartSel=**, StopSel=**, MaxWords=24, MinWords=8, ShortWord=0, MaxFragments=1, \
     FragmentDelimiter=…";

/// The `tsquery` for `terms`: each one quoted (so nothing in it is an operator), words of three
/// letters or more also as a prefix (`zebra` finds `zebras`), any of them matching.
pub(crate) fn ts_query(terms: &[String]) -> String {
    terms
        .iter()
        .map(|term| {
            let quoted = format!("'{}'", term.replace('\\', "\\\\").replace('\'', "''"));
            if term.chars().count() >= 3 { format!("{quoted}:*") } else { quoted }
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

#[async_trait]
impl MemoryIndex for PostgresStore {
    async fn memory_fingerprint(&self, root: &str, path: &str) -> Result<Option<String>, StoreError> {
        self.stored_fingerprint(root, path).await
    }

    async fn index_memory_file(
        &self,
        root: &str,
        path: &str,
        fingerprint: &str,
        chunks: &[MemoryChunk],
    ) -> Result<(), StoreError> {
        self.index_file(root, path, fingerprint, chunks).await
    }

    async fn forget_memory_file(&self, root: &str, path: &str) -> Result<(), StoreError> {
        self.forget_file(root, path).await
    }

    async fn search_memory(&self, query: &MemoryQuery<'_>) -> Result<Vec<MemoryHit>, StoreError> {
        if query.terms.is_empty() || (query.paths.is_empty() && query.scope.is_none()) || query.limit == 0 {
            return Ok(Vec::new());
        }
        // Ranked and cut first; the headline, which reads the whole text, only for the hits.
        let rows: Vec<Hit> = sqlx::query_as(
            "SELECT id, path, start_line, end_line, ts_headline('simple', body, q, $5), rank, \
                    CASE WHEN scope IS NULL THEN '' ELSE substr(body, 1, 64) END \
             FROM (SELECT c.*, q, ts_rank(c.words, q) AS rank \
                   FROM memory_chunks c, to_tsquery('simple', $1) AS q \
                   WHERE c.words @@ q AND c.root = $2 AND (c.path = ANY($3) OR c.scope = $6) \
                   ORDER BY rank DESC, c.path, c.start_line LIMIT $4) AS hit \
             ORDER BY rank DESC, path, start_line",
        )
        .bind(ts_query(query.terms))
        .bind(query.root)
        .bind(query.paths)
        .bind(sql_limit(query.limit))
        .bind(HEADLINE)
        .bind(query.scope)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter()
            .map(|(chunk_id, path, start, end, snippet, rank, start_of_message)| {
                let (start_line, end_line) = (line(start)?, line(end)?);
                let by_agent = spoken_by_agent(&start_of_message);
                Ok(MemoryHit { chunk_id, path, start_line, end_line, snippet, score: f64::from(rank), by_agent })
            })
            .collect()
    }

    async fn index_conversations(&self, root: &str, scope: &str) -> Result<(), StoreError> {
        self.index_scope(root, scope).await
    }

    async fn conversation_messages(
        &self,
        scope: &str,
        session_key: &str,
        from_id: i64,
        limit: usize,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        self.conversation_in_scope(scope, session_key, from_id, limit).await
    }

    async fn memory_chunks(&self, query: &ChunkQuery<'_>) -> Result<Vec<IndexedChunk>, StoreError> {
        let mut rows: Vec<ChunkRow> = sqlx::query_as(
            "SELECT c.id, c.path, c.start_line, c.end_line, c.body \
             FROM unnest($2::TEXT[]) WITH ORDINALITY AS p (path, n) \
             JOIN memory_chunks c ON c.root = $1 AND c.path = p.path \
             ORDER BY p.n, c.start_line, c.id LIMIT $3",
        )
        .bind(query.root)
        .bind(query.paths)
        .bind(sql_limit(query.limit))
        .fetch_all(self.pool())
        .await?;
        let room = query.limit.saturating_sub(rows.len());
        if let Some(scope) = query.scope.filter(|_| room > 0) {
            rows.extend(self.scope_chunks(query.root, scope, room).await?);
        }
        rows.into_iter().map(indexed_chunk).collect()
    }

    async fn cached_embeddings(&self, model: &str, hashes: &[String]) -> Result<HashMap<String, Vec<f32>>, StoreError> {
        if hashes.is_empty() {
            return Ok(HashMap::new());
        }
        let rows: Vec<(String, Vec<u8>)> =
            sqlx::query_as("SELECT text_hash, vector FROM memory_embeddings WHERE model = $1 AND text_hash = ANY($2)")
                .bind(model)
                .bind(hashes)
                .fetch_all(self.pool())
                .await?;
        // A row that is no vector is left out, so its text is embedded again.
        Ok(rows.into_iter().filter_map(|(hash, bytes)| Some((hash, vector_from_bytes(&bytes)?))).collect())
    }

    async fn store_embeddings(&self, model: &str, vectors: &[(String, Vec<f32>)]) -> Result<(), StoreError> {
        self.keep_embeddings(model, vectors).await
    }
}

impl PostgresStore {
    /// Adds one chunk; its words are the generated column's.
    pub(in crate::store) async fn add_chunk(
        tx: &mut Transaction<'static, Postgres>,
        root: &str,
        path: &str,
        (start, end): (i64, i64),
        text: &str,
        scope: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO memory_chunks (root, path, start_line, end_line, body, scope) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(root)
        .bind(path)
        .bind(start)
        .bind(end)
        .bind(text)
        .bind(scope)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Removes a file's chunks; the GIN index follows by itself.
    pub(in crate::store) async fn remove_file_chunks(
        tx: &mut Transaction<'static, Postgres>,
        root: &str,
        path: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM memory_chunks WHERE root = $1 AND path = $2")
            .bind(root)
            .bind(path)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}
