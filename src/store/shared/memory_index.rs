//! [`MemoryIndex`] for both stores: fingerprints, the memory files' rows, a conversation read
//! back, a scope's newest chunks, the embedding cache, indexing a file and a scope's
//! conversations run the same SQL on both. What each store's search engine decides (FTS5 on
//! SQLite, `tsvector` on PostgreSQL) is its [`SearchEngine`]: the search, the files' chunks
//! in order, the cached vectors, and keeping a chunk's words in step with its row.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Row, Type};

use super::{SearchEngine, lenient};
use crate::provider::ChatMessage;
use crate::store::StoreError;
use crate::store::memory_index::{
    CONVERSATION_PREFIX, ChunkQuery, ConversationMessage, IndexedChunk, MemoryChunk, MemoryHit, MemoryIndex,
    MemoryQuery, conversation_chunks, conversation_text, vector_from_bytes, vector_to_bytes,
};
use crate::store::values::{now_millis, sql_limit};

/// A chunk row: id, path, start line, end line, text.
pub(in crate::store) type ChunkRow = (i64, String, i64, i64, String);

/// Transcript rows indexed per write transaction, so a first search in a long-lived scope
/// does not hold the write lock for long.
const BATCH: usize = 500;

/// A line number as stored (BIGINT) back to what a hit or chunk carries.
pub(in crate::store) fn line(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("line {value}")))
}

fn indexed_chunk((id, path, start, end, text): ChunkRow) -> Result<IndexedChunk, StoreError> {
    Ok(IndexedChunk { id, path, start_line: line(start)?, end_line: line(end)?, text })
}

/// A transcript row's message and time, or `None` with a warning naming the row when either
/// does not decode: memory search goes on without it rather than failing for the whole scope
/// (see `lenient`).
fn readable_message<R>(session_key: &str, id: i64, row: &R) -> Result<Option<(ChatMessage, DateTime<Utc>)>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(lenient::dated_message(row)?
        .map_err(|problem| {
            tracing::warn!(session = %session_key, row = id, %problem,
                "a transcript row is not a readable chat message; memory search goes on without it");
        })
        .ok())
}

/// A transcript row's id, session key, message and time.
type IndexableRow = (i64, String, ChatMessage, DateTime<Utc>);

/// A transcript row of a scope (`id`, `session_key`, `message_json`, `created_at`) to index,
/// or `None` with a warning when it does not decode.
fn indexable<R>(row: &R) -> Result<Option<IndexableRow>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    let id: i64 = row.try_get("id")?;
    let session_key = match lenient::column::<R, String>(row, "session_key")? {
        Ok(key) => key,
        Err(problem) => {
            tracing::warn!(row = id, %problem,
                "a transcript row's session_key does not decode; memory search goes on without the row");
            return Ok(None);
        }
    };
    let readable = readable_message(&session_key, id, row)?;
    Ok(readable.map(|(message, at)| (id, session_key, message, at)))
}

