//! The parts of [`crate::store::memory_index::MemoryIndex`] both stores run with the same SQL:
//! fingerprints, the memory files' rows, a conversation read back, a scope's newest chunks and
//! the embedding cache, indexing a file and a scope's conversations. Each store's
//! `MemoryIndex` calls these and keeps to itself what its search engine decides (FTS5 on
//! SQLite, `tsvector` on PostgreSQL): its search, and two hooks, `add_chunk` and
//! `remove_file_chunks`, which keep FTS5's external index in step on SQLite.

use crate::provider::ChatMessage;
use crate::store::StoreError;
use crate::store::memory_index::IndexedChunk;

/// A chunk row: id, path, start line, end line, text.
pub(in crate::store) type ChunkRow = (i64, String, i64, i64, String);

/// Transcript rows indexed per write transaction, so a first search in a long-lived scope
/// does not hold the write lock for long.
const BATCH: usize = 500;

/// A line number as stored (BIGINT) back to what a hit or chunk carries.
pub(in crate::store) fn line(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("line {value}")))
}

pub(in crate::store) fn indexed_chunk((id, path, start, end, text): ChunkRow) -> Result<IndexedChunk, StoreError> {
    Ok(IndexedChunk { id, path, start_line: line(start)?, end_line: line(end)?, text })
}

/// A transcript row's message.
pub(in crate::store) fn decode_message(id: i64, json: &str) -> Result<ChatMessage, StoreError> {
    serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("transcript row {id} is unreadable: {e}")))
}

