//! The in-process bus's journal on SQLite (see `switchboard_channels::bus::journal`).

use async_trait::async_trait;
use bytes::Bytes;
use sqlx::{Row, Sqlite, Transaction};
use switchboard_channels::bus::journal::{Journal, JournalEntry, JournalError, JournalRecord};
use switchboard_channels::subject::Flow;

use super::StoreError;
use super::sqlite::SqliteStore;

fn flow_name(flow: Flow) -> Result<&'static str, JournalError> {
    match flow {
        Flow::In => Ok("in"),
        Flow::Out => Ok("out"),
        Flow::Events => Err(JournalError("events are not journaled".into())),
    }
}

fn db_error(err: sqlx::Error) -> JournalError {
    JournalError(err.to_string())
}

type Query<'q, T> = sqlx::query::QueryScalar<'q, Sqlite, T, sqlx::sqlite::SqliteArguments<'q>>;

/// Journals a message unless one with its dedupe id is still pending; returns its row.
fn append_query<'q>(
    flow: &'static str,
    channel: &'q str,
    subject: &'q str,
    dedupe_id: Option<&'q str>,
    payload: &'q [u8],
    now: i64,
) -> Query<'q, i64> {
    sqlx::query_scalar(
        "INSERT INTO bus_journal (flow, channel, subject, dedupe_id, payload, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (dedupe_id) DO NOTHING RETURNING seq",
    )
    .bind(flow)
    .bind(channel)
    .bind(subject)
    .bind(dedupe_id)
    .bind(payload)
    .bind(now)
}

fn remove_query<'q>(seq: i64) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    sqlx::query("DELETE FROM bus_journal WHERE seq = $1").bind(seq)
}

/// Appends `record` within a run's finishing transaction (see `Bus::outbound_record`).
pub(super) async fn append_in(
    tx: &mut Transaction<'_, Sqlite>,
    record: &JournalRecord,
    now: i64,
) -> Result<Option<i64>, StoreError> {
    let flow = flow_name(record.flow).map_err(|err| StoreError::Corrupt(err.0))?;
    let payload = record.payload.as_ref();
    let query = append_query(flow, &record.channel, &record.subject, record.dedupe_id.as_deref(), payload, now);
    Ok(query.fetch_optional(&mut **tx).await?)
}

/// Deletes an answered message's row within a run's finishing transaction.
pub(super) async fn remove_in(tx: &mut Transaction<'_, Sqlite>, seq: i64) -> Result<(), StoreError> {
    remove_query(seq).execute(&mut **tx).await?;
    Ok(())
}

#[async_trait]
impl Journal for SqliteStore {
    async fn append(
        &self,
        flow: Flow,
        channel: &str,
        subject: &str,
        dedupe_id: Option<&str>,
        payload: &[u8],
    ) -> Result<Option<i64>, JournalError> {
        let now = chrono::Utc::now().timestamp_millis();
        append_query(flow_name(flow)?, channel, subject, dedupe_id, payload, now)
            .fetch_optional(self.writer())
            .await
            .map_err(db_error)
    }

    async fn remove(&self, seq: i64) -> Result<(), JournalError> {
        remove_query(seq).execute(self.writer()).await.map_err(db_error)?;
        Ok(())
    }

    async fn pending(&self) -> Result<Vec<JournalEntry>, JournalError> {
        let rows = sqlx::query("SELECT seq, flow, channel, subject, payload FROM bus_journal ORDER BY seq")
            .fetch_all(self.pool())
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                let flow = match row.try_get::<String, _>("flow").map_err(db_error)?.as_str() {
                    "in" => Flow::In,
                    "out" => Flow::Out,
                    other => return Err(JournalError(format!("unknown flow `{other}` in the journal"))),
                };
                Ok(JournalEntry {
                    seq: row.try_get("seq").map_err(db_error)?,
                    flow,
                    channel: row.try_get("channel").map_err(db_error)?,
                    subject: row.try_get("subject").map_err(db_error)?,
                    payload: Bytes::from(row.try_get::<Vec<u8>, _>("payload").map_err(db_error)?),
                })
            })
            .collect()
    }
}