#[async_trait]
impl<B> MemoryIndex for B
where
    B: SearchEngine,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    for<'c> &'c mut <B::Db as Database>::Connection: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> Vec<u8>: Encode<'q, B::Db> + Type<B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> i64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> (String,): FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (i64,): FromRow<'r, <B::Db as Database>::Row>,
    for<'r> ChunkRow: FromRow<'r, <B::Db as Database>::Row>,
{
    async fn memory_fingerprint(&self, root: &str, path: &str) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT fingerprint FROM memory_files WHERE root = $1 AND path = $2")
            .bind(root)
            .bind(path)
            .fetch_optional(self.pool())
            .await?)
    }

    /// Replaces the chunks of `path` under `root` and records `fingerprint`, in one write
    /// transaction.
    async fn index_memory_file(
        &self,
        root: &str,
        path: &str,
        fingerprint: &str,
        chunks: &[MemoryChunk],
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        B::remove_file_chunks(&mut tx, root, path).await?;
        for chunk in chunks {
            let lines = (i64::from(chunk.start_line), i64::from(chunk.end_line));
            B::add_chunk(&mut tx, root, path, lines, &chunk.text, None).await?;
        }
        sqlx::query(
            "INSERT INTO memory_files (root, path, fingerprint, indexed_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (root, path) DO UPDATE SET fingerprint = excluded.fingerprint, \
             indexed_at = excluded.indexed_at",
        )
        .bind(root)
        .bind(path)
        .bind(fingerprint)
        .bind(now_millis())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn forget_memory_file(&self, root: &str, path: &str) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        B::remove_file_chunks(&mut tx, root, path).await?;
        sqlx::query("DELETE FROM memory_files WHERE root = $1 AND path = $2")
            .bind(root)
            .bind(path)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn search_memory(&self, query: &MemoryQuery<'_>) -> Result<Vec<MemoryHit>, StoreError> {
        if query.terms.is_empty() || (query.paths.is_empty() && query.scope.is_none()) || query.limit == 0 {
            return Ok(Vec::new());
        }
        self.search(query).await
    }

    /// Indexes the transcript rows of `scope` after the last one indexed for `root`, batch by
    /// batch.
    async fn index_conversations(&self, root: &str, scope: &str) -> Result<(), StoreError> {
        while index_scope_batch(self, root, scope).await? {}
        Ok(())
    }

    async fn conversation_messages(
        &self,
        scope: &str,
        session_key: &str,
        from_id: i64,
        limit: usize,
    ) -> Result<Vec<ConversationMessage>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, message_json, created_at FROM transcript \
             WHERE session_key = $1 AND memory_scope = $2 AND id >= $3 ORDER BY id LIMIT $4",
        )
        .bind(session_key)
        .bind(scope)
        .bind(from_id)
        .bind(sql_limit(limit))
        .fetch_all(self.pool())
        .await?;
        let mut messages = Vec::new();
        for row in &rows {
            let id: i64 = row.try_get("id")?;
            let Some((message, at)) = readable_message(session_key, id, row)? else { continue };
            if let Some(text) = conversation_text(&message, at) {
                messages.push(ConversationMessage { id, text });
            }
        }
        Ok(messages)
    }

    /// The files' chunks in the order of `query.paths`, then the scope's conversation chunks,
    /// newest (highest id) first; `query.limit` in all.
    async fn memory_chunks(&self, query: &ChunkQuery<'_>) -> Result<Vec<IndexedChunk>, StoreError> {
        let mut rows = self.file_chunks(query).await?;
        let room = query.limit.saturating_sub(rows.len());
        if let Some(scope) = query.scope.filter(|_| room > 0) {
            let newest: Vec<ChunkRow> = sqlx::query_as(
                "SELECT id, path, start_line, end_line, body FROM memory_chunks \
                 WHERE root = $1 AND scope = $2 ORDER BY id DESC LIMIT $3",
            )
            .bind(query.root)
            .bind(scope)
            .bind(sql_limit(room))
            .fetch_all(self.pool())
            .await?;
            rows.extend(newest);
        }
        rows.into_iter().map(indexed_chunk).collect()
    }

    /// A row that is no vector is left out (so its text is embedded again, and the row
    /// replaced).
    async fn cached_embeddings(&self, model: &str, hashes: &[String]) -> Result<HashMap<String, Vec<f32>>, StoreError> {
        if hashes.is_empty() {
            return Ok(HashMap::new());
        }
        let rows = self.cached_vectors(model, hashes).await?;
        Ok(rows.into_iter().filter_map(|(hash, bytes)| Some((hash, vector_from_bytes(&bytes)?))).collect())
    }

    /// Keeps `vectors` of `model` by text hash, in one write transaction.
    async fn store_embeddings(&self, model: &str, vectors: &[(String, Vec<f32>)]) -> Result<(), StoreError> {
        if vectors.is_empty() {
            return Ok(());
        }
        let now = now_millis();
        let mut tx = self.begin_write().await?;
        for (hash, vector) in vectors {
            sqlx::query(
                "INSERT INTO memory_embeddings (model, text_hash, vector, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (model, text_hash) DO UPDATE SET vector = excluded.vector, \
                 created_at = excluded.created_at",
            )
            .bind(model)
            .bind(hash.as_str())
            .bind(vector_to_bytes(vector))
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// One batch of [`MemoryIndex::index_conversations`]; true when there may be more. Under the
/// write transaction, so two searches beside each other never index a row twice.
async fn index_scope_batch<B>(store: &B, root: &str, scope: &str) -> Result<bool, StoreError>
where
    B: SearchEngine,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    for<'c> &'c mut <B::Db as Database>::Connection: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> i64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> (i64,): FromRow<'r, <B::Db as Database>::Row>,
{
    const THROUGH: &str = "COALESCE((SELECT indexed_through FROM memory_transcripts \
         WHERE root = $1 AND scope = $2), 0)";
    // Most searches find nothing new: one read, no write transaction.
    let newer: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT id FROM transcript WHERE memory_scope = $2 AND id > {THROUGH} ORDER BY id LIMIT 1"
    )))
    .bind(root)
    .bind(scope)
    .fetch_optional(store.pool())
    .await?;
    if newer.is_none() {
        return Ok(false);
    }
    let mut tx = store.begin_write().await?;
    // Read again in the transaction: a search beside this one may have indexed them.
    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT id, session_key, message_json, created_at FROM transcript \
         WHERE memory_scope = $2 AND id > {THROUGH} ORDER BY id LIMIT $3"
    )))
    .bind(root)
    .bind(scope)
    .bind(sql_limit(BATCH))
    .fetch_all(&mut *tx)
    .await?;
    let Some(last) = rows.last().map(|row| row.try_get::<i64, _>("id")).transpose()? else {
        tx.commit().await?;
        return Ok(false);
    };
    // A row that does not decode is passed over for good: indexed_through moves past it.
    for row in &rows {
        let Some((id, session_key, message, at)) = indexable(row)? else { continue };
        let path = format!("{CONVERSATION_PREFIX}{session_key}");
        for (line, text) in conversation_chunks(id, &message, at) {
            B::add_chunk(&mut tx, root, &path, (line, line), &text, Some(scope)).await?;
        }
    }
    sqlx::query(
        "INSERT INTO memory_transcripts (root, scope, indexed_through) VALUES ($1, $2, $3) \
         ON CONFLICT (root, scope) DO UPDATE SET indexed_through = excluded.indexed_through",
    )
    .bind(root)
    .bind(scope)
    .bind(last)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows.len() == BATCH)
}
