//! [`CronStore`] for both stores (`migrations/sqlite/0008_cron.sql`).
//!
//! Claims are a compare-and-set on `next_run_at` (or `run_requested_at`) plus the history
//! insert in one write transaction: the `UPDATE … WHERE next_run_at = expected` changes one
//! row for the first scheduler and none for any other, on any host.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Row, Transaction,
    Type,
};

use super::{Backend, RowsAffected};
use crate::store::StoreError;
use crate::store::cron::{
    AddLimits, AddOutcome, CronClaim, CronJob, CronRun, CronRunStatus, CronStore, MissedPolicy, NewCronJob, NewCronRun,
    Payload, generate_job_id,
};
use crate::store::values::{from_millis, sql_limit};

/// The columns [`job_from_row`] reads.
const JOB_COLUMNS: &str = "id, name, agent, owner_session, chat, payload, message, schedule, tz, missed, enabled, \
     next_run_at, last_run_at, last_status, last_error, created_by_id, created_by_name, created_at, generation, \
     parent_job, created_by_run, run_requested_at, on_behalf_of";

/// The columns [`run_from_row`] reads.
const RUN_COLUMNS: &str = "job_id, scheduled_for, inbound_id, claimed_at, fired_at, status, note, error";

/// Fresh ids tried when one is taken; with 2^32 ids and a few jobs one retry is unlikely.
const ID_ATTEMPTS: usize = 5;

