//! [`SubagentStore`] for both stores (`migrations/sqlite/0009_subagents.sql`).
//!
//! Every state change is one `UPDATE … WHERE <expected state>`: whoever changes the row
//! first wins and the others see `rows_affected() == 0`, which holds across processes and
//! hosts.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Row, Type};
use switchboard_channels::contract::Usage;

use super::users::UserRows;
use super::{Backend, RowsAffected};
use crate::store::StoreError;
use crate::store::subagents::{
    Created, NewSubagent, Renewal, SubagentEnd, SubagentRecord, SubagentStatus, SubagentStore,
};
use crate::store::values::{from_millis, sql_limit, to_i64, to_u64};

const COLUMNS: &str = "id, parent_session, parent_agent, chat, session, label, on_behalf_of, task, status, result, error, \
     worker, lease_until, cancel_requested, created_at, started_at, finished_at, announced, input_tokens, \
     output_tokens, usage_estimated, cost_usd";

/// The live states, as SQL.
const LIVE: &str = "('queued', 'running')";

/// The end states whose outcome is announced (everything but `cancelled`).
const ANNOUNCED_ENDS: &str = "('completed', 'failed', 'timed_out', 'lost')";

#[async_trait]
impl<B> SubagentStore for B
where
    B: Backend,
    B::Db: UserRows,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    for<'c> &'c mut <B::Db as Database>::Connection: Executor<'c, Database = B::Db>,
    <B::Db as Database>::QueryResult: RowsAffected,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'a> String: Encode<'a, B::Db> + Decode<'a, B::Db> + Type<B::Db>,
    for<'a> i64: Encode<'a, B::Db> + Decode<'a, B::Db> + Type<B::Db>,
    for<'a> f64: Decode<'a, B::Db> + Type<B::Db>,
    for<'a> bool: Encode<'a, B::Db> + Decode<'a, B::Db> + Type<B::Db>,
    for<'q> Option<String>: Encode<'q, B::Db>,
    for<'q> Option<f64>: Encode<'q, B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> (i64,): FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (String,): FromRow<'r, <B::Db as Database>::Row>,
{
    async fn create_subagent(
        &self,
        new: &NewSubagent,
        max_children: usize,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Created, StoreError> {
        // BEGIN IMMEDIATE holds the write lock from the count to the insert.
        let mut tx = self.begin_write().await?;
        let live: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM subagents WHERE parent_session = $1 AND status IN {LIVE}"
        )))
        .bind(&new.parent_session)
        .fetch_one(&mut *tx)
        .await?;
        let live = usize::try_from(live).unwrap_or(usize::MAX);
        if live >= max_children {
            return Ok(Created::SessionFull { live });
        }
        let chat = serde_json::to_string(&new.chat)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode a chat address: {e}")))?;
        sqlx::query(
            "INSERT INTO subagents (id, parent_session, parent_agent, chat, session, label, task, status, \
             worker, lease_until, created_at, on_behalf_of) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'queued', $8, $9, $10, $11)",
        )
        .bind(&new.id)
        .bind(&new.parent_session)
        .bind(&new.parent_agent)
        .bind(chat)
        .bind(&new.session)
        .bind(&new.label)
        .bind(&new.task)
        .bind(&new.worker)
        .bind(lease_until.timestamp_millis())
        .bind(now.timestamp_millis())
        .bind(&new.on_behalf_of)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Created::Queued)
    }

    async fn start_subagent(
        &self,
        id: &str,
        worker: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let changed = sqlx::query(
            "UPDATE subagents SET status = 'running', started_at = $3, lease_until = $4 \
             WHERE id = $1 AND worker = $2 AND status = 'queued' AND cancel_requested = 0",
        )
        .bind(id)
        .bind(worker)
        .bind(now.timestamp_millis())
        .bind(lease_until.timestamp_millis())
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(changed == 1)
    }

    async fn renew_subagent_lease(
        &self,
        id: &str,
        worker: &str,
        lease_until: DateTime<Utc>,
    ) -> Result<Renewal, StoreError> {
        let cancel: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
            "UPDATE subagents SET lease_until = $3 WHERE id = $1 AND worker = $2 AND status IN {LIVE} \
             RETURNING cancel_requested"
        )))
        .bind(id)
        .bind(worker)
        .bind(lease_until.timestamp_millis())
        .fetch_optional(self.pool())
        .await?;
        Ok(match cancel {
            None => Renewal::Gone,
            Some(0) => Renewal::Renewed,
            Some(_) => Renewal::CancelRequested,
        })
    }

    async fn finish_subagent(
        &self,
        id: &str,
        worker: &str,
        end: &SubagentEnd,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        // One transaction: the usage is counted exactly when the end is recorded, never twice.
        let mut tx = self.begin_write().await?;
        let changed = sqlx::query(AssertSqlSafe(format!(
            "UPDATE subagents SET status = $3, result = $4, error = $5, finished_at = $6, \
             announced = CASE WHEN $3 = 'cancelled' THEN 1 ELSE 0 END, \
             input_tokens = $7, output_tokens = $8, cost_usd = $9, usage_estimated = $10 \
             WHERE id = $1 AND worker = $2 AND status IN {LIVE}"
        )))
        .bind(id)
        .bind(worker)
        .bind(end.status.as_str())
        .bind(&end.result)
        .bind(&end.error)
        .bind(now.timestamp_millis())
        .bind(to_i64(end.usage.input_tokens))
        .bind(to_i64(end.usage.output_tokens))
        .bind(end.cost_usd)
        .bind(end.usage.estimated)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if changed == 1
            && let Some(billing) = &end.billing
        {
            B::Db::record_usage(&mut tx, billing, end.usage, end.cost_usd).await?;
        }
        tx.commit().await?;
        Ok(changed == 1)
    }

    async fn request_subagent_cancel(&self, parent_session: &str) -> Result<Vec<String>, StoreError> {
        let ids: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
            "UPDATE subagents SET cancel_requested = 1 WHERE parent_session = $1 AND status IN {LIVE} RETURNING id"
        )))
        .bind(parent_session)
        .fetch_all(self.pool())
        .await?;
        Ok(ids)
    }

    async fn expire_subagent_leases(&self, now: DateTime<Utc>, error: &str) -> Result<Vec<SubagentRecord>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "UPDATE subagents SET \
                 status = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE 'lost' END, \
                 error = CASE WHEN cancel_requested = 1 THEN error ELSE $2 END, \
                 announced = cancel_requested, finished_at = $1 \
             WHERE status IN {LIVE} AND lease_until < $1 RETURNING {COLUMNS}"
        )))
        .bind(now.timestamp_millis())
        .bind(error)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(record).collect()
    }

    async fn unannounced_subagents(
        &self,
        ended_before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<SubagentRecord>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM subagents WHERE status IN {ANNOUNCED_ENDS} AND announced = 0 \
             AND finished_at < $1 ORDER BY finished_at LIMIT $2"
        )))
        .bind(ended_before.timestamp_millis())
        .bind(sql_limit(limit))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(record).collect()
    }

    async fn mark_subagent_announced(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE subagents SET announced = 1 WHERE id = $1").bind(id).execute(self.pool()).await?;
        Ok(())
    }

    async fn subagent(&self, id: &str) -> Result<Option<SubagentRecord>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(format!("SELECT {COLUMNS} FROM subagents WHERE id = $1")))
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(record).transpose()
    }

    async fn subagents_of(&self, parent_session: &str) -> Result<Vec<SubagentRecord>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM subagents WHERE parent_session = $1 ORDER BY created_at, id"
        )))
        .bind(parent_session)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(record).collect()
    }
}

