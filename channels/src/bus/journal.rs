//! The on-disk journal behind the in-process bus: messages are written before they are queued
//! and removed when acked, so what a process accepted survives a crash and is delivered after
//! the restart. The store implements it (SQLite in the embedded shape).

use async_trait::async_trait;
use bytes::Bytes;
use thiserror::Error;

use super::BusError;
use crate::contract::OutboundMessage;
use crate::subject::Flow;

#[derive(Debug, Error)]
#[error("bus journal: {0}")]
pub struct JournalError(pub String);

/// A journaled message that was not acked yet.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    pub seq: i64,
    pub flow: Flow,
    pub channel: String,
    pub subject: String,
    pub payload: Bytes,
}

/// A message to be journaled by a caller in its own transaction: when the journal is the
/// store's database, a worker writes its reply's record in the transaction that stores the
/// run (see [`StoreJournal`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JournalRecord {
    pub flow: Flow,
    pub channel: String,
    pub subject: String,
    pub dedupe_id: Option<String>,
    pub payload: Bytes,
}

#[async_trait]
pub trait Journal: Send + Sync + 'static {
    /// Writes a message durably. Returns its sequence number, or `None` when a message with
    /// the same dedupe id is still pending (then nothing is written).
    async fn append(
        &self,
        flow: Flow,
        channel: &str,
        subject: &str,
        dedupe_id: Option<&str>,
        payload: &[u8],
    ) -> Result<Option<i64>, JournalError>;

    /// Writes several messages, in order, as one write where the journal can; each one's
    /// sequence number as [`Journal::append`] gives it.
    async fn append_many(&self, records: &[JournalRecord]) -> Result<Vec<Option<i64>>, JournalError> {
        let mut seqs = Vec::with_capacity(records.len());
        for record in records {
            let dedupe_id = record.dedupe_id.as_deref();
            seqs.push(self.append(record.flow, &record.channel, &record.subject, dedupe_id, &record.payload).await?);
        }
        Ok(seqs)
    }

    /// Forgets an acked message.
    async fn remove(&self, seq: i64) -> Result<(), JournalError>;

    /// Every message not acked yet, oldest first.
    async fn pending(&self) -> Result<Vec<JournalEntry>, JournalError>;
}

/// A bus whose journal is the store's database (the in-process bus of the embedded shape,
/// see [`Bus::store_journal`](super::Bus::store_journal)). A consumer may then write its
/// reply's record and remove the message it answered in the transaction that stores its own
/// work, instead of in transactions of their own, and tell the bus afterwards.
#[async_trait]
pub trait StoreJournal: Send + Sync {
    /// The record that publishing `msg` would write, checked as a publish would check it.
    fn outbound_record(&self, msg: &OutboundMessage) -> Result<JournalRecord, BusError>;

    /// The caller's transaction removed the journal row of the delivery at stream position
    /// `answered` (its ack then writes nothing) and wrote `reply`'s record as row `seq` (now
    /// queued, waiting for room like a publish).
    async fn committed(&self, answered: Option<u64>, reply: Option<(JournalRecord, i64)>) -> Result<(), BusError>;
}