#[async_trait]
impl<B> CronStore for B
where
    B: Backend,
    B::Db: CronRows,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    for<'c> &'c mut <B::Db as Database>::Connection: Executor<'c, Database = B::Db>,
    <B::Db as Database>::QueryResult: RowsAffected,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> Option<&'q str>: Encode<'q, B::Db>,
    for<'a> String: Encode<'a, B::Db> + Decode<'a, B::Db> + Type<B::Db>,
    for<'a> i64: Encode<'a, B::Db> + Decode<'a, B::Db> + Type<B::Db>,
    for<'q> Option<i64>: Encode<'q, B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> (i64,): FromRow<'r, <B::Db as Database>::Row>,
{
    async fn add_cron_job(&self, job: &NewCronJob, limits: AddLimits) -> Result<AddOutcome, StoreError> {
        let mut tx = self.begin_write().await?;
        let active: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM cron_jobs WHERE owner_session = $1 AND next_run_at IS NOT NULL")
                .bind(&job.owner_session)
                .fetch_one(&mut *tx)
                .await?;
        let active = count(active)?;
        if active >= limits.max_per_session {
            return Ok(AddOutcome::SessionFull(active));
        }
        if let (Some(max), Some(run)) = (limits.max_per_run, &job.created_by_run) {
            let made: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM cron_jobs WHERE created_by_run = $1")
                .bind(run)
                .fetch_one(&mut *tx)
                .await?;
            let made = count(made)?;
            if made >= max {
                return Ok(AddOutcome::RunFull(made));
            }
        }
        let id = B::Db::insert_job(&mut tx, job).await?;
        tx.commit().await?;
        let stored = CronJob {
            id,
            enabled: true,
            last_run_at: None,
            last_status: None,
            last_error: None,
            run_requested_at: None,
            job: job.clone(),
        };
        Ok(AddOutcome::Added(Box::new(stored)))
    }

    async fn cron_job(&self, id: &str) -> Result<Option<CronJob>, StoreError> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM cron_jobs WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql)).bind(id).fetch_optional(self.pool()).await?;
        row.as_ref().map(job_from_row).transpose()
    }

    async fn cron_jobs(&self, owner_session: Option<&str>) -> Result<Vec<CronJob>, StoreError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM cron_jobs WHERE $1 IS NULL OR owner_session = $1 ORDER BY created_at, id"
        );
        let rows = sqlx::query(AssertSqlSafe(sql)).bind(owner_session).fetch_all(self.pool()).await?;
        rows.iter().map(job_from_row).collect()
    }

    async fn remove_cron_job(&self, id: &str, owner_session: Option<&str>) -> Result<bool, StoreError> {
        let removed = sqlx::query("DELETE FROM cron_jobs WHERE id = $1 AND ($2 IS NULL OR owner_session = $2)")
            .bind(id)
            .bind(owner_session)
            .execute(self.pool())
            .await?
            .rows_affected();
        Ok(removed == 1)
    }

    async fn set_cron_enabled(
        &self,
        id: &str,
        owner_session: Option<&str>,
        enabled: bool,
        next_run_at: Option<DateTime<Utc>>,
    ) -> Result<bool, StoreError> {
        let sql = if enabled {
            "UPDATE cron_jobs SET enabled = 1, next_run_at = $3 WHERE id = $1 AND ($2 IS NULL OR owner_session = $2)"
        } else {
            "UPDATE cron_jobs SET enabled = 0 WHERE id = $1 AND ($2 IS NULL OR owner_session = $2)"
        };
        let query = sqlx::query(sql).bind(id).bind(owner_session);
        let query = if enabled { query.bind(next_run_at.map(|t| t.timestamp_millis())) } else { query };
        Ok(query.execute(self.pool()).await?.rows_affected() == 1)
    }

    async fn due_cron_jobs(&self, now: DateTime<Utc>) -> Result<Vec<CronJob>, StoreError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM cron_jobs WHERE enabled = 1 AND next_run_at IS NOT NULL \
             AND next_run_at <= $1 ORDER BY next_run_at, id"
        );
        let rows = sqlx::query(AssertSqlSafe(sql)).bind(now.timestamp_millis()).fetch_all(self.pool()).await?;
        rows.iter().map(job_from_row).collect()
    }

    async fn requested_cron_jobs(&self) -> Result<Vec<CronJob>, StoreError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM cron_jobs WHERE run_requested_at IS NOT NULL ORDER BY run_requested_at, id"
        );
        let rows = sqlx::query(AssertSqlSafe(sql)).fetch_all(self.pool()).await?;
        rows.iter().map(job_from_row).collect()
    }

    async fn request_cron_run(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let updated = sqlx::query("UPDATE cron_jobs SET run_requested_at = $2 WHERE id = $1")
            .bind(id)
            .bind(at.timestamp_millis())
            .execute(self.pool())
            .await?
            .rows_affected();
        Ok(updated == 1)
    }

    async fn claim_cron_run(
        &self,
        job_id: &str,
        expected: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        run: &NewCronRun,
        history_limit: usize,
    ) -> Result<CronClaim, StoreError> {
        let mut tx = self.begin_write().await?;
        let last_status = match run.status {
            CronRunStatus::Missed => "missed",
            _ => "running",
        };
        let updated = sqlx::query(
            "UPDATE cron_jobs SET next_run_at = $3, last_run_at = $4, last_status = $5, last_error = NULL \
             WHERE id = $1 AND enabled = 1 AND next_run_at = $2",
        )
        .bind(job_id)
        .bind(expected.timestamp_millis())
        .bind(next.map(|t| t.timestamp_millis()))
        .bind(run.at.timestamp_millis())
        .bind(last_status)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        claimed_if(tx, updated == 1, job_id, run, history_limit).await
    }

    async fn claim_cron_request(
        &self,
        job_id: &str,
        requested: DateTime<Utc>,
        run: &NewCronRun,
        history_limit: usize,
    ) -> Result<CronClaim, StoreError> {
        let mut tx = self.begin_write().await?;
        let updated = sqlx::query(
            "UPDATE cron_jobs SET run_requested_at = NULL, last_run_at = $3, last_status = 'running', \
             last_error = NULL WHERE id = $1 AND run_requested_at = $2",
        )
        .bind(job_id)
        .bind(requested.timestamp_millis())
        .bind(run.at.timestamp_millis())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        claimed_if(tx, updated == 1, job_id, run, history_limit).await
    }

    async fn pending_cron_runs(&self) -> Result<Vec<CronRun>, StoreError> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM cron_runs WHERE status = 'pending' ORDER BY seq");
        let rows = sqlx::query(AssertSqlSafe(sql)).fetch_all(self.pool()).await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn mark_cron_fired(&self, inbound_id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE cron_runs SET status = 'fired', fired_at = $2 WHERE inbound_id = $1 AND status = 'pending'",
        )
        .bind(inbound_id)
        .bind(at.timestamp_millis())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn finish_cron_run(
        &self,
        job_id: &str,
        inbound_id: &str,
        failed: bool,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        let status = if failed { CronRunStatus::Failed } else { CronRunStatus::Completed };
        let mut tx = self.begin_write().await?;
        // A run can finish before its scheduler marked the row fired: it is published either way.
        sqlx::query("UPDATE cron_runs SET status = $2, error = $3 WHERE inbound_id = $1")
            .bind(inbound_id)
            .bind(status.as_str())
            .bind(error)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE cron_jobs SET last_status = $2, last_error = $3 WHERE id = $1")
            .bind(job_id)
            .bind(status.as_str())
            .bind(error)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn cron_history(&self, job_id: &str, limit: usize) -> Result<Vec<CronRun>, StoreError> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM cron_runs WHERE job_id = $1 ORDER BY seq DESC LIMIT $2");
        let rows = sqlx::query(AssertSqlSafe(sql)).bind(job_id).bind(sql_limit(limit)).fetch_all(self.pool()).await?;
        rows.iter().map(run_from_row).collect()
    }
}

