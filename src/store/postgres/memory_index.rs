//! The PostgreSQL store's search engine for the memory index: the SQLite store's tables, with
//! PostgreSQL's own full-text search where that one has FTS5. Each chunk's words are a generated `tsvector`
//! (the `simple` configuration: no stemming and no stop words, like FTS5's `unicode61`), a
//! GIN index finds the matches, `ts_rank` orders them and `ts_headline` cuts the snippet.

use sqlx::{Postgres, Transaction};

use super::PostgresStore;
use crate::store::StoreError;
use crate::store::memory_index::{ChunkQuery, MemoryHit, MemoryQuery, spoken_by_agent};
use crate::store::shared::SearchEngine;
use crate::store::shared::memory_index::{ChunkRow, line};
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

impl SearchEngine for PostgresStore {
    async fn search(&self, query: &MemoryQuery<'_>) -> Result<Vec<MemoryHit>, StoreError> {
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

    async fn file_chunks(&self, query: &ChunkQuery<'_>) -> Result<Vec<ChunkRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT c.id, c.path, c.start_line, c.end_line, c.body \
             FROM unnest($2::TEXT[]) WITH ORDINALITY AS p (path, n) \
             JOIN memory_chunks c ON c.root = $1 AND c.path = p.path \
             ORDER BY p.n, c.start_line, c.id LIMIT $3",
        )
        .bind(query.root)
        .bind(query.paths)
        .bind(sql_limit(query.limit))
        .fetch_all(self.pool())
        .await?)
    }

    async fn cached_vectors(&self, model: &str, hashes: &[String]) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        Ok(sqlx::query_as("SELECT text_hash, vector FROM memory_embeddings WHERE model = $1 AND text_hash = ANY($2)")
            .bind(model)
            .bind(hashes)
            .fetch_all(self.pool())
            .await?)
    }

    /// Adds one chunk; its words are the generated column's.
    async fn add_chunk(
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
    async fn remove_file_chunks(
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
