//! [`Store`] for both stores: runs, sessions, the transcript and compaction.
//!
//! The two writes of every turn are the backends' own ([`RunWrites`]): `insert_claim` (one
//! `INSERT … ON CONFLICT (inbound_id) DO NOTHING`, grouped with others under load on SQLite)
//! and `write_finish` (the rule of `finish_rule`, as the SQLite trigger or the PostgreSQL
//! `finish_runs` function, one round trip each). Everything else is the same SQL on both:
//! conditional updates that decide races by the row they change, and upserts that create a
//! session row on first use.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};
use uuid::Uuid;

use super::users::UserRows;
use super::{Backend, RowsAffected, RunWrites, lenient};
use crate::config::QueueMode;
use crate::provider::ChatMessage;
use crate::store::approvals::ApprovalStore;
use crate::store::cron::CronStore;
use crate::store::finishing::{self, Finished};
use crate::store::heartbeat::HeartbeatStore;
use crate::store::subagents::SubagentStore;
use crate::store::users::UserStore;
use crate::store::values::{now_millis, run_record, sql_limit, to_i64, to_u32, to_u64};
use crate::store::windows::WindowStore;
use crate::store::{
    BusWrites, Conversation, HistorySummary, LastTurn, RunClaim, RunKind, RunOutcome, RunRecord, RunStatus,
    SessionInfo, SessionPrefs, SideRun, Store, StoreError,
};

/// The columns [`RunRecord`] is read from.
pub(super) const RUN_COLUMNS: &str = "run_id, inbound_id, session_key, kind, status, attempt, model, input_tokens, \
     output_tokens, cache_read_tokens, cache_write_tokens, usage_estimated, cost_usd, iterations, error, \
     reply_delivered, started_at, finished_at";

/// Longer than any compaction takes (a flush turn with its timeout plus one summary call): a
/// mark older than this belongs to a process that died mid-compaction and is taken over, so a
/// crash never blocks a session's compaction for good.
const COMPACTION_STALE_AFTER_MS: i64 = 15 * 60 * 1000;

/// One run of a session as [`Store::session_info`] reads it.
fn session_run<'r, R>(row: &'r R) -> Result<LastTurn, StoreError>
where
    R: sqlx::Row,
    &'static str: sqlx::ColumnIndex<R>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    f64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let count = |column: &'static str| -> Result<u64, StoreError> { to_u64(row.try_get(column)?, column) };
    let usage = switchboard_channels::contract::Usage {
        input_tokens: count("input_tokens")?,
        output_tokens: count("output_tokens")?,
        cache_read_tokens: count("cache_read_tokens")?,
        cache_write_tokens: count("cache_write_tokens")?,
        estimated: row.try_get("usage_estimated")?,
    };
    Ok(LastTurn { usage, cost_usd: row.try_get("cost_usd")?, context_tokens: count("context_tokens")? })
}

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

/// The session's history version (changed by every change to what its history shows)
/// and its summary; `None` when the session has no row yet. What does not decode is
/// left out (see `lenient`).
async fn session_head<B>(store: &B, key: &str) -> Result<Option<lenient::Head>, StoreError>
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> i64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
{
    let row = sqlx::query("SELECT history_version, summary, compaction_count FROM sessions WHERE key = $1")
        .bind(key)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(|row| lenient::head(key, row)).transpose()
}

/// The newest `limit` messages of the session's history that decode, oldest first, and
/// whether every row read decoded.
async fn read_history<B>(
    store: &B,
    session_key: &str,
    limit: usize,
) -> Result<(Vec<(i64, ChatMessage)>, bool), StoreError>
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> i64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
{
    // Rows a compaction covered are summarised on the session, rows up to
    // `archived_through` belong to conversations ended by `/new`; COALESCE: no session
    // row yet means neither.
    let rows = sqlx::query(
        "SELECT id, message_json FROM transcript WHERE session_key = $1 AND id > COALESCE(( \
         SELECT CASE WHEN compacted_through > archived_through THEN compacted_through \
         ELSE archived_through END FROM sessions WHERE key = $1), 0) \
         ORDER BY id DESC LIMIT $2",
    )
    .bind(session_key)
    .bind(sql_limit(limit))
    .fetch_all(store.pool())
    .await?;
    let (messages, skipped) = lenient::transcript(session_key, &rows)?;
    Ok((messages, skipped == 0))
}