/// Ends a claim: when the compare-and-set took (`won`), records the occurrence in the history
/// and commits; otherwise another scheduler was first and the transaction is dropped.
///
/// An occurrence whose message id is already in the history was claimed before: the job still
/// moves on (the commit), but nothing new is recorded or published. Jobs that earlier versions
/// left pointing at an occurrence they had already fired get unstuck this way.
async fn claimed_if<DB: CronRows>(
    mut tx: Transaction<'_, DB>,
    won: bool,
    job_id: &str,
    run: &NewCronRun,
    history_limit: usize,
) -> Result<CronClaim, StoreError> {
    if !won {
        return Ok(CronClaim::AlreadyClaimed);
    }
    let recorded = DB::insert_run(&mut tx, job_id, run, history_limit).await?;
    tx.commit().await?;
    if !recorded {
        tracing::warn!(job = job_id, inbound = ?run.inbound_id, "occurrence was claimed before; moving the job on");
        return Ok(CronClaim::AlreadyClaimed);
    }
    Ok(CronClaim::Claimed)
}

/// The statements a claim or an added job runs inside its write transaction, written once for
/// every database whose sqlx types they need (both stores').
trait CronRows: Database {
    /// Inserts the job under a fresh id, drawing another when the id is taken.
    fn insert_job(
        conn: &mut Self::Connection,
        job: &NewCronJob,
    ) -> impl Future<Output = Result<String, StoreError>> + Send;

