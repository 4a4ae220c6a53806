//! The in-process bus's journal on SQLite (see `switchboard_channels::bus::journal`), and the
//! reading of its rows, which the PostgreSQL store's journal shares.

use async_trait::async_trait;
use bytes::Bytes;
use sqlx::{ColumnIndex, Decode, Row, Type};
use switchboard_channels::bus::journal::{Journal, JournalEntry, JournalError, JournalRecord};
use switchboard_channels::subject::Flow;

use super::sqlite::SqliteStore;
use super::values::flow_name;

pub(super) fn db_error(err: sqlx::Error) -> JournalError {
    JournalError(err.to_string())
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
        // Refused here, not in the group's statement, where it would fail the others too.
        flow_name(flow)?;
        let record = JournalRecord {
            flow,
            channel: channel.to_owned(),
            subject: subject.to_owned(),
            dedupe_id: dedupe_id.map(str::to_owned),
            payload: Bytes::copy_from_slice(payload),
        };
        let seqs = self.append_journaled(vec![record]).await.map_err(JournalError)?;
        Ok(seqs.into_iter().next().flatten())
    }

    async fn append_many(&self, records: &[JournalRecord]) -> Result<Vec<Option<i64>>, JournalError> {
        for record in records {
            flow_name(record.flow)?;
        }
        self.append_journaled(records.to_vec()).await.map_err(JournalError)
    }

    async fn remove(&self, seq: i64) -> Result<(), JournalError> {
        self.remove_journaled(seq).await.map_err(JournalError)
    }

    async fn pending(&self) -> Result<Vec<JournalEntry>, JournalError> {
        let rows = sqlx::query("SELECT seq, flow, channel, subject, payload FROM bus_journal ORDER BY seq")
            .fetch_all(self.pool())
            .await
            .map_err(db_error)?;
        entries(&rows)
    }
}

/// The journal's rows as entries, from either store.
pub(super) fn entries<R>(rows: &[R]) -> Result<Vec<JournalEntry>, JournalError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
{
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
