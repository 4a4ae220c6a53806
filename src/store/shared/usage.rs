//! [`UsageLedger`] for both stores (`migrations/sqlite/0023_run_payer.sql`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};
use switchboard_channels::contract::Usage;

use super::Backend;
use super::runs::model_kinds;
use crate::store::StoreError;
use crate::store::usage::{LastActive, SLICE_MINUTES, UsageLedger, UsageSlice};
use crate::store::users::UserId;
use crate::store::values::{from_millis, to_u64};

const SLICE_MILLIS: i64 = SLICE_MINUTES * 60 * 1000;

/// A row of the slice query: slice number, user, runs, input, output, cache read, cache
/// write, any estimated, known cost, unpriced runs.
type SliceRow = (i64, Option<i64>, i64, i64, i64, i64, i64, i64, f64, i64);

fn slice(row: SliceRow) -> Result<UsageSlice, StoreError> {
    let (slot, user, runs, input, output, cache_read, cache_write, estimated, cost_usd, unpriced) = row;
    Ok(UsageSlice {
        start: from_millis(slot.saturating_mul(SLICE_MILLIS))?,
        user: user.map(UserId),
        runs: to_u64(runs, "runs")?,
        usage: Usage {
            input_tokens: to_u64(input, "input_tokens")?,
            output_tokens: to_u64(output, "output_tokens")?,
            cache_read_tokens: to_u64(cache_read, "cache_read_tokens")?,
            cache_write_tokens: to_u64(cache_write, "cache_write_tokens")?,
            estimated: estimated > 0,
        },
        cost_usd,
        unpriced_runs: to_u64(unpriced, "unpriced runs")?,
    })
}

/// PostgreSQL sums integers as NUMERIC: every sum is cast back.
#[async_trait]
impl<B> UsageLedger for B
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'r> SliceRow: FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (i64, i64): FromRow<'r, <B::Db as Database>::Row>,
{
    async fn usage_slices(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<UsageSlice>, StoreError> {
        let sql = format!(
            "SELECT r.started_at / {SLICE_MILLIS} AS slot, i.user_id, COUNT(*), \
             CAST(SUM(r.input_tokens) AS BIGINT), CAST(SUM(r.output_tokens) AS BIGINT), \
             CAST(SUM(r.cache_read_tokens) AS BIGINT), CAST(SUM(r.cache_write_tokens) AS BIGINT), \
             CAST(SUM(CASE WHEN r.usage_estimated THEN 1 ELSE 0 END) AS BIGINT), \
             CAST(COALESCE(SUM(r.cost_usd), 0) AS DOUBLE PRECISION), \
             CAST(SUM(CASE WHEN r.cost_usd IS NULL THEN 1 ELSE 0 END) AS BIGINT) \
             FROM runs r LEFT JOIN identities i \
             ON i.channel = r.billed_channel AND i.sender_id = r.billed_sender \
             WHERE r.started_at >= $1 AND r.started_at < $2 AND r.status <> 'running' \
             AND r.kind IN ({}) \
             GROUP BY r.started_at / {SLICE_MILLIS}, i.user_id ORDER BY slot",
            model_kinds()
        );
        let rows: Vec<SliceRow> = sqlx::query_as(AssertSqlSafe(sql))
            .bind(from.timestamp_millis())
            .bind(to.timestamp_millis())
            .fetch_all(self.pool())
            .await?;
        rows.into_iter().map(slice).collect()
    }

    async fn last_active(&self) -> Result<Vec<LastActive>, StoreError> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT i.user_id, MAX(r.started_at) FROM identities i JOIN runs r \
             ON r.billed_channel = i.channel AND r.billed_sender = i.sender_id GROUP BY i.user_id",
        )
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(|(user, at)| Ok(LastActive { user: UserId(user), at: from_millis(at)? })).collect()
    }
}