    /// Adds a history row and drops the job's oldest rows beyond `history_limit`. False when a row
    /// with the run's message id is already there (nothing is added then).
    fn insert_run(
        conn: &mut Self::Connection,
        job_id: &str,
        run: &NewCronRun,
        history_limit: usize,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

impl<DB> CronRows for DB
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::QueryResult: RowsAffected,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
{
    async fn insert_job(conn: &mut DB::Connection, job: &NewCronJob) -> Result<String, StoreError> {
        let chat = serde_json::to_string(&job.chat).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let schedule = serde_json::to_string(&job.schedule).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        for _ in 0..ID_ATTEMPTS {
            let id = generate_job_id()?;
            let inserted = sqlx::query(
                "INSERT INTO cron_jobs (id, name, agent, owner_session, chat, payload, message, schedule, tz, \
                 missed, next_run_at, created_by_id, created_by_name, created_at, generation, parent_job, created_by_run, \
                 on_behalf_of) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18) \
                 ON CONFLICT (id) DO NOTHING",
            )
            .bind(&id)
            .bind(&job.name)
            .bind(&job.agent)
            .bind(&job.owner_session)
            .bind(&chat)
            .bind(job.payload.as_str())
            .bind(&job.message)
            .bind(&schedule)
            .bind(&job.tz)
            .bind(job.missed.as_str())
            .bind(job.next_run_at.map(|t| t.timestamp_millis()))
            .bind(&job.created_by_id)
            .bind(&job.created_by_name)
            .bind(job.created_at.timestamp_millis())
            .bind(i64::from(job.generation))
            .bind(&job.parent_job)
            .bind(&job.created_by_run)
            .bind(&job.on_behalf_of)
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if inserted == 1 {
                return Ok(id);
            }
        }
        Err(crate::store::pairing::RandomSourceError(format!("{ID_ATTEMPTS} fresh cron job ids in a row were taken"))
            .into())
    }

    async fn insert_run(
        conn: &mut DB::Connection,
        job_id: &str,
        run: &NewCronRun,
        history_limit: usize,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO cron_runs (job_id, scheduled_for, inbound_id, claimed_at, status, note) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (inbound_id) DO NOTHING",
        )
        .bind(job_id)
        .bind(run.scheduled_for.timestamp_millis())
        .bind(&run.inbound_id)
        .bind(run.at.timestamp_millis())
        .bind(run.status.as_str())
        .bind(&run.note)
        .execute(&mut *conn)
        .await?
        .rows_affected();
        if inserted == 0 {
            return Ok(false);
        }
        // Pending rows are never pruned: they still have to be published.
        sqlx::query(
            "DELETE FROM cron_runs WHERE job_id = $1 AND status <> 'pending' AND seq NOT IN \
             (SELECT seq FROM cron_runs WHERE job_id = $1 ORDER BY seq DESC LIMIT $2)",
        )
        .bind(job_id)
        .bind(sql_limit(history_limit.max(1)))
        .execute(&mut *conn)
        .await?;
        Ok(true)
    }
}

fn job_from_row<'r, R>(row: &'r R) -> Result<CronJob, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let corrupt = |what: &str, value: &str| StoreError::Corrupt(format!("cron job {what} {value:?}"));
    let chat: String = row.try_get("chat")?;
    let schedule: String = row.try_get("schedule")?;
    let payload: String = row.try_get("payload")?;
    let missed: String = row.try_get("missed")?;
    let generation: i64 = row.try_get("generation")?;
    let job = NewCronJob {
        name: row.try_get("name")?,
        agent: row.try_get("agent")?,
        owner_session: row.try_get("owner_session")?,
        chat: serde_json::from_str(&chat).map_err(|_| corrupt("chat", &chat))?,
        payload: Payload::parse(&payload).ok_or_else(|| corrupt("payload", &payload))?,
        message: row.try_get("message")?,
        schedule: serde_json::from_str(&schedule).map_err(|_| corrupt("schedule", &schedule))?,
        tz: row.try_get("tz")?,
        missed: MissedPolicy::parse(&missed).ok_or_else(|| corrupt("missed policy", &missed))?,
        next_run_at: optional_time(row, "next_run_at")?,
        created_by_id: row.try_get("created_by_id")?,
        created_by_name: row.try_get("created_by_name")?,
        created_at: from_millis(row.try_get("created_at")?)?,
        generation: u32::try_from(generation).map_err(|_| corrupt("generation", &generation.to_string()))?,
        parent_job: row.try_get("parent_job")?,
        created_by_run: row.try_get("created_by_run")?,
        on_behalf_of: row.try_get("on_behalf_of")?,
    };
    let enabled: i64 = row.try_get("enabled")?;
    Ok(CronJob {
        id: row.try_get("id")?,
        enabled: enabled != 0,
        last_run_at: optional_time(row, "last_run_at")?,
        last_status: row.try_get("last_status")?,
        last_error: row.try_get("last_error")?,
        run_requested_at: optional_time(row, "run_requested_at")?,
        job,
    })
}

fn run_from_row<'r, R>(row: &'r R) -> Result<CronRun, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let status: String = row.try_get("status")?;
    Ok(CronRun {
        job_id: row.try_get("job_id")?,
        scheduled_for: from_millis(row.try_get("scheduled_for")?)?,
        inbound_id: row.try_get("inbound_id")?,
        claimed_at: from_millis(row.try_get("claimed_at")?)?,
        fired_at: optional_time(row, "fired_at")?,
        status: CronRunStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("cron run status {status:?}")))?,
        note: row.try_get("note")?,
        error: row.try_get("error")?,
    })
}

fn optional_time<'r, R>(row: &'r R, column: &'static str) -> Result<Option<DateTime<Utc>>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    row.try_get::<Option<i64>, _>(column)?.map(from_millis).transpose()
}

fn count(value: i64) -> Result<usize, StoreError> {
    usize::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative count {value}")))
}
