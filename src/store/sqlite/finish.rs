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

use sqlx::sqlite::SqliteArguments;
use sqlx::{Executor, Sqlite, SqlitePool};

use super::{RunOutcome, StoreError, encode, role_name, to_i64};
use crate::store::BusWrites;
use crate::store::sqlite::bus_journal::flow_name;

/// Creates the connection's finishing trigger.
pub(super) const INSTALL: &str = "
-- Set before the first TEMP object: kept in memory, never in a temporary file.
PRAGMA temp_store = MEMORY;
CREATE TEMP TABLE IF NOT EXISTS finish_result (
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
    reply_flow, reply_channel, reply_subject, reply_dedupe_id, reply_payload, answered_seq
) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;
CREATE TEMP TRIGGER IF NOT EXISTS run_finishes_insert INSTEAD OF INSERT ON run_finishes
BEGIN
    DELETE FROM finish_result;
    INSERT INTO finish_result (session_key, prior_status)
        SELECT session_key, status FROM runs WHERE run_id = NEW.run_id;
    -- Only a running run is finished: another worker may have resumed this one and finished
    -- first, and then its reply is the one kept (appending this transcript would duplicate
    -- the turn). IGNORE ends the statement here and keeps the row that says why.
    SELECT RAISE(IGNORE) WHERE NOT EXISTS (SELECT 1 FROM finish_result WHERE prior_status = 'running');
    UPDATE runs SET status = NEW.status, model = NEW.model, input_tokens = NEW.input_tokens,
        output_tokens = NEW.output_tokens, iterations = NEW.iterations, error = NEW.error,
        reply_json = NEW.reply_json, finished_at = NEW.finished_at, cost_usd = NEW.cost_usd,
        usage_estimated = NEW.usage_estimated,
        reply_delivered = reply_delivered OR NEW.reply_payload IS NOT NULL
        WHERE run_id = NEW.run_id;
    -- The transcript comes as a JSON array of [role, message JSON] pairs, in order.
    INSERT INTO transcript (session_key, run_id, seq, role, message_json, created_at, memory_scope)
        SELECT (SELECT session_key FROM finish_result), NEW.run_id, rows.key, rows.value ->> 0,
            rows.value ->> 1, NEW.finished_at, NEW.memory_scope
        FROM json_each(NEW.transcript) AS rows ORDER BY rows.key;
    INSERT INTO usage_monthly (user_id, month, input_tokens, output_tokens)
        SELECT user_id, NEW.billing_month, NEW.input_tokens, NEW.output_tokens FROM identities
        WHERE NEW.billing_month IS NOT NULL AND channel = NEW.billing_channel
            AND sender_id = NEW.billing_sender
        ON CONFLICT (user_id, month) DO UPDATE SET
            input_tokens = input_tokens + excluded.input_tokens,
            output_tokens = output_tokens + excluded.output_tokens;
    INSERT INTO group_usage_monthly (group_key, month, input_tokens, output_tokens)
        SELECT NEW.billing_group, NEW.billing_month, NEW.input_tokens, NEW.output_tokens
        WHERE NEW.billing_group IS NOT NULL
        ON CONFLICT (group_key, month) DO UPDATE SET
            input_tokens = input_tokens + excluded.input_tokens,
            output_tokens = output_tokens + excluded.output_tokens;
    UPDATE sessions SET updated_at = NEW.finished_at, history_version = history_version + 1
        WHERE key = (SELECT session_key FROM finish_result);
    -- A pending row with the reply's dedupe id means it is journaled already.
    UPDATE finish_result SET reply_seq = 0 WHERE NEW.reply_payload IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM bus_journal WHERE dedupe_id = NEW.reply_dedupe_id);
    INSERT INTO bus_journal (flow, channel, subject, dedupe_id, payload, created_at)
        SELECT NEW.reply_flow, NEW.reply_channel, NEW.reply_subject, NEW.reply_dedupe_id,
            NEW.reply_payload, NEW.finished_at
        WHERE (SELECT reply_seq FROM finish_result) = 0;
    UPDATE finish_result SET
        reply_seq = CASE WHEN reply_seq = 0 THEN last_insert_rowid() END,
        history_version = (SELECT history_version FROM sessions WHERE key = finish_result.session_key),
        usage_counted = NEW.billing_month IS NULL OR EXISTS (SELECT 1 FROM identities
            WHERE channel = NEW.billing_channel AND sender_id = NEW.billing_sender);
    DELETE FROM bus_journal WHERE seq = NEW.answered_seq;
END;
";

/// The finish and the read-back of its result: one call, so one round trip.
const FINISH: &str = "
INSERT INTO run_finishes (
    run_id, status, model, input_tokens, output_tokens, iterations, error, reply_json,
    finished_at, cost_usd, usage_estimated, memory_scope, transcript,
    billing_channel, billing_sender, billing_month, billing_group,
    reply_flow, reply_channel, reply_subject, reply_dedupe_id, reply_payload, answered_seq
) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
    $20, $21, $22, $23);
