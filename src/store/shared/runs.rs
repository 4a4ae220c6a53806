//! [`RunStore`] for both stores: claims, finishes and the runs' records.
//!
//! The two writes of every turn are the backends' own ([`RunWrites`]): `insert_claim` (one
//! `INSERT … ON CONFLICT (inbound_id) DO NOTHING`, grouped with others under load on SQLite)
//! and `write_finish` (the rule of `finish_rule`, as the SQLite trigger or the PostgreSQL
//! `finish_runs` function, one round trip each). Everything else is the same SQL on both:
//! conditional updates that decide races by the row they change, and upserts that create a
//! session row on first use.

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};
use uuid::Uuid;

use super::users::UserRows;
use super::{RowsAffected, RunWrites};
use crate::store::finishing::{self, Finished};
use crate::store::values::{now_millis, run_record, sql_limit, to_i64, to_u32};
use crate::store::{BusWrites, RunClaim, RunKind, RunOutcome, RunRecord, RunStatus, RunStore, SideRun, StoreError};

/// The columns [`RunRecord`] is read from.
pub(super) const RUN_COLUMNS: &str = "run_id, inbound_id, session_key, kind, status, attempt, model, input_tokens, \
     output_tokens, cache_read_tokens, cache_write_tokens, usage_estimated, cost_usd, iterations, error, \
     reply_delivered, started_at, finished_at";

/// The kinds of runs that call the model, as an SQL list: `'turn', 'memory_flush', …`.
pub(super) fn model_kinds() -> String {
    kinds_where(RunKind::calls_the_model)
}

/// The kinds of runs listed for operators (see [`RunKind::listed`]), as an SQL list.
pub(super) fn listed_kinds() -> String {
    kinds_where(RunKind::listed)
}

fn kinds_where(keep: fn(RunKind) -> bool) -> String {
    let kinds = RunKind::ALL.into_iter().filter(|kind| keep(*kind));
    kinds.map(|kind| format!("'{}'", kind.as_str())).collect::<Vec<_>>().join(", ")
}