#[async_trait]
impl<B> Store for B
where
    B: RunWrites + UserStore + CronStore + HeartbeatStore + SubagentStore + ApprovalStore + WindowStore,
    B::Db: UserRows,
    for<'c> &'c mut <B::Db as Database>::Connection: Executor<'c, Database = B::Db>,
    for<'q> <B::Db as Database>::Arguments<'q>: IntoArguments<'q, B::Db>,
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

    async fn history(&self, session_key: &str, limit: usize) -> Result<Vec<ChatMessage>, StoreError> {
        Ok(self.history_rows(session_key, limit).await?.into_iter().map(|(_, message)| message).collect())
    }

    async fn history_rows(&self, session_key: &str, limit: usize) -> Result<Vec<(i64, ChatMessage)>, StoreError> {
        Ok(read_history(self, session_key, limit).await?.0)
    }

    async fn session_summary(&self, session_key: &str) -> Result<Option<HistorySummary>, StoreError> {
        Ok(session_head(self, session_key).await?.and_then(|head| head.summary))
    }

    async fn conversation(&self, session_key: &str, limit: usize) -> Result<Conversation, StoreError> {
        let Some(lenient::Head { version, summary }) = session_head(self, session_key).await? else {
            return Ok(Conversation::default());
        };
        if let Some(history) = version.and_then(|version| self.history_cache().get(session_key, version, limit)) {
            return Ok(Conversation { history, summary });
        }
        let (rows, whole) = read_history(self, session_key, limit).await?;
        let history: Vec<ChatMessage> = rows.into_iter().map(|(_, message)| message).collect();
        // Kept under the version read before the rows: should the history have changed in
        // between, the next turn reads a newer version and does not use this copy. A
        // history with rows left out is not kept: the copy counts rows to know what it
        // holds.
        if let (Some(version), true) = (version, whole) {
            self.history_cache().put(session_key, version, limit, history.clone());
        }
        Ok(Conversation { history, summary })
    }

    async fn begin_compaction(&self, session_key: &str) -> Result<bool, StoreError> {
        let now = now_millis();
        let updated = sqlx::query(
            "UPDATE sessions SET compacting_since = $1 \
             WHERE key = $2 AND (compacting_since IS NULL OR compacting_since < $3)",
        )
        .bind(now)
        .bind(session_key)
        .bind(now - COMPACTION_STALE_AFTER_MS)
        .execute(self.write_pool())
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    async fn finish_compaction(&self, session_key: &str, summary: &str, through_id: i64) -> Result<(), StoreError> {
        self.history_cache().forget(session_key);
        // A compaction never un-hides rows an earlier one covered.
        let updated = sqlx::query(
            "UPDATE sessions SET summary = $1, compacted_through = CASE WHEN compacted_through > $2 \
             THEN compacted_through ELSE $2 END, compaction_count = compaction_count + 1, \
             compacting_since = NULL, updated_at = $3, history_version = history_version + 1 \
             WHERE key = $4",
        )
        .bind(summary)
        .bind(through_id)
        .bind(now_millis())
        .bind(session_key)
        .execute(self.write_pool())
        .await?
        .rows_affected();
        if updated == 0 {
            return Err(StoreError::NoSuchSession(session_key.to_owned()));
        }
        Ok(())
    }

    async fn abort_compaction(&self, session_key: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE sessions SET compacting_since = NULL WHERE key = $1")
            .bind(session_key)
            .execute(self.write_pool())
            .await?;
        Ok(())
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
        let updated = sqlx::query("UPDATE runs SET reply_delivered = $1 WHERE run_id = $2")
            .bind(true)
            .bind(run_id)
            .execute(self.write_pool())
            .await?
            .rows_affected();
        if updated == 0 {
            return Err(StoreError::NoSuchRun(run_id.to_owned()));
        }
        Ok(())
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
        let rows = sqlx::query(sql.as_str()).bind(sql_limit(limit)).fetch_all(self.pool()).await?;
        rows.iter().map(run_record).collect()
    }

    async fn archive_session(&self, session_key: &str) -> Result<(), StoreError> {
        self.history_cache().forget(session_key);
        // The summary belongs to the old conversation too: a new one starts without it.
        sqlx::query(
            "INSERT INTO sessions AS s (key, created_at, updated_at) VALUES ($2, $1, $1) \
             ON CONFLICT (key) DO UPDATE SET updated_at = $1, summary = NULL, \
             history_version = s.history_version + 1, \
             archived_through = COALESCE((SELECT MAX(id) FROM transcript WHERE session_key = $2), 0)",
        )
        .bind(now_millis())
        .bind(session_key)
        .execute(self.write_pool())
        .await?;
        Ok(())
    }

    async fn session_info(&self, session_key: &str) -> Result<SessionInfo, StoreError> {
        let Some(row) =
            sqlx::query("SELECT queue_mode, archived_through, compaction_count FROM sessions WHERE key = $1")
                .bind(session_key)
                .fetch_optional(self.pool())
                .await?
        else {
            return Ok(SessionInfo::default());
        };
        let archived_through: i64 = row.try_get("archived_through")?;
        let queue_mode = lenient::queue_mode(session_key, &row)?;
        let compactions = lenient::column::<_, i64>(&row, "compaction_count")?
            .and_then(|count| u64::try_from(count).map_err(|_| format!("{count} is out of range")));
        let compactions = lenient::setting(session_key, "compaction_count", compactions);
        // Runs since `/new`: from the first that wrote a transcript row after the archive
        // point on (compactions' side runs write none, and are counted too).
        let since: Option<i64> = sqlx::query_scalar(
            "SELECT MIN(r.started_at) FROM runs r JOIN transcript t ON t.run_id = r.run_id \
             WHERE t.session_key = $1 AND t.id > $2",
        )
        .bind(session_key)
        .bind(archived_through)
        .fetch_one(self.pool())
        .await?;
        let Some(since) = since else {
            return Ok(SessionInfo { queue_mode, compactions, ..SessionInfo::default() });
        };
        let rows = sqlx::query(
            "SELECT kind, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, usage_estimated, \
             cost_usd, context_tokens FROM runs \
             WHERE session_key = $1 AND started_at >= $2 AND status <> 'running' ORDER BY started_at, run_id",
        )
        .bind(session_key)
        .bind(since)
        .fetch_all(self.pool())
        .await?;
        let mut info = SessionInfo { queue_mode, compactions, cost_usd: Some(0.0), ..SessionInfo::default() };
        for row in &rows {
            let turn = session_run(row)?;
            info.used.add(turn.usage);
            info.cost_usd = match (info.cost_usd, turn.cost_usd) {
                (Some(total), Some(cost)) => Some(total + cost),
                _ if turn.usage.total() == 0 => info.cost_usd,
                _ => None,
            };
            if row.try_get::<String, _>("kind")? == RunKind::Turn.as_str() {
                info.last_turn = Some(turn);
            }
        }
        Ok(info)
    }

    async fn session_prefs(&self, session_key: &str) -> Result<SessionPrefs, StoreError> {
        let row = sqlx::query("SELECT queue_mode, model, show_progress FROM sessions WHERE key = $1")
            .bind(session_key)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map_or_else(|| Ok(SessionPrefs::default()), |row| lenient::prefs(session_key, row))
    }

    async fn set_session_model(&self, session_key: &str, model: Option<&str>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at, model) VALUES ($1, $2, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET model = $3, updated_at = $2",
        )
        .bind(session_key)
        .bind(now_millis())
        .bind(model)
        .execute(self.write_pool())
        .await?;
        Ok(())
    }

    async fn set_verbose(&self, session_key: &str, verbose: bool) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at, show_progress) VALUES ($1, $2, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET show_progress = $3, updated_at = $2",
        )
        .bind(session_key)
        .bind(now_millis())
        .bind(verbose)
        .execute(self.write_pool())
        .await?;
        Ok(())
    }

    async fn set_queue_mode(&self, session_key: &str, mode: Option<QueueMode>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at, queue_mode) VALUES ($1, $2, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET queue_mode = $3, updated_at = $2",
        )
        .bind(session_key)
        .bind(now_millis())
        .bind(mode.map(QueueMode::as_str))
        .execute(self.write_pool())
        .await?;
        Ok(())
    }
}
