//! A run's finish as one statement on the writer connection.
//!
//! Finishing writes the outcome, the transcript, the usage counters, the session's history
//! version, the reply's journal row and the removal of the answered message's row. As separate
//! statements inside `BEGIN … COMMIT` that is seven round trips to the connection's thread,
//! each two thread wake-ups, all while holding the one writer: it capped a whole process at
//! about 530 turns a second on two cores. Here the work is an `INSTEAD OF INSERT` trigger on a
//! view, so one INSERT does it atomically (a statement is its own transaction), and the
//! trigger leaves what the caller needs in a result table that the same call reads back.
//!
//! The view, trigger and result table are TEMP: private to the writer connection, so the
//! result row read back is this statement's even when several processes share the file. They
//! are created by the connection's first finish (`run` sees them missing), not when it opens:
//! compiling them brings SQLite's trigger and JSON code into memory, about 1 MiB resident,
//! which an idle daemon has no use for.

use std::collections::HashMap;

use sqlx::sqlite::SqliteArguments;
use sqlx::{Executor, Sqlite, SqlitePool};

use super::StoreError;
use super::grouped::GroupOutcome;
use crate::store::finishing::{FinishRow, Finished};
use crate::store::values::encode;

/// Creates the connection's finishing trigger.
pub(super) const INSTALL: &str = "
-- Set before the first TEMP object: kept in memory, never in a temporary file.
PRAGMA temp_store = MEMORY;
CREATE TEMP TABLE IF NOT EXISTS finish_result (
    run_id          TEXT PRIMARY KEY,
    session_key     TEXT,
    prior_status    TEXT,
    history_version INTEGER,
    -- 0 while the reply's row is still to be written, then its seq.
    reply_seq       INTEGER,
    usage_counted   INTEGER
);
CREATE TEMP VIEW IF NOT EXISTS run_finishes (
    run_id, status, model, input_tokens, output_tokens, iterations, error, reply_json,
    finished_at, cost_usd, usage_estimated, memory_scope, transcript,
    billing_channel, billing_sender, billing_month, billing_group,
    reply_flow, reply_channel, reply_subject, reply_dedupe_id, reply_payload, answered_seq,
    cache_read_tokens, cache_write_tokens, context_tokens
) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;
CREATE TEMP TRIGGER IF NOT EXISTS run_finishes_insert INSTEAD OF INSERT ON run_finishes
BEGIN
    INSERT INTO finish_result (run_id, session_key, prior_status)
        SELECT run_id, session_key, status FROM runs WHERE run_id = NEW.run_id;
    -- Only a running run is finished: another worker may have resumed this one and finished
    -- first, and then its reply is the one kept (appending this transcript would duplicate
    -- the turn). Every step checks (not RAISE(IGNORE), which would end the whole INSERT and
    -- with it the other runs of the group), and the result row says why nothing happened.
    UPDATE runs SET status = NEW.status, model = NEW.model, input_tokens = NEW.input_tokens,
        output_tokens = NEW.output_tokens, cache_read_tokens = NEW.cache_read_tokens,
        cache_write_tokens = NEW.cache_write_tokens, context_tokens = NEW.context_tokens,
        iterations = NEW.iterations, error = NEW.error,
        reply_json = NEW.reply_json, finished_at = NEW.finished_at, cost_usd = NEW.cost_usd,
        usage_estimated = NEW.usage_estimated,
        reply_delivered = reply_delivered OR NEW.reply_payload IS NOT NULL,
        billed_channel = NEW.billing_channel, billed_sender = NEW.billing_sender
        WHERE run_id = NEW.run_id AND status = 'running';
    -- The transcript comes as a JSON array of [role, message JSON] pairs, in order.
    INSERT INTO transcript (session_key, run_id, seq, role, message_json, created_at, memory_scope)
        SELECT result.session_key, NEW.run_id, rows.key, rows.value ->> 0,
            rows.value ->> 1, NEW.finished_at, NEW.memory_scope
        FROM finish_result AS result, json_each(NEW.transcript) AS rows
        WHERE result.run_id = NEW.run_id AND result.prior_status = 'running' ORDER BY rows.key;
    -- A run's cost, when known, is added to the month's; else its tokens count as unpriced.
    INSERT INTO usage_monthly (user_id, month, input_tokens, output_tokens, cache_read_tokens,
            cost_usd, unpriced_tokens)
        SELECT user_id, NEW.billing_month, NEW.input_tokens, NEW.output_tokens, NEW.cache_read_tokens,
            COALESCE(NEW.cost_usd, 0.0), CASE WHEN NEW.cost_usd IS NULL THEN NEW.input_tokens + NEW.output_tokens ELSE 0 END
        FROM identities
        WHERE NEW.billing_month IS NOT NULL AND channel = NEW.billing_channel
            AND sender_id = NEW.billing_sender
            AND EXISTS (SELECT 1 FROM finish_result WHERE run_id = NEW.run_id AND prior_status = 'running')
        ON CONFLICT (user_id, month) DO UPDATE SET
            input_tokens = input_tokens + excluded.input_tokens,
            output_tokens = output_tokens + excluded.output_tokens,
            cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
            cost_usd = cost_usd + excluded.cost_usd,
            unpriced_tokens = unpriced_tokens + excluded.unpriced_tokens;
    INSERT INTO group_usage_monthly (group_key, month, input_tokens, output_tokens, cache_read_tokens,
            cost_usd, unpriced_tokens)
        SELECT NEW.billing_group, NEW.billing_month, NEW.input_tokens, NEW.output_tokens, NEW.cache_read_tokens,
            COALESCE(NEW.cost_usd, 0.0), CASE WHEN NEW.cost_usd IS NULL THEN NEW.input_tokens + NEW.output_tokens ELSE 0 END
        WHERE NEW.billing_group IS NOT NULL
            AND EXISTS (SELECT 1 FROM finish_result WHERE run_id = NEW.run_id AND prior_status = 'running')
        ON CONFLICT (group_key, month) DO UPDATE SET
            input_tokens = input_tokens + excluded.input_tokens,
            output_tokens = output_tokens + excluded.output_tokens,
            cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
            cost_usd = cost_usd + excluded.cost_usd,
            unpriced_tokens = unpriced_tokens + excluded.unpriced_tokens;
    UPDATE sessions SET updated_at = NEW.finished_at, history_version = history_version + 1
        WHERE key = (SELECT session_key FROM finish_result WHERE run_id = NEW.run_id AND prior_status = 'running');
    -- A pending row with the reply's dedupe id means it is journaled already.
    UPDATE finish_result SET reply_seq = 0
        WHERE run_id = NEW.run_id AND prior_status = 'running' AND NEW.reply_payload IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM bus_journal WHERE dedupe_id = NEW.reply_dedupe_id);
    INSERT INTO bus_journal (flow, channel, subject, dedupe_id, payload, created_at)
        SELECT NEW.reply_flow, NEW.reply_channel, NEW.reply_subject, NEW.reply_dedupe_id,
            NEW.reply_payload, NEW.finished_at
        WHERE (SELECT reply_seq FROM finish_result WHERE run_id = NEW.run_id) = 0;
    UPDATE finish_result SET
        reply_seq = CASE WHEN reply_seq = 0 THEN last_insert_rowid() END,
        history_version = (SELECT history_version FROM sessions WHERE key = finish_result.session_key),
        usage_counted = NEW.billing_month IS NULL OR EXISTS (SELECT 1 FROM identities
            WHERE channel = NEW.billing_channel AND sender_id = NEW.billing_sender)
        WHERE run_id = NEW.run_id AND prior_status = 'running';
    DELETE FROM bus_journal WHERE seq = NEW.answered_seq
        AND EXISTS (SELECT 1 FROM finish_result WHERE run_id = NEW.run_id AND prior_status = 'running');
