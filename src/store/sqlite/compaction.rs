//! Session summaries and the compaction mark for the SQLite store
//! (`migrations/sqlite/0005_compaction.sql`).
//!
//! The mark is a timestamp column set by one conditional `UPDATE`: SQLite runs it under the
//! write lock, so of two workers (even in two processes) only one sees a changed row. A mark
//! older than [`STALE_AFTER_MS`] belongs to a process that died mid-compaction and is taken
//! over, so a crash never blocks a session's compaction for good.

use sqlx::SqlitePool;

use super::now_millis;
use crate::store::StoreError;

/// Longer than any compaction takes (a flush turn with its timeout plus one summary call).
const STALE_AFTER_MS: i64 = 15 * 60 * 1000;

pub(super) async fn summary(pool: &SqlitePool, key: &str) -> Result<Option<(String, u32)>, StoreError> {
    let row: Option<(Option<String>, i64)> =
        sqlx::query_as("SELECT summary, compaction_count FROM sessions WHERE key = $1")
            .bind(key)
            .fetch_optional(pool)
            .await?;
    let Some((Some(summary), count)) = row else { return Ok(None) };
    Ok(Some((summary, count_u32(key, count)?)))
}

/// The session's history version (migration 0016) and its summary; `None` when the session
/// has no row yet.
pub(super) async fn summary_and_version(
    pool: &SqlitePool,
    key: &str,
) -> Result<Option<(i64, Option<(String, u32)>)>, StoreError> {
    let row: Option<(i64, Option<String>, i64)> =
        sqlx::query_as("SELECT history_version, summary, compaction_count FROM sessions WHERE key = $1")
            .bind(key)
            .fetch_optional(pool)
            .await?;
    let Some((version, summary, count)) = row else { return Ok(None) };
    let summary = summary.map(|summary| Ok::<_, StoreError>((summary, count_u32(key, count)?))).transpose()?;
    Ok(Some((version, summary)))
}

fn count_u32(key: &str, count: i64) -> Result<u32, StoreError> {
    u32::try_from(count).map_err(|_| StoreError::Corrupt(format!("compaction_count of {key} is out of range: {count}")))
}

pub(super) async fn begin(pool: &SqlitePool, key: &str) -> Result<bool, StoreError> {
    let now = now_millis();
    let updated = sqlx::query(
        "UPDATE sessions SET compacting_since = $1 \
         WHERE key = $2 AND (compacting_since IS NULL OR compacting_since < $3)",
    )
    .bind(now)
    .bind(key)
    .bind(now - STALE_AFTER_MS)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(updated == 1)
}

pub(super) async fn finish(pool: &SqlitePool, key: &str, summary: &str, through_id: i64) -> Result<(), StoreError> {
    // MAX: a compaction never un-hides rows an earlier one covered.
    let updated = sqlx::query(
        "UPDATE sessions SET summary = $1, compacted_through = MAX(compacted_through, $2), \
         compaction_count = compaction_count + 1, compacting_since = NULL, updated_at = $3, \
         history_version = history_version + 1 WHERE key = $4",
    )
    .bind(summary)
    .bind(through_id)
    .bind(now_millis())
    .bind(key)
    .execute(pool)
    .await?
    .rows_affected();
    if updated == 0 {
        return Err(StoreError::NoSuchSession(key.to_owned()));
    }
    Ok(())
}

pub(super) async fn abort(pool: &SqlitePool, key: &str) -> Result<(), StoreError> {
    sqlx::query("UPDATE sessions SET compacting_since = NULL WHERE key = $1").bind(key).execute(pool).await?;
    Ok(())
}