#[async_trait]
impl<B> RunStore for B
where
    B: RunWrites,
    B::Db: UserRows,
    for<'c> &'c mut <B::Db as Database>::Connection: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> bool: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> Option<&'q str>: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> Option<f64>: Encode<'q, B::Db> + Type<B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> i64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> f64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> bool: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
{
    async fn claim_run_as(&self, inbound_id: &str, session_key: &str, kind: RunKind) -> Result<RunClaim, StoreError> {
        let run_id = Uuid::now_v7().to_string();
        if self.insert_claim(&run_id, inbound_id, session_key, kind).await? {
            return Ok(RunClaim::New { run_id });
        }
        // Its worker died (or the bus gave up on it): this claimant takes it over. One
        // statement, so two claimants of one unfinished run each get their own attempt.
        let resumed: Option<(String, i64)> = sqlx::query_as(
            "UPDATE runs SET attempt = attempt + 1 WHERE inbound_id = $1 AND status = 'running' \
             RETURNING run_id, attempt",
        )
        .bind(inbound_id)
        .fetch_optional(self.write_pool())
        .await?;
        if let Some((run_id, attempt)) = resumed {
            return Ok(RunClaim::Resumed { attempt: to_u32(attempt, "attempt")?, run_id });
        }
        // Not running, so finished: a finished run never runs again.
        let finished: Option<(String, Option<String>, bool)> =
            sqlx::query_as("SELECT run_id, reply_json, reply_delivered FROM runs WHERE inbound_id = $1")
                .bind(inbound_id)
                .fetch_optional(self.write_pool())
                .await?;
        let Some((run_id, reply_json, delivered)) = finished else {
            return Err(StoreError::Corrupt(format!("inbound id {inbound_id} conflicts but has no run")));
        };
        let reply = reply_json.as_deref().and_then(|json| super::lenient::reply(&run_id, json));
        Ok(RunClaim::Finished { run_id, reply, delivered })
    }

    async fn run_settled(&self, inbound_id: &str) -> Result<bool, StoreError> {
        let settled: Option<bool> = sqlx::query_scalar(
            "SELECT status <> 'running' AND (reply_json IS NULL OR reply_delivered) FROM runs WHERE inbound_id = $1",
        )
        .bind(inbound_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(settled == Some(true))
    }

    async fn finish_run(&self, run_id: &str, outcome: &RunOutcome) -> Result<(), StoreError> {
        self.finish_run_journaled(run_id, outcome, &BusWrites::default()).await.map(|_| ())
    }

    async fn finish_run_journaled(
        &self,
        run_id: &str,
        outcome: &RunOutcome,
        bus: &BusWrites<'_>,
    ) -> Result<Option<i64>, StoreError> {
        let refuse = |reason: &str| StoreError::Finish { run_id: run_id.to_owned(), reason: reason.to_owned() };
        if outcome.status == RunStatus::Running {
            return Err(refuse("the outcome's status is still running"));
        }
        let row = finishing::row(run_id, outcome, bus, now_millis())?;
        match self.write_finish(row).await? {
            Finished::Done { session_key, history_version, reply_row } => {
                self.history_cache().append(&session_key, history_version, outcome.transcript.clone());
                Ok(reply_row)
            }
            Finished::NoSuchRun => Err(StoreError::NoSuchRun(run_id.to_owned())),
            Finished::NotRunning => Err(refuse("it has already finished")),
        }
    }

    async fn record_side_run(&self, run: &SideRun) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        let now = now_millis();
        // A side run follows a turn of its session, so the row is there; but never fail for it.
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at) VALUES ($1, $2, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(run.session_key.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let inserted = sqlx::query(
            "INSERT INTO runs (run_id, inbound_id, session_key, kind, status, model, input_tokens, \
             output_tokens, cache_read_tokens, cache_write_tokens, usage_estimated, cost_usd, iterations, \
             error, started_at, finished_at, billed_channel, billed_sender) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18) \
             ON CONFLICT (inbound_id) DO NOTHING",
        )
        .bind(Uuid::now_v7().to_string().as_str())
        .bind(run.inbound_id.as_str())
        .bind(run.session_key.as_str())
        .bind(run.kind.as_str())
        .bind(run.status.as_str())
        .bind(run.model.as_str())
        .bind(to_i64(run.usage.input_tokens))
        .bind(to_i64(run.usage.output_tokens))
        .bind(to_i64(run.usage.cache_read_tokens))
        .bind(to_i64(run.usage.cache_write_tokens))
        .bind(run.usage.estimated)
        .bind(run.cost_usd)
        .bind(i64::from(run.iterations))
        .bind(run.error.as_deref())
        .bind(run.started_at.timestamp_millis())
        .bind(now)
        .bind(run.billing.as_ref().map(|billing| billing.identity.channel.as_str()))
        .bind(run.billing.as_ref().map(|billing| billing.identity.sender_id.as_str()))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 1
            && let Some(billing) = &run.billing
        {
            <B::Db as UserRows>::record_usage(&mut tx, billing, run.usage, run.cost_usd).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn mark_reply_delivered(&self, run_id: &str) -> Result<(), StoreError> {
        match self.mark_delivered(run_id).await? {
            true => Ok(()),
            false => Err(StoreError::NoSuchRun(run_id.to_owned())),
        }
    }

    async fn recent_runs(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        // Run ids are UUID v7, time-ordered, so they break ties between runs started in
        // the same millisecond.
        // Model runs and expired messages only: commands and messages settled without
        // a turn have rows too (so that a redelivery is not run again), but nothing ran.
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE kind IN ({}) ORDER BY started_at DESC, run_id DESC LIMIT $1",
            listed_kinds()
        );
        let rows = sqlx::query(AssertSqlSafe(sql)).bind(sql_limit(limit)).fetch_all(self.pool()).await?;
        rows.iter().map(run_record).collect()
    }
}