/// The same queries serve both stores; only sqlx's types differ, hence a macro.
macro_rules! memory_common {
    ($store:ty, $db:ty) => {
        impl $store {
            /// Replaces the chunks of `path` under `root` and records `fingerprint`, in one
            /// write transaction.
            pub(in crate::store) async fn index_file(
                &self,
                root: &str,
                path: &str,
                fingerprint: &str,
                chunks: &[crate::store::memory_index::MemoryChunk],
            ) -> Result<(), StoreError> {
                let mut tx = self.begin_write().await?;
                Self::remove_file_chunks(&mut tx, root, path).await?;
                for chunk in chunks {
                    let lines = (i64::from(chunk.start_line), i64::from(chunk.end_line));
                    Self::add_chunk(&mut tx, root, path, lines, &chunk.text, None).await?;
                }
                Self::record_memory_file(&mut tx, root, path, fingerprint).await?;
                tx.commit().await?;
                Ok(())
            }

            /// Drops `path` under `root` from the index.
            pub(in crate::store) async fn forget_file(&self, root: &str, path: &str) -> Result<(), StoreError> {
                let mut tx = self.begin_write().await?;
                Self::remove_file_chunks(&mut tx, root, path).await?;
                sqlx::query("DELETE FROM memory_files WHERE root = $1 AND path = $2")
                    .bind(root)
                    .bind(path)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            /// Indexes the transcript rows of `scope` after the last one indexed for `root`,
            /// batch by batch.
            pub(in crate::store) async fn index_scope(&self, root: &str, scope: &str) -> Result<(), StoreError> {
                while self.index_scope_batch(root, scope).await? {}
                Ok(())
            }

            /// One batch of [`Self::index_scope`]; true when there may be more. Under the write
            /// transaction, so two searches beside each other never index a row twice.
            async fn index_scope_batch(&self, root: &str, scope: &str) -> Result<bool, StoreError> {
                const THROUGH: &str = "COALESCE((SELECT indexed_through FROM memory_transcripts \
                     WHERE root = $1 AND scope = $2), 0)";
                // Most searches find nothing new: one read, no write transaction.
                let newer: Option<i64> = sqlx::query_scalar(&format!(
                    "SELECT id FROM transcript WHERE memory_scope = $2 AND id > {THROUGH} ORDER BY id LIMIT 1"
                ))
                .bind(root)
                .bind(scope)
                .fetch_optional(self.pool())
                .await?;
                if newer.is_none() {
                    return Ok(false);
                }
                let mut tx = self.begin_write().await?;
                // Read again in the transaction: a search beside this one may have indexed them.
                let rows: Vec<(i64, String, String, i64)> = sqlx::query_as(&format!(
                    "SELECT id, session_key, message_json, created_at FROM transcript \
                     WHERE memory_scope = $2 AND id > {THROUGH} ORDER BY id LIMIT $3"
                ))
                .bind(root)
                .bind(scope)
                .bind(crate::store::values::sql_limit(BATCH))
                .fetch_all(&mut *tx)
                .await?;
                let Some(last) = rows.last().map(|row| row.0) else {
                    tx.commit().await?;
                    return Ok(false);
                };
                for (id, session_key, json, created_at) in &rows {
                    let path = format!("{}{session_key}", crate::store::memory_index::CONVERSATION_PREFIX);
                    let message = $crate::store::shared::memory::decode_message(*id, json)?;
                    let at = crate::store::values::from_millis(*created_at)?;
                    for (line, text) in crate::store::memory_index::conversation_chunks(*id, &message, at) {
                        Self::add_chunk(&mut tx, root, &path, (line, line), &text, Some(scope)).await?;
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

            /// The fingerprint `path` under `root` was indexed with, if it was.
            pub(in crate::store) async fn stored_fingerprint(
                &self,
                root: &str,
                path: &str,
            ) -> Result<Option<String>, StoreError> {
                Ok(sqlx::query_scalar("SELECT fingerprint FROM memory_files WHERE root = $1 AND path = $2")
                    .bind(root)
                    .bind(path)
                    .fetch_optional(self.pool())
                    .await?)
            }

            /// Records that `path` under `root` is indexed as of `fingerprint`.
            pub(in crate::store) async fn record_memory_file(
                tx: &mut sqlx::Transaction<'static, $db>,
                root: &str,
                path: &str,
                fingerprint: &str,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO memory_files (root, path, fingerprint, indexed_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (root, path) DO UPDATE SET fingerprint = excluded.fingerprint, \
                     indexed_at = excluded.indexed_at",
                )
                .bind(root)
                .bind(path)
                .bind(fingerprint)
                .bind(crate::store::values::now_millis())
                .execute(&mut **tx)
                .await?;
                Ok(())
            }

            /// Messages of `session_key` written in `scope`, from transcript id `from_id` on;
            /// messages that are not conversation (tool results) are skipped but count against
            /// `limit`.
            pub(in crate::store) async fn conversation_in_scope(
                &self,
                scope: &str,
                session_key: &str,
                from_id: i64,
                limit: usize,
            ) -> Result<Vec<(i64, String)>, StoreError> {
                let rows: Vec<(i64, String, i64)> = sqlx::query_as(
                    "SELECT id, message_json, created_at FROM transcript \
                     WHERE session_key = $1 AND memory_scope = $2 AND id >= $3 ORDER BY id LIMIT $4",
                )
                .bind(session_key)
                .bind(scope)
                .bind(from_id)
                .bind(crate::store::values::sql_limit(limit))
                .fetch_all(self.pool())
                .await?;
                let mut messages = Vec::new();
                for (id, json, created_at) in rows {
                    let at = crate::store::values::from_millis(created_at)?;
                    if let Some(text) = crate::store::memory_index::conversation_text(
                        &$crate::store::shared::memory::decode_message(id, &json)?,
                        at,
                    ) {
                        messages.push((id, text));
                    }
                }
                Ok(messages)
            }

            /// The scope's conversation chunks under `root`, newest (highest id) first.
            pub(in crate::store) async fn scope_chunks(
                &self,
                root: &str,
                scope: &str,
                limit: usize,
            ) -> Result<Vec<$crate::store::shared::memory::ChunkRow>, StoreError> {
                Ok(sqlx::query_as(
                    "SELECT id, path, start_line, end_line, body FROM memory_chunks \
                     WHERE root = $1 AND scope = $2 ORDER BY id DESC LIMIT $3",
                )
                .bind(root)
                .bind(scope)
                .bind(crate::store::values::sql_limit(limit))
                .fetch_all(self.pool())
                .await?)
            }

            /// Keeps `vectors` of `model` by text hash, in one write transaction.
            pub(in crate::store) async fn keep_embeddings(
                &self,
                model: &str,
                vectors: &[(String, Vec<f32>)],
            ) -> Result<(), StoreError> {
                if vectors.is_empty() {
                    return Ok(());
                }
                let now = crate::store::values::now_millis();
                let mut tx = self.begin_write().await?;
                for (hash, vector) in vectors {
                    sqlx::query(
                        "INSERT INTO memory_embeddings (model, text_hash, vector, created_at) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (model, text_hash) DO UPDATE SET vector = excluded.vector, \
                         created_at = excluded.created_at",
                    )
                    .bind(model)
                    .bind(hash)
                    .bind(crate::store::memory_index::vector_to_bytes(vector))
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }
        }
    };
}

memory_common!(crate::store::sqlite::SqliteStore, sqlx::Sqlite);
memory_common!(crate::store::postgres::PostgresStore, sqlx::Postgres);
