//! The writes that many tasks make at once, each kind grouped into one statement (see
//! [`Grouped`]): the bus journal's appends (adapters publishing) and deletes (deliveries
//! acked), the claims and finishes of runs (workers starting and ending turns; the finish's
//! statement is in `finish`), and the marks of replies handed to a NATS bus.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::FutureExt;
use sqlx::{SqliteConnection, SqlitePool};

use super::finish;
use super::grouped::{GroupOutcome, Grouped, Lane};
use crate::store::finishing::{FinishRow, Finished};
use switchboard_channels::bus::journal::JournalRecord;

use crate::store::values::flow_name;
use crate::store::{RunKind, RunStatus};

/// A run to claim for an inbound message.
pub(in crate::store) struct ClaimRow {
    pub run_id: String,
    pub inbound_id: String,
    pub session_key: String,
    pub kind: RunKind,
}

/// The grouped writes of one store, all through its writer connection.
pub(in crate::store) struct GroupWrites {
    /// Journal rows to delete; nothing comes back.
    pub removals: Arc<Grouped<i64, ()>>,
    /// Journal rows to add; each row's `seq`, or `None` when its dedupe id is still pending.
    pub appends: Arc<Grouped<JournalRecord, Option<i64>>>,
    /// Runs to start; for each, whether it was new (false: the inbound id has a run already).
    pub claims: Arc<Grouped<ClaimRow, bool>>,
    /// Runs to finish; for each, what its finish found and did, or why it failed.
    pub finishes: Arc<Grouped<FinishRow, Result<Finished, String>>>,
    /// Runs whose reply was handed to the bus (NATS); for each, whether the run exists.
    pub deliveries: Arc<Grouped<String, bool>>,
    /// What the chat adapters delivered (NATS): rows of the `deliveries` table to upsert.
    pub sent: Arc<Grouped<SentRow, ()>>,
}

/// How far an outbound message got on a channel (`steps`: -1 for the whole message).
#[derive(serde::Serialize)]
pub(in crate::store) struct SentRow {
    pub channel: String,
    pub id: String,
    pub steps: i64,
}

impl std::fmt::Debug for GroupWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupWrites")
    }
}

impl GroupWrites {
    pub fn new(writer: &SqlitePool) -> Self {
        let lane = Lane::new(writer);
        Self {
            removals: Grouped::new(&lane, |conn, seqs| remove(conn, seqs).boxed()),
            appends: Grouped::new(&lane, |conn, rows| append(conn, rows).boxed()),
            claims: Grouped::new(&lane, |conn, rows| claim(conn, rows).boxed()),
            finishes: Grouped::new(&lane, |conn, rows| finish::group(conn, rows).boxed()),
            deliveries: Grouped::new(&lane, |conn, runs| mark_delivered(conn, runs).boxed()),
            sent: Grouped::new(&lane, |conn, rows| record_sent(conn, rows).boxed()),
        }
    }
}

async fn remove(conn: &mut SqliteConnection, seqs: Vec<i64>) -> GroupOutcome<()> {
    if let [seq] = seqs.as_slice() {
        let deleted = sqlx::query("DELETE FROM bus_journal WHERE seq = $1").bind(seq).execute(&mut *conn).await;
        return deleted.map(|_| vec![()]).map_err(|err| err.to_string());
    }
    let count = seqs.len();
    let seqs = serde_json::to_string(&seqs).map_err(|err| err.to_string())?;
    sqlx::query("DELETE FROM bus_journal WHERE seq IN (SELECT value FROM json_each($1))")
        .bind(seqs)
        .execute(&mut *conn)
        .await
        .map_err(|err| err.to_string())?;
    Ok(vec![(); count])
}

/// One `UPDATE` of the runs named in a JSON array; for each, whether it exists.
async fn mark_delivered(conn: &mut SqliteConnection, runs: Vec<String>) -> GroupOutcome<bool> {
    if let [run] = runs.as_slice() {
        let updated =
            sqlx::query("UPDATE runs SET reply_delivered = 1 WHERE run_id = $1").bind(run).execute(&mut *conn);
        return updated.await.map(|done| vec![done.rows_affected() == 1]).map_err(|err| err.to_string());
    }
    let array = serde_json::to_string(&runs).map_err(|err| err.to_string())?;
    let updated: Vec<String> = sqlx::query_scalar(
        "UPDATE runs SET reply_delivered = 1 WHERE run_id IN (SELECT value FROM json_each($1)) RETURNING run_id",
    )
    .bind(array)
    .fetch_all(&mut *conn)
    .await
    .map_err(|err| err.to_string())?;
    let updated: std::collections::HashSet<String> = updated.into_iter().collect();
    Ok(runs.iter().map(|run| updated.contains(run)).collect())
}

