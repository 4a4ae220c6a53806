//! A run's finish on PostgreSQL: one call of `finish_runs`, a PL/pgSQL function whose body is
//! the rule in `store::finish_rule`, generated here and created by a migration (`migrate`).
//!
//! PostgreSQL has many writers at once, so the function locks the run's row before it looks at
//! it (two workers finishing one resumed run take turns, and the second finds it finished),
//! and takes one advisory lock before the rule writes transcript rows: their ids are taken in
//! commit order, as SQLite's one writer takes them. A session's history reads its rows by id,
//! and the memory index reads every scope's rows past the last id it indexed, so a row
//! committed after a higher id would be skipped for good. The lock is held to the end of the
//! call's transaction.

use std::fmt::Write as _;
use std::sync::LazyLock;

use sqlx::PgPool;

use crate::store::StoreError;
use crate::store::finish_rule::{self, Dialect, FIELDS, Kind, STEPS, Step};
use crate::store::finishing::{FinishRow, Finished, ResultRow};
use crate::store::values::encode;

/// The rule's placeholders in the function: it has returned already for a run not running.
const DIALECT: Dialect = Dialect {
    running: "TRUE",
    session: "prior.session_key",
    transcript: "(SELECT n - 1 AS key, value \
                 FROM jsonb_array_elements(NEW.transcript) WITH ORDINALITY AS e (value, n)) AS pairs",
    payload: "convert_to(NEW.reply_payload, 'UTF8')",
};

/// `CREATE OR REPLACE FUNCTION finish_runs`: the rule as this build has it.
pub(super) fn function() -> &'static str {
    static FUNCTION: LazyLock<String> = LazyLock::new(create_function);
    FUNCTION.as_str()
}

fn create_function() -> String {
    let fields = FIELDS.map(|(name, kind)| format!("{name} {}", sql_type(kind))).join(", ");
    let mut body = String::new();
    for (step, sql) in STEPS {
        let statement = finish_rule::statement(sql, &DIALECT);
        let _ = match step {
            Step::Session => {
                writeln!(body, "        {statement}\n            RETURNING history_version INTO new_version;")
            }
            Step::Reply => writeln!(body, "        {statement}\n            RETURNING seq INTO reply_row;"),
            _ => writeln!(body, "        {statement};"),
        };
        if step == Step::UserUsage {
            body.push_str("        usage_counted := NEW.billing_month IS NULL OR FOUND;\n");
        }
    }
    format!(
        "-- Generated from src/store/finish_rule.rs (src/store/postgres/finish.rs).
CREATE OR REPLACE FUNCTION finish_runs(finishes JSONB)
RETURNS TABLE (
    finished_run    TEXT,
    run_session     TEXT,
    prior_status    TEXT,
    new_version     BIGINT,
    reply_row       BIGINT,
    usage_counted   BOOLEAN
)
LANGUAGE plpgsql AS $$
DECLARE
    NEW   RECORD;
    prior RECORD;
BEGIN
    FOR NEW IN SELECT * FROM jsonb_to_recordset(finishes) AS f ({fields}) LOOP
        finished_run := NEW.run_id;
        run_session := NULL; prior_status := NULL; new_version := NULL; reply_row := NULL; usage_counted := NULL;
        SELECT r.session_key, r.status INTO prior FROM runs AS r WHERE r.run_id = NEW.run_id FOR UPDATE;
        IF NOT FOUND THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        run_session := prior.session_key;
        prior_status := prior.status;
        IF prior.status <> 'running' THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        PERFORM pg_advisory_xact_lock(7526466);
{body}        RETURN NEXT;
    END LOOP;
END;
$$;
"
    )
}

fn sql_type(kind: Kind) -> &'static str {
    match kind {
        Kind::Integer => "BIGINT",
        Kind::Real => "DOUBLE PRECISION",
        Kind::Boolean => "BOOLEAN",
        Kind::Json => "JSONB",
        // The payload arrives as JSON text; `convert_to` makes it bytes.
        Kind::Text | Kind::Bytes => "TEXT",
    }
}

/// Writes a run's finish: one call of `finish_runs`.
pub(super) async fn write(pool: &PgPool, row: FinishRow) -> Result<Finished, StoreError> {
    let rows: Vec<ResultRow> = sqlx::query_as(
        "SELECT finished_run, run_session, prior_status, new_version, reply_row, usage_counted \
         FROM finish_runs($1::jsonb)",
    )
    .bind(encode(&[&row])?)
    .fetch_all(pool)
    .await?;
    Finished::read(&row, rows.into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a: stable across builds and platforms, unlike `std`'s hasher.
    fn fingerprint(text: &str) -> u64 {
        text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
    }

    /// A database migrated past the newest migration that creates `finish_runs` keeps the
    /// function that migration created: a change to the rule needs a new migration creating it
    /// again (`sql: finish::function()`), whose fingerprint this records.
    #[test]
    fn the_rule_changes_only_with_a_migration_that_creates_it_again() {
        assert_eq!(fingerprint(function()), super::super::migrate::FINISH_RULE_FINGERPRINT, "{}", function());
    }
}
