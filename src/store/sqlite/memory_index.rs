//! [`MemoryIndex`] for SQLite (`migrations/sqlite/0013_memory_index.sql`): FTS5 with BM25
//! ranking over `memory_chunks`, kept in step by hand (external content table).

use async_trait::async_trait;
use chrono::Utc;

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::memory_index::{MemoryChunk, MemoryHit, MemoryIndex, MemoryQuery};

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

#[async_trait]
impl MemoryIndex for SqliteStore {
    async fn memory_fingerprint(&self, root: &str, path: &str) -> Result<Option<String>, StoreError> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT fingerprint FROM memory_files WHERE root = $1 AND path = $2")
                .bind(root)
                .bind(path)
                .fetch_optional(self.pool())
                .await?;
        Ok(row.map(|(fingerprint,)| fingerprint))
    }

    async fn index_memory_file(
        &self,
        root: &str,
        path: &str,
        fingerprint: &str,
        chunks: &[MemoryChunk],
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        delete_chunks(&mut tx, root, path).await?;
        for chunk in chunks {
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO memory_chunks (root, path, start_line, end_line, body) VALUES ($1, $2, $3, $4, $5) \
                 RETURNING id",
            )
            .bind(root)
            .bind(path)
            .bind(i64::from(chunk.start_line))
            .bind(i64::from(chunk.end_line))
            .bind(&chunk.text)
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query("INSERT INTO memory_fts (rowid, body) VALUES ($1, $2)")
                .bind(id)
                .bind(&chunk.text)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query(
            "INSERT INTO memory_files (root, path, fingerprint, indexed_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (root, path) DO UPDATE SET fingerprint = excluded.fingerprint, indexed_at = excluded.indexed_at",
        )
        .bind(root)
        .bind(path)
        .bind(fingerprint)
        .bind(Utc::now().timestamp_millis())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn forget_memory_file(&self, root: &str, path: &str) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        delete_chunks(&mut tx, root, path).await?;
        sqlx::query("DELETE FROM memory_files WHERE root = $1 AND path = $2")
            .bind(root)
            .bind(path)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn search_memory(&self, query: &MemoryQuery<'_>) -> Result<Vec<MemoryHit>, StoreError> {
        if query.terms.is_empty() || query.paths.is_empty() || query.limit == 0 {
            return Ok(Vec::new());
        }
        let paths = serde_json::to_string(query.paths).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let rows: Vec<(String, i64, i64, String, f64)> = sqlx::query_as(
            "SELECT c.path, c.start_line, c.end_line, snippet(memory_fts, 0, '**', '**', '…', $5), bm25(memory_fts) \
             FROM memory_fts JOIN memory_chunks c ON c.id = memory_fts.rowid \
             WHERE memory_fts MATCH $1 AND c.root = $2 AND c.path IN (SELECT value FROM json_each($3)) \
             ORDER BY bm25(memory_fts), c.path, c.start_line LIMIT $4",
        )
        .bind(fts5_query(query.terms))
        .bind(query.root)
        .bind(paths)
        .bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
        .bind(SNIPPET_TOKENS)
        .fetch_all(self.pool())
        .await?;
        let line = |value: i64| u32::try_from(value).map_err(|_| StoreError::Corrupt(format!("line {value}")));
        rows.into_iter()
            .map(|(path, start, end, snippet, bm25)| {
                // FTS5's bm25() is lower for better matches.
                Ok(MemoryHit { path, start_line: line(start)?, end_line: line(end)?, snippet, score: -bm25 })
            })
            .collect()
    }
}

/// Removes a file's chunks from the table and from the FTS index (which, holding external
/// content, must be told the old text to forget).
async fn delete_chunks(
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