fn record<'r, R>(row: &'r R) -> Result<SubagentRecord, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    f64: Decode<'r, R::Database> + Type<R::Database>,
    bool: Decode<'r, R::Database> + Type<R::Database>,
{
    let id: String = row.try_get("id")?;
    let status: String = row.try_get("status")?;
    let status = SubagentStatus::parse(&status)
        .ok_or_else(|| StoreError::Corrupt(format!("sub-agent {id} has an unknown status {status:?}")))?;
    let chat: String = row.try_get("chat")?;
    let chat = serde_json::from_str(&chat)
        .map_err(|e| StoreError::Corrupt(format!("chat of sub-agent {id} is unreadable: {e}")))?;
    let optional_time = |column: &'static str| -> Result<Option<DateTime<Utc>>, StoreError> {
        row.try_get::<Option<i64>, _>(column)?.map(from_millis).transpose()
    };
    Ok(SubagentRecord {
        parent_session: row.try_get("parent_session")?,
        parent_agent: row.try_get("parent_agent")?,
        chat,
        session: row.try_get("session")?,
        label: row.try_get("label")?,
        on_behalf_of: row.try_get("on_behalf_of")?,
        task: row.try_get("task")?,
        status,
        result: row.try_get("result")?,
        error: row.try_get("error")?,
        worker: row.try_get("worker")?,
        lease_until: from_millis(row.try_get("lease_until")?)?,
        cancel_requested: row.try_get::<i64, _>("cancel_requested")? != 0,
        created_at: from_millis(row.try_get("created_at")?)?,
        started_at: optional_time("started_at")?,
        finished_at: optional_time("finished_at")?,
        announced: row.try_get::<i64, _>("announced")? != 0,
        usage: Usage {
            input_tokens: to_u64(row.try_get("input_tokens")?, "subagents.input_tokens")?,
            output_tokens: to_u64(row.try_get("output_tokens")?, "subagents.output_tokens")?,
            estimated: row.try_get("usage_estimated")?,
            ..Usage::default()
        },
        cost_usd: row.try_get("cost_usd")?,
        id,
    })
}