END;
";

/// A finish statement: clear the result table, insert `$rows` into the view (the trigger does
/// the work), read the results back. One call, so one round trip.
macro_rules! finish_statement {
    ($rows:literal) => {
        concat!(
            "DELETE FROM finish_result;
INSERT INTO run_finishes (
    run_id, status, model, input_tokens, output_tokens, iterations, error, reply_json,
    finished_at, cost_usd, usage_estimated, memory_scope, transcript,
    billing_channel, billing_sender, billing_month, billing_group,
    reply_flow, reply_channel, reply_subject, reply_dedupe_id, reply_payload, answered_seq,
    cache_read_tokens, cache_write_tokens, context_tokens
) ",
            $rows,
            ";
SELECT run_id, session_key, prior_status, history_version, reply_seq, usage_counted FROM finish_result"
        )
    };
}

/// A group of finishes, as a JSON array of objects (see [`FinishRow`]).
const FINISH: &str = finish_statement!(
    "SELECT f.value ->> 'run_id', f.value ->> 'status', f.value ->> 'model', f.value ->> 'input_tokens',
    f.value ->> 'output_tokens', f.value ->> 'iterations', f.value ->> 'error', f.value ->> 'reply_json',
    f.value ->> 'finished_at', f.value ->> 'cost_usd', f.value ->> 'usage_estimated',
    f.value ->> 'memory_scope', f.value -> 'transcript', f.value ->> 'billing_channel',
    f.value ->> 'billing_sender', f.value ->> 'billing_month', f.value ->> 'billing_group',
    f.value ->> 'reply_flow', f.value ->> 'reply_channel', f.value ->> 'reply_subject',
    f.value ->> 'reply_dedupe_id', CAST(f.value ->> 'reply_payload' AS BLOB), f.value ->> 'answered_seq',
    f.value ->> 'cache_read_tokens', f.value ->> 'cache_write_tokens', f.value ->> 'context_tokens'
FROM json_each($1) AS f ORDER BY f.key"
);