SELECT session_key, prior_status, history_version, reply_seq, usage_counted FROM finish_result";

/// What the finish found and did.
pub(super) enum Finished {
    /// The run is finished now.
    Done {
        session_key: String,
        /// The session's history version after this run's rows.
        history_version: i64,
        /// The reply's journal row, unless no reply was journaled or one was pending already.
        reply_row: Option<i64>,
    },
    NoSuchRun,
    /// The run was not running (another worker finished it).
    NotRunning,
}

type ResultRow = (Option<String>, Option<String>, Option<i64>, Option<i64>, Option<bool>);

/// Finishes `run_id` with `outcome`, journaling `bus`'s writes with it, at `now` (unix ms).
pub(super) async fn run(
    writer: &SqlitePool,
    run_id: &str,
    outcome: &RunOutcome,
    bus: &BusWrites<'_>,
    now: i64,
) -> Result<Finished, StoreError> {
    let reply_json = outcome.reply.as_ref().map(encode).transpose()?;
    let transcript = transcript_json(outcome)?;
    let reply_flow =
        bus.reply.map(|record| flow_name(record.flow)).transpose().map_err(|err| StoreError::Corrupt(err.0))?;
    let args = Args { run_id, outcome, bus, now, reply_json, transcript, reply_flow };
    let row = match args.query().fetch_optional(writer).await {
        Err(err) if is_missing_trigger(&err) => {
            writer.execute(INSTALL).await?;
            args.query().fetch_optional(writer).await?
        }
        other => other?,
    };
    let Some((Some(session_key), prior_status, history_version, reply_row, usage_counted)) = row else {
        return Ok(Finished::NoSuchRun);
    };
    if prior_status.as_deref() != Some("running") {
        return Ok(Finished::NotRunning);
    }
    let history_version = history_version
        .ok_or_else(|| StoreError::Corrupt(format!("run {run_id}'s session {session_key} has no row")))?;
    if usage_counted == Some(false)
        && let Some(billing) = &outcome.billing
    {
        // Identities are only ever moved, never deleted, so this needs a hand-edited database.
        // Failing would only make the message run (and cost) again, with the same result.
        tracing::warn!(identity = %billing.identity, "a run's usage has no user to be counted for");
    }
    Ok(Finished::Done { session_key, history_version, reply_row })
}

/// A writer connection's first finish: its TEMP objects do not exist yet.
fn is_missing_trigger(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.message().contains("no such table: run_finishes"))
}

/// The finish's parameters, bound anew for its one retry.
struct Args<'a> {
    run_id: &'a str,
    outcome: &'a RunOutcome,
    bus: &'a BusWrites<'a>,
    now: i64,
    reply_json: Option<String>,
    transcript: String,
    reply_flow: Option<&'static str>,
}

impl Args<'_> {
    fn query(&self) -> sqlx::query::QueryAs<'_, Sqlite, ResultRow, SqliteArguments<'_>> {
        let Args { run_id, outcome, bus, now, .. } = *self;
        let billing = outcome.billing.as_ref();
        let reply = bus.reply;
        sqlx::query_as(FINISH)
            .bind(run_id)
            .bind(outcome.status.as_str())
            .bind(&outcome.model)
            .bind(to_i64(outcome.usage.input_tokens))
            .bind(to_i64(outcome.usage.output_tokens))
            .bind(i64::from(outcome.iterations))
            .bind(outcome.error.as_deref())
            .bind(self.reply_json.as_deref())
            .bind(now)
            .bind(outcome.cost_usd)
            .bind(outcome.usage.estimated)
            .bind(outcome.memory_scope.as_deref())
            .bind(self.transcript.as_str())
            .bind(billing.map(|billing| billing.identity.channel.as_str()))
            .bind(billing.map(|billing| billing.identity.sender_id.as_str()))
            .bind(billing.map(|billing| billing.month.as_str()))
            .bind(billing.and_then(|billing| billing.group.as_deref()))
            .bind(self.reply_flow)
            .bind(reply.map(|record| record.channel.as_str()))
            .bind(reply.map(|record| record.subject.as_str()))
            .bind(reply.and_then(|record| record.dedupe_id.as_deref()))
            .bind(reply.map(|record| record.payload.as_ref()))
            .bind(bus.answered_row)
    }
}

/// The transcript as the trigger reads it: `[[role, message JSON], …]`.
fn transcript_json(outcome: &RunOutcome) -> Result<String, StoreError> {
    let rows = outcome
        .transcript
        .iter()
        .map(|message| encode(message).map(|json| (role_name(message.role), json)))
        .collect::<Result<Vec<_>, _>>()?;
    encode(&rows)
}