/// One upsert over a JSON array of the rows; a later row for the same message wins (SQLite's
/// upsert takes the rows of one `INSERT` one after another, in the array's order).
async fn record_sent(conn: &mut SqliteConnection, rows: Vec<SentRow>) -> GroupOutcome<()> {
    const MANY: &str = "INSERT INTO deliveries (channel, id, steps, recorded_at) \
         SELECT r.value ->> '$.channel', r.value ->> '$.id', r.value ->> '$.steps', $2 \
         FROM json_each($1) AS r WHERE true ORDER BY r.key \
         ON CONFLICT (channel, id) DO UPDATE SET steps = excluded.steps, recorded_at = excluded.recorded_at";
    let count = rows.len();
    let now = crate::store::values::now_millis();
    let written = if let [row] = rows.as_slice() {
        sqlx::query(crate::store::shared::deliveries::RECORD_ONE)
            .bind(&row.channel)
            .bind(&row.id)
            .bind(row.steps)
            .bind(now)
            .execute(&mut *conn)
            .await
    } else {
        let array = serde_json::to_string(&rows).map_err(|err| err.to_string())?;
        sqlx::query(MANY).bind(array).bind(now).execute(&mut *conn).await
    };
    written.map(|_| vec![(); count]).map_err(|err| err.to_string())
}

/// One `INSERT … SELECT` over a JSON array of the rows. The payloads travel as JSON strings,
/// so they must be UTF-8, which the bus's payloads (JSON themselves) are.
async fn append(conn: &mut SqliteConnection, rows: Vec<JournalRecord>) -> GroupOutcome<Option<i64>> {
    if let [row] = rows.as_slice() {
        return append_one(conn, row).await.map(|seq| vec![seq]);
    }
    let mut array = Vec::with_capacity(rows.len());
    for row in &rows {
        let payload = std::str::from_utf8(&row.payload)
            .map_err(|_| format!("a journal payload for {} is not UTF-8", row.subject))?;
        let flow = flow_name(row.flow).map_err(|err| err.0)?;
        array.push((flow, &row.channel, &row.subject, row.dedupe_id.as_deref(), payload));
    }
    let array = serde_json::to_string(&array).map_err(|err| err.to_string())?;
    let written: Vec<(i64, Option<String>)> = sqlx::query_as(
        "INSERT INTO bus_journal (flow, channel, subject, dedupe_id, payload, created_at) \
         SELECT r.value ->> 0, r.value ->> 1, r.value ->> 2, r.value ->> 3, CAST(r.value ->> 4 AS BLOB), $2 \
         FROM json_each($1) AS r WHERE true ORDER BY r.key \
         ON CONFLICT (dedupe_id) DO NOTHING RETURNING seq, dedupe_id",
    )
    .bind(array)
    .bind(chrono::Utc::now().timestamp_millis())
    .fetch_all(&mut *conn)
    .await
    .map_err(|err| err.to_string())?;
    Ok(match_appended(&rows, written))
}

/// Which row got which `seq`. A row with a dedupe id is found by it (the first of a group that
/// shares one was written, the others are duplicates). Rows without one never conflict, and
/// were numbered in the order they were given.
fn match_appended(rows: &[JournalRecord], written: Vec<(i64, Option<String>)>) -> Vec<Option<i64>> {
    let mut by_dedupe = HashMap::new();
    let mut undeduped = Vec::new();
    for (seq, dedupe_id) in written {
        match dedupe_id {
            Some(id) => {
                by_dedupe.insert(id, seq);
            }
            None => undeduped.push(seq),
        }
    }
    undeduped.sort_unstable();
    let mut undeduped = undeduped.into_iter();
    rows.iter()
        .map(|row| match &row.dedupe_id {
            Some(id) => by_dedupe.remove(id),
            None => undeduped.next(),
        })
        .collect()
}

