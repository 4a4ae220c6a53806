//! The parts of [`crate::store::memory_index::MemoryIndex`] both stores run with the same SQL:
//! fingerprints, the memory files' rows, a conversation read back, a scope's newest chunks and
//! the embedding cache. Each store's `MemoryIndex` calls these and keeps to itself what its
//! search engine decides (FTS5 on SQLite, `tsvector` on PostgreSQL).

use crate::provider::ChatMessage;
use crate::store::StoreError;
use crate::store::memory_index::IndexedChunk;

/// A chunk row: id, path, start line, end line, text.
pub(in crate::store) type ChunkRow = (i64, String, i64, i64, String);

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
