//! Past conversations in the SQLite memory index: transcript rows written in a memory scope
//! become chunks of `memory_chunks` (with `scope` set), indexed as new rows appear
//! (`migrations/sqlite/0014_memory_transcripts.sql`).

use sqlx::{Sqlite, Transaction};

use super::{SqliteStore, from_millis};
use crate::store::StoreError;
use crate::store::memory_index::{CONVERSATION_PREFIX, conversation_chunks};
use crate::store::shared::memory::decode_message;

/// Transcript rows indexed per write transaction, so a first search in a long-lived scope
/// does not hold the write lock for long.
const BATCH: i64 = 500;

/// A transcript row as the index reads it: id, session, message JSON, time (unix ms).
type Row = (i64, String, String, i64);

/// Indexes the rows of `scope` after the last one indexed for `root`, batch by batch.
pub(super) async fn index(store: &SqliteStore, root: &str, scope: &str) -> Result<(), StoreError> {
    loop {
        // Most searches find nothing new: a read, no write lock.
        let through = indexed_through(store.pool(), root, scope).await?;
        let newer: Option<(i64,)> =
            sqlx::query_as("SELECT id FROM transcript WHERE memory_scope = $1 AND id > $2 ORDER BY id LIMIT 1")
                .bind(scope)
                .bind(through)
                .fetch_optional(store.pool())
                .await?;
        if newer.is_none() {
            return Ok(());
        }
        let mut tx = store.begin_write().await?;
        // Read again under the write lock: a search beside this one may have indexed them.
        let through = indexed_through(&mut *tx, root, scope).await?;
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, session_key, message_json, created_at FROM transcript \
             WHERE memory_scope = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(scope)
        .bind(through)
        .bind(BATCH)
        .fetch_all(&mut *tx)
        .await?;
        let Some(last) = rows.last().map(|row| row.0) else {
            tx.commit().await?;
            return Ok(());
        };
        for row in &rows {
            insert_row(&mut tx, root, scope, row).await?;
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
        if i64::try_from(rows.len()).unwrap_or(i64::MAX) < BATCH {
            return Ok(());
        }
    }
}

async fn indexed_through<'e, E>(executor: E, root: &str, scope: &str) -> Result<i64, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    let row: Option<(i64,)> =
        sqlx::query_as("SELECT indexed_through FROM memory_transcripts WHERE root = $1 AND scope = $2")
            .bind(root)
            .bind(scope)
            .fetch_optional(executor)
            .await?;
    Ok(row.map_or(0, |(through,)| through))
}

async fn insert_row(
    tx: &mut Transaction<'static, Sqlite>,
    root: &str,
    scope: &str,
    (id, session_key, json, created_at): &Row,
) -> Result<(), StoreError> {
    let message = decode_message(*id, json)?;
    let path = format!("{CONVERSATION_PREFIX}{session_key}");
    for (line, text) in conversation_chunks(*id, &message, from_millis(*created_at)?) {
        let (chunk_id,): (i64,) = sqlx::query_as(
            "INSERT INTO memory_chunks (root, path, start_line, end_line, body, scope) \
             VALUES ($1, $2, $3, $3, $4, $5) RETURNING id",
        )
        .bind(root)
        .bind(&path)
        .bind(line)
        .bind(&text)
        .bind(scope)
        .fetch_one(&mut **tx)
        .await?;
        sqlx::query("INSERT INTO memory_fts (rowid, body) VALUES ($1, $2)")
            .bind(chunk_id)
            .bind(&text)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