/// One `INSERT … SELECT`; a trigger creates each run's session row first (migration 0016).
/// Insert first and look only on conflict: the unique inbound id decides who is first, which
/// stays correct where there is no database-wide write lock.
async fn claim(conn: &mut SqliteConnection, rows: Vec<ClaimRow>) -> GroupOutcome<bool> {
    if let [row] = rows.as_slice() {
        return claim_one(conn, row).await.map(|inserted| vec![inserted]);
    }
    let array: Vec<_> =
        rows.iter().map(|row| (&row.run_id, &row.inbound_id, &row.session_key, row.kind.as_str())).collect();
    let array = serde_json::to_string(&array).map_err(|err| err.to_string())?;
    let inserted: Vec<String> = sqlx::query_scalar(
        "INSERT INTO runs (run_id, inbound_id, session_key, status, attempt, started_at, kind) \
         SELECT r.value ->> 0, r.value ->> 1, r.value ->> 2, $2, 1, $3, r.value ->> 3 \
         FROM json_each($1) AS r WHERE true ORDER BY r.key \
         ON CONFLICT (inbound_id) DO NOTHING RETURNING run_id",
    )
    .bind(array)
    .bind(RunStatus::Running.as_str())
    .bind(super::now_millis())
    .fetch_all(&mut *conn)
    .await
    .map_err(|err| err.to_string())?;
    // Matched by run id, which is new for every claim: two claims of one inbound id in one
    // group are told apart.
    let mut inserted: std::collections::HashSet<String> = inserted.into_iter().collect();
    Ok(rows.iter().map(|row| inserted.remove(&row.run_id)).collect())
}

/// A claim alone: the plain statement, without the JSON that carries a group.
async fn claim_one(conn: &mut SqliteConnection, row: &ClaimRow) -> Result<bool, String> {
    let inserted = sqlx::query(
        "INSERT INTO runs (run_id, inbound_id, session_key, status, attempt, started_at, kind) \
         VALUES ($1, $2, $3, $4, 1, $5, $6) ON CONFLICT (inbound_id) DO NOTHING",
    )
    .bind(&row.run_id)
    .bind(&row.inbound_id)
    .bind(&row.session_key)
    .bind(RunStatus::Running.as_str())
    .bind(super::now_millis())
    .bind(row.kind.as_str())
    .execute(conn)
    .await
    .map_err(|err| err.to_string())?;
    Ok(inserted.rows_affected() == 1)
}

/// An append alone: the plain statement, without the JSON that carries a group.
async fn append_one(conn: &mut SqliteConnection, row: &JournalRecord) -> Result<Option<i64>, String> {
    sqlx::query_scalar(
        "INSERT INTO bus_journal (flow, channel, subject, dedupe_id, payload, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (dedupe_id) DO NOTHING RETURNING seq",
    )
    .bind(flow_name(row.flow).map_err(|err| err.0)?)
    .bind(&row.channel)
    .bind(&row.subject)
    .bind(row.dedupe_id.as_deref())
    .bind(row.payload.as_ref())
    .bind(chrono::Utc::now().timestamp_millis())
    .fetch_optional(conn)
    .await
    .map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(dedupe_id: Option<&str>) -> JournalRecord {
        JournalRecord {
            flow: switchboard_channels::subject::Flow::In,
            channel: "t".into(),
            subject: "s".into(),
            dedupe_id: dedupe_id.map(str::to_owned),
            payload: bytes::Bytes::from_static(b"{}"),
        }
    }

    #[tokio::test]
    async fn a_group_of_records_keeps_each_and_the_later_progress_of_a_message() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::sqlite::SqliteStore::open(&dir.path().join("sb.db")).await.unwrap();
        let sent = |id: &str, steps| SentRow { channel: "telegram".into(), id: id.into(), steps };
        let group = vec![sent("a", 1), sent("b", -1), sent("a", -1), sent("c", 2)];
        let mut conn = store.write_pool().acquire().await.unwrap();
        assert_eq!(record_sent(&mut conn, group).await.unwrap().len(), 4);
        drop(conn);
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT id, steps FROM deliveries ORDER BY id").fetch_all(store.write_pool()).await.unwrap();
        assert_eq!(rows, [("a".into(), -1), ("b".into(), -1), ("c".into(), 2)]);
    }

    #[test]
    fn appended_rows_are_matched_by_dedupe_id_and_otherwise_by_order() {
        let rows = [row(Some("a")), row(None), row(Some("b")), row(Some("a")), row(None), row(Some("c"))];
        // "c" was pending already; the second "a" is a duplicate within the group.
        let written = vec![(13, None), (10, Some("a".into())), (12, Some("b".into())), (11, None)];
        assert_eq!(match_appended(&rows, written), vec![Some(10), Some(11), Some(12), None, Some(13), None]);
    }
}