/// One finish alone (no other waited): the row as parameters, which spares the JSON that
/// carries a group.
const FINISH_ONE: &str = finish_statement!(
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21,
    $22, $23, $24, $25, $26)"
);

type ResultRow = (String, Option<String>, Option<String>, Option<i64>, Option<i64>, Option<bool>);

/// Finishes a group of runs in one statement. Should it fail, each is tried alone, so one bad
/// finish does not fail the others.
pub(super) async fn group(writer: SqlitePool, rows: Vec<FinishRow>) -> GroupOutcome<Result<Finished, String>> {
    match finish(&writer, &rows).await {
        Ok(finished) => Ok(finished.into_iter().map(Ok).collect()),
        Err(err) if rows.len() == 1 => Ok(vec![Err(err.to_string())]),
        Err(_) => {
            let mut each = Vec::with_capacity(rows.len());
            for row in rows {
                each.push(finish(&writer, std::slice::from_ref(&row)).await.map(|mut one| one.remove(0)));
            }
            Ok(each.into_iter().map(|result| result.map_err(|err| err.to_string())).collect())
        }
    }
}

/// Runs the finishes, installing the trigger on the connection's first; one outcome per row.
async fn finish(writer: &SqlitePool, rows: &[FinishRow]) -> Result<Vec<Finished>, StoreError> {
    let parameters = match rows {
        [one] => Parameters::One(one, encode(&one.transcript)?),
        _ => Parameters::Group(encode(&rows)?),
    };
    let results = match parameters.query().fetch_all(writer).await {
        Err(err) if is_missing_trigger(&err) => {
            writer.execute(INSTALL).await?;
            parameters.query().fetch_all(writer).await?
        }
        other => other?,
    };
    let mut by_run: HashMap<String, ResultRow> =
        results.into_iter().map(|row: ResultRow| (row.0.clone(), row)).collect();
    rows.iter().map(|row| outcome(row, by_run.remove(&row.run_id))).collect()
}

/// A finish's parameters, bound anew for the retry after installing the trigger.
enum Parameters<'a> {
    /// One row, and its transcript as JSON.
    One(&'a FinishRow, String),
    /// The group as a JSON array.
    Group(String),
}

impl Parameters<'_> {
    fn query(&self) -> sqlx::query::QueryAs<'_, Sqlite, ResultRow, SqliteArguments<'_>> {
        let (row, transcript) = match self {
            Parameters::Group(array) => return sqlx::query_as(FINISH).bind(array.as_str()),
            Parameters::One(row, transcript) => (row, transcript),
        };
        sqlx::query_as(FINISH_ONE)
            .bind(row.run_id.as_str())
            .bind(row.status)
            .bind(row.model.as_str())
            .bind(row.input_tokens)
            .bind(row.output_tokens)
            .bind(row.iterations)
            .bind(row.error.as_deref())
            .bind(row.reply_json.as_deref())
            .bind(row.finished_at)
            .bind(row.cost_usd)
            .bind(row.usage_estimated)
            .bind(row.memory_scope.as_deref())
            .bind(transcript.as_str())
            .bind(row.billing_channel.as_deref())
            .bind(row.billing_sender.as_deref())
            .bind(row.billing_month.as_deref())
            .bind(row.billing_group.as_deref())
            .bind(row.reply_flow)
            .bind(row.reply_channel.as_deref())
            .bind(row.reply_subject.as_deref())
            .bind(row.reply_dedupe_id.as_deref())
            .bind(row.reply_payload.as_deref().map(str::as_bytes))
            .bind(row.answered_seq)
            .bind(row.cache_read_tokens)
            .bind(row.cache_write_tokens)
            .bind(row.context_tokens)
    }
}

fn outcome(row: &FinishRow, result: Option<ResultRow>) -> Result<Finished, StoreError> {
    let Some((run_id, Some(session_key), prior_status, history_version, reply_row, usage_counted)) = result else {
        return Ok(Finished::NoSuchRun);
    };
    if prior_status.as_deref() != Some("running") {
        return Ok(Finished::NotRunning);
    }
    let history_version = history_version
        .ok_or_else(|| StoreError::Corrupt(format!("run {run_id}'s session {session_key} has no row")))?;
    if usage_counted == Some(false)
        && let Some(sender) = &row.billing_sender
    {
        // Identities are only ever moved, never deleted, so this needs a hand-edited database.
        // Failing would only make the message run (and cost) again, with the same result.
        tracing::warn!(channel = ?row.billing_channel, %sender, "a run's usage has no user to be counted for");
    }
    Ok(Finished::Done { session_key, history_version, reply_row })
}

/// A writer connection's first finish: its TEMP objects do not exist yet.
fn is_missing_trigger(err: &sqlx::Error) -> bool {
    let missing = |db: &dyn sqlx::error::DatabaseError| {
        ["no such table: finish_result", "no such table: run_finishes"].iter().any(|table| db.message().contains(table))
    };
    matches!(err, sqlx::Error::Database(db) if missing(db.as_ref()))
}
