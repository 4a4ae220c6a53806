//! Session summaries and the compaction mark for the PostgreSQL store: the same columns and
//! the same conditional `UPDATE` as the SQLite store's (`sqlite/compaction.rs`), which
//! PostgreSQL runs under the row's lock, so of two workers on any hosts only one sees a
//! changed row.

use sqlx::PgPool;

use crate::store::StoreError;
use crate::store::values::now_millis;

/// Longer than any compaction takes (a flush turn with its timeout plus one summary call).
const STALE_AFTER_MS: i64 = 15 * 60 * 1000;

/// The session's history version and its summary; `None` when the session has no row yet.
pub(super) async fn summary_and_version(
    pool: &PgPool,
    key: &str,
) -> Result<Option<(i64, Option<(String, u32)>)>, StoreError> {
    let row: Option<(i64, Option<String>, i64)> =
        sqlx::query_as("SELECT history_version, summary, compaction_count FROM sessions WHERE key = $1")
            .bind(key)
            .fetch_optional(pool)
            .await?;
    let Some((version, summary, count)) = row else { return Ok(None) };
    let count = u32::try_from(count)
        .map_err(|_| StoreError::Corrupt(format!("compaction_count of {key} is out of range: {count}")))?;
    Ok(Some((version, summary.map(|summary| (summary, count)))))
}

pub(super) async fn begin(pool: &PgPool, key: &str) -> Result<bool, StoreError> {
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

pub(super) async fn finish(pool: &PgPool, key: &str, summary: &str, through_id: i64) -> Result<(), StoreError> {
    // GREATEST: a compaction never un-hides rows an earlier one covered.
    let updated = sqlx::query(
        "UPDATE sessions SET summary = $1, compacted_through = GREATEST(compacted_through, $2), \
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

pub(super) async fn abort(pool: &PgPool, key: &str) -> Result<(), StoreError> {
    sqlx::query("UPDATE sessions SET compacting_since = NULL WHERE key = $1").bind(key).execute(pool).await?;
    Ok(())
}
