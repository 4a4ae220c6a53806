//! A run's finish as one statement on the writer connection. What it writes is the rule in
//! `store::finish_rule`; this is how the SQLite store runs it.
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
use std::fmt::Write as _;
use std::sync::LazyLock;

use sqlx::sqlite::SqliteArguments;
use sqlx::{Executor, Sqlite, SqliteConnection};

use super::StoreError;
use super::grouped::GroupOutcome;
use crate::store::finish_rule::{self, Dialect, FIELDS, Kind, STEPS, Step};
use crate::store::finishing::{FinishRow, Finished, ResultRow};
use crate::store::values::encode;

/// The rule's placeholders on this connection: `finish_result` holds the finish's run as it
/// was found.
const DIALECT: Dialect = Dialect {
    running: "EXISTS (SELECT 1 FROM finish_result WHERE run_id = NEW.run_id AND prior_status = 'running')",
    session: "(SELECT session_key FROM finish_result WHERE run_id = NEW.run_id)",
    transcript: "json_each(NEW.transcript) AS pairs",
    payload: "NEW.reply_payload",
};

/// Creates the connection's finishing trigger.
pub(super) static INSTALL: LazyLock<String> = LazyLock::new(install);

fn install() -> String {
    let columns = FIELDS.map(|(name, _)| name).join(", ");
    let nulls = FIELDS.map(|_| "NULL").join(", ");
    let mut body = String::new();
    for (step, sql) in STEPS {
        let _ = writeln!(body, "    {};", finish_rule::statement(sql, &DIALECT));
        if step == Step::Reply {
            // Right after the reply's row: `changes()` counts that statement's rows.
            body.push_str(RESULT);
        }
    }
    format!(
        "
-- Set before the first TEMP object: kept in memory, never in a temporary file.
PRAGMA temp_store = MEMORY;
CREATE TEMP TABLE IF NOT EXISTS finish_result (
    run_id          TEXT PRIMARY KEY,
    session_key     TEXT,
    prior_status    TEXT,
    history_version INTEGER,
    reply_seq       INTEGER,
    usage_counted   INTEGER
);
CREATE TEMP VIEW IF NOT EXISTS run_finishes ({columns}) AS SELECT {nulls} WHERE 0;
CREATE TEMP TRIGGER IF NOT EXISTS run_finishes_insert INSTEAD OF INSERT ON run_finishes
BEGIN
    -- The run as found, which the rule's statements check (`finish_rule`): every step checks
    -- (not RAISE(IGNORE), which would end the whole INSERT and with it the other runs of the
    -- group), and the result row says why nothing happened.
    INSERT INTO finish_result (run_id, session_key, prior_status)
        SELECT run_id, session_key, status FROM runs WHERE run_id = NEW.run_id;
{body}END;
"
    )
}

/// What the caller reads back, written right after the reply's journal row.
const RESULT: &str = "    UPDATE finish_result SET
        reply_seq = CASE WHEN changes() > 0 THEN last_insert_rowid() END,
        history_version = (SELECT history_version FROM sessions WHERE key = finish_result.session_key),
        usage_counted = NEW.billing_month IS NULL OR EXISTS (SELECT 1 FROM identities
            WHERE channel = NEW.billing_channel AND sender_id = NEW.billing_sender)
        WHERE run_id = NEW.run_id AND prior_status = 'running';
";

/// A finish statement: clear the result table, insert `rows` into the view (the trigger does
/// the work), read the results back. One call, so one round trip.
fn finish_statement(rows: &str) -> String {
    let columns = FIELDS.map(|(name, _)| name).join(", ");
    format!(
        "DELETE FROM finish_result;
INSERT INTO run_finishes ({columns}) {rows};
SELECT run_id, session_key, prior_status, history_version, reply_seq, usage_counted FROM finish_result"
    )
}

/// A group of finishes, as a JSON array of objects (see [`FinishRow`]).
static FINISH: LazyLock<String> = LazyLock::new(|| {
    let values = FIELDS.map(|(name, kind)| match kind {
        Kind::Json => format!("f.value -> '{name}'"),
        Kind::Bytes => format!("CAST(f.value ->> '{name}' AS BLOB)"),
        _ => format!("f.value ->> '{name}'"),
    });
    finish_statement(&format!("SELECT {} FROM json_each($1) AS f ORDER BY f.key", values.join(", ")))
});

/// One finish alone (no other waited): the row as parameters, which spares the JSON that
/// carries a group.
static FINISH_ONE: LazyLock<String> = LazyLock::new(|| {
    let parameters: Vec<String> = (1..=FIELDS.len()).map(|n| format!("${n}")).collect();
    finish_statement(&format!("VALUES ({})", parameters.join(", ")))
});

/// Finishes a group of runs in one statement. Should it fail, each is tried alone, so one bad
/// finish does not fail the others.
pub(super) async fn group(conn: &mut SqliteConnection, rows: Vec<FinishRow>) -> GroupOutcome<Result<Finished, String>> {
    match finish(conn, &rows).await {
        Ok(finished) => Ok(finished.into_iter().map(Ok).collect()),
        Err(err) if rows.len() == 1 => Ok(vec![Err(err.to_string())]),
        Err(_) => {
            let mut each = Vec::with_capacity(rows.len());
            for row in rows {
                each.push(finish(conn, std::slice::from_ref(&row)).await.map(|mut one| one.remove(0)));
            }
            Ok(each.into_iter().map(|result| result.map_err(|err| err.to_string())).collect())
        }
    }
}

/// Runs the finishes, installing the trigger on the connection's first; one outcome per row.
async fn finish(conn: &mut SqliteConnection, rows: &[FinishRow]) -> Result<Vec<Finished>, StoreError> {
    let parameters = match rows {
        [one] => Parameters::One(one, encode(&one.transcript)?),
        _ => Parameters::Group(encode(&rows)?),
    };
    let results = match parameters.query().fetch_all(&mut *conn).await {
        Err(err) if is_missing_trigger(&err) => {
            conn.execute(INSTALL.as_str()).await?;
            parameters.query().fetch_all(&mut *conn).await?
        }
        other => other?,
    };
    let mut by_run: HashMap<String, ResultRow> =
        results.into_iter().map(|row: ResultRow| (row.0.clone(), row)).collect();
    rows.iter().map(|row| Finished::read(row, by_run.remove(&row.run_id))).collect()
}

/// A finish's parameters, bound anew for the retry after installing the trigger.
enum Parameters<'a> {
    /// One row, and its transcript as JSON.
    One(&'a FinishRow, String),
    /// The group as a JSON array.
    Group(String),
}

impl Parameters<'_> {
    fn query(&self) -> sqlx::query::QueryAs<'_, Sqlite, ResultRow, SqliteArguments> {
        let (row, transcript) = match self {
            Parameters::Group(array) => return sqlx::query_as(FINISH.as_str()).bind(array.as_str()),
            Parameters::One(row, transcript) => (row, transcript),
        };
        // In the order of `FIELDS`.
        sqlx::query_as(FINISH_ONE.as_str())
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

/// A writer connection's first finish: its TEMP objects do not exist yet.
fn is_missing_trigger(err: &sqlx::Error) -> bool {
    let missing = |db: &dyn sqlx::error::DatabaseError| {
        ["no such table: finish_result", "no such table: run_finishes"].iter().any(|table| db.message().contains(table))
    };
    matches!(err, sqlx::Error::Database(db) if missing(db.as_ref()))
}
