//! [`ApprovalStore`] for both stores. A decision is one conditional `UPDATE … WHERE status =
//! 'pending'`, so two approvers pressing at once (or an approver and the timeout) cannot both
//! win: the second finds it closed.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};

use super::{Backend, RowsAffected};
use crate::store::StoreError;
use crate::store::approvals::{
    Approval, ApprovalStatus, ApprovalStore, DecideProblem, NewApproval, Verdict, verdict_scope,
};
use crate::store::pairing::generate_code;
use crate::store::values::{duration_millis, from_millis, now_millis, sql_limit};

/// Fresh codes tried when one is taken.
const CODE_ATTEMPTS: usize = 5;

const COLUMNS: &str = "code, run_id, session_key, channel, chat_id, tool, arguments, requested_by, requested_at, \
                       expires_at, status, scope, decided_by, decided_at, reason";

type Row = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    i64,
    i64,
    String,
    String,
    String,
    Option<i64>,
    String,
);

fn approval(row: Row) -> Result<Approval, StoreError> {
    let (code, run_id, session_key, channel, chat_id, tool, arguments, requested_by, requested_at, expires_at, status) =
        (row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7, row.8, row.9, row.10);
    let (scope, decided_by, decided_at, reason) = (row.11, row.12, row.13, row.14);
    Ok(Approval {
        code,
        request: NewApproval { run_id, session_key, channel, chat_id, tool, arguments, requested_by },
        requested_at: from_millis(requested_at)?,
        expires_at: from_millis(expires_at)?,
        status: status.parse()?,
        scope,
        decided_by,
        decided_at: decided_at.map(from_millis).transpose()?,
        reason,
    })
}

#[async_trait]
impl<B> ApprovalStore for B
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::QueryResult: RowsAffected,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> String: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'r> Row: FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (bool,): FromRow<'r, <B::Db as Database>::Row>,
{
    async fn request_approval(&self, request: &NewApproval, timeout: Duration) -> Result<Approval, StoreError> {
        let now = now_millis();
        for _ in 0..CODE_ATTEMPTS {
            let code = generate_code().map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let inserted = sqlx::query(
                "INSERT INTO approvals (code, run_id, session_key, channel, chat_id, tool, arguments, \
                 requested_by, requested_at, expires_at, status) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending') ON CONFLICT (code) DO NOTHING",
            )
            .bind(&code)
            .bind(&request.run_id)
            .bind(&request.session_key)
            .bind(&request.channel)
            .bind(&request.chat_id)
            .bind(&request.tool)
            .bind(&request.arguments)
            .bind(&request.requested_by)
            .bind(now)
            .bind(now.saturating_add(duration_millis(timeout)))
            .execute(self.write_pool())
            .await?
            .rows_affected();
            if inserted == 1 {
                return self.approval(&code).await?.ok_or_else(|| StoreError::Corrupt(code));
            }
        }
        Err(StoreError::Corrupt("no free approval code after several tries".into()))
    }

    async fn approval(&self, code: &str) -> Result<Option<Approval>, StoreError> {
        let row: Option<Row> =
            sqlx::query_as(AssertSqlSafe(format!("SELECT {COLUMNS} FROM approvals WHERE code = $1")))
                .bind(code)
                .fetch_optional(self.pool())
                .await?;
        row.map(approval).transpose()
    }

    async fn decide_approval(
        &self,
        code: &str,
        verdict: Verdict,
        decided_by: &str,
    ) -> Result<Result<Approval, DecideProblem>, StoreError> {
        let now = now_millis();
        let decided = sqlx::query(
            "UPDATE approvals SET status = $2, scope = $3, decided_by = $4, decided_at = $5 \
             WHERE code = $1 AND status = 'pending' AND expires_at > $5",
        )
        .bind(code)
        .bind(verdict.status().as_str())
        .bind(verdict_scope(verdict))
        .bind(decided_by)
        .bind(now)
        .execute(self.write_pool())
        .await?
        .rows_affected();
        let Some(found) = self.approval(code).await? else { return Ok(Err(DecideProblem::Unknown)) };
        if decided == 0 {
            let status = match found.status {
                // Past its time but not yet closed by its waiting run.
                ApprovalStatus::Pending => ApprovalStatus::Expired,
                status => status,
            };
            return Ok(Err(DecideProblem::Closed(status)));
        }
        if verdict == Verdict::AllowChat {
            sqlx::query(
                "INSERT INTO approval_grants (session_key, tool, granted_by, granted_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (session_key, tool) DO NOTHING",
            )
            .bind(&found.request.session_key)
            .bind(&found.request.tool)
            .bind(decided_by)
            .bind(now)
            .execute(self.write_pool())
            .await?;
        }
        Ok(Ok(found))
    }

    async fn close_approval(&self, code: &str, status: ApprovalStatus, reason: &str) -> Result<bool, StoreError> {
        let closed = sqlx::query(
            "UPDATE approvals SET status = $2, reason = $3, decided_at = $4 \
             WHERE code = $1 AND status = 'pending'",
        )
        .bind(code)
        .bind(status.as_str())
        .bind(reason)
        .bind(now_millis())
        .execute(self.write_pool())
        .await?
        .rows_affected();
        Ok(closed == 1)
    }

    async fn chat_grant(&self, session_key: &str, tool: &str) -> Result<bool, StoreError> {
        // EXISTS is a boolean on both databases (a bare `SELECT 1` is an INT4 on PostgreSQL).
        let granted: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM approval_grants WHERE session_key = $1 AND tool = $2)")
                .bind(session_key)
                .bind(tool)
                .fetch_one(self.pool())
                .await?;
        Ok(granted)
    }

    async fn list_approvals(&self, pending_only: bool, limit: usize) -> Result<Vec<Approval>, StoreError> {
        let filter = if pending_only { "WHERE status = 'pending'" } else { "" };
        let rows: Vec<Row> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM approvals {filter} ORDER BY requested_at DESC, code LIMIT $1"
        )))
        .bind(sql_limit(limit))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(approval).collect()
    }

    async fn close_run_approvals(&self, run_id: &str, reason: &str) -> Result<Option<Approval>, StoreError> {
        let newest: Option<Row> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM approvals WHERE run_id = $1 AND status = 'pending' \
             ORDER BY requested_at DESC LIMIT 1"
        )))
        .bind(run_id)
        .fetch_optional(self.pool())
        .await?;
        sqlx::query(
            "UPDATE approvals SET status = 'expired', reason = $2, decided_at = $3 \
             WHERE run_id = $1 AND status = 'pending'",
        )
        .bind(run_id)
        .bind(reason)
        .bind(now_millis())
        .execute(self.write_pool())
        .await?;
        newest.map(approval).transpose()
    }
}
