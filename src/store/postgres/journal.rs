//! The in-process bus's journal in the PostgreSQL store, for `switchboard run` on a shared
//! database (see `switchboard_channels::bus::journal`). The rows are the SQLite store's
//! (`bus_journal`); the pending ones are read by `store::journal::pending`, shared by both.

use async_trait::async_trait;
use switchboard_channels::bus::journal::{Journal, JournalEntry, JournalError, JournalRecord};
use switchboard_channels::subject::Flow;

use super::PostgresStore;
use crate::store::journal::{db_error, entries};
use crate::store::values::{flow_name, now_millis};

/// Adds one row; `None` when a row with its dedupe id is still pending.
const APPEND: &str = "INSERT INTO bus_journal (flow, channel, subject, dedupe_id, payload, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (dedupe_id) DO NOTHING RETURNING seq";

#[async_trait]
impl Journal for PostgresStore {
    async fn append(
        &self,
        flow: Flow,
        channel: &str,
        subject: &str,
        dedupe_id: Option<&str>,
        payload: &[u8],
    ) -> Result<Option<i64>, JournalError> {
        sqlx::query_scalar(APPEND)
            .bind(flow_name(flow)?)
            .bind(channel)
            .bind(subject)
            .bind(dedupe_id)
            .bind(payload)
            .bind(now_millis())
            .fetch_optional(self.pool())
            .await
            .map_err(db_error)
    }

    async fn append_many(&self, records: &[JournalRecord]) -> Result<Vec<Option<i64>>, JournalError> {
        // One transaction, in order: the rows' seqs follow the records' order.
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let mut seqs = Vec::with_capacity(records.len());
        for record in records {
            let seq = sqlx::query_scalar(APPEND)
                .bind(flow_name(record.flow)?)
                .bind(&record.channel)
                .bind(&record.subject)
                .bind(record.dedupe_id.as_deref())
                .bind(record.payload.as_ref())
                .bind(now_millis())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
            seqs.push(seq);
        }
        tx.commit().await.map_err(db_error)?;
        Ok(seqs)
    }

    async fn remove(&self, seq: i64) -> Result<(), JournalError> {
        sqlx::query("DELETE FROM bus_journal WHERE seq = $1").bind(seq).execute(self.pool()).await.map_err(db_error)?;
        Ok(())
    }

    async fn pending(&self) -> Result<Vec<JournalEntry>, JournalError> {
        let rows = sqlx::query("SELECT seq, flow, channel, subject, payload FROM bus_journal ORDER BY seq")
            .fetch_all(self.pool())
            .await
            .map_err(db_error)?;
        entries(&rows)
    }
}
