//! [`DeliveryRecord`] for both stores (`migrations/sqlite/0017_deliveries.sql`): one upsert per
//! record (on SQLite grouped with the records made meanwhile); rows older than [`KEPT_MILLIS`]
//! are deleted now and then (at most every [`PRUNE_EVERY_MILLIS`] per process), so the table
//! holds about two days of deliveries however long the deployment runs, without a second
//! statement per reply.

use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};
use switchboard_channels::delivery::{DeliveryRecord, RecordError, Sent};

use super::Backend;
use crate::store::postgres::PostgresStore;
use crate::store::sqlite::SqliteStore;
use crate::store::values::now_millis;

/// How long a delivery is remembered: far beyond any redelivery (replies older than
/// `bus_options.outbound_max_age_secs`, an hour by default, are not sent at all).
const KEPT_MILLIS: i64 = 2 * 24 * 3600 * 1000;

/// How often a process deletes the old rows.
const PRUNE_EVERY_MILLIS: i64 = 10 * 60 * 1000;

/// Records one message's progress (the newer record of a message replaces the older).
pub(in crate::store) const RECORD_ONE: &str = "INSERT INTO deliveries (channel, id, steps, recorded_at) \
     VALUES ($1, $2, $3, $4) \
     ON CONFLICT (channel, id) DO UPDATE SET steps = excluded.steps, recorded_at = excluded.recorded_at";

/// How far one message got.
pub(in crate::store) const SENT_ONE: &str = "SELECT steps FROM deliveries WHERE channel = $1 AND id = $2";

/// `steps` for a message sent whole.
const ALL: i64 = -1;

/// When this process last deleted old rows (unix ms); shared by every store in the process,
/// as the rows are the database's, not a handle's.
static LAST_PRUNED: AtomicI64 = AtomicI64::new(0);

/// True when it is this caller's turn to delete the old rows.
fn prune_due(now: i64) -> bool {
    let last = LAST_PRUNED.load(Ordering::Relaxed);
    now - last >= PRUNE_EVERY_MILLIS
        && LAST_PRUNED.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
}

fn failed(err: sqlx::Error) -> RecordError {
    RecordError(err.to_string())
}

fn encode(sent: Sent) -> i64 {
    match sent {
        Sent::All => ALL,
        Sent::Steps(done) => i64::try_from(done).unwrap_or(i64::MAX),
    }
}

pub(in crate::store) fn decode(steps: i64) -> Sent {
    usize::try_from(steps).map_or(Sent::All, Sent::Steps)
}

/// The step a message reached on `channel` as `id`, if any.
async fn sent<B>(store: &B, channel: &str, id: &str) -> Result<Option<Sent>, RecordError>
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'r> (i64,): FromRow<'r, <B::Db as Database>::Row>,
{
    let steps: Option<i64> =
        sqlx::query_scalar(SENT_ONE).bind(channel).bind(id).fetch_optional(store.pool()).await.map_err(failed)?;
    Ok(steps.map(decode))
}

/// Records that `id` reached `sent` on `channel`, deleting old rows when it is this process's turn.
async fn record_sent<B>(store: &B, channel: &str, id: &str, sent: Sent) -> Result<(), RecordError>
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
{
    sqlx::query(RECORD_ONE)
        .bind(channel)
        .bind(id)
        .bind(encode(sent))
        .bind(now_millis())
        .execute(store.write_pool())
        .await
        .map_err(failed)?;
    prune_old(store).await
}

/// Deletes the rows older than [`KEPT_MILLIS`] when it is this process's turn.
async fn prune_old<B>(store: &B) -> Result<(), RecordError>
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
{
    let now = now_millis();
    if prune_due(now) {
        sqlx::query("DELETE FROM deliveries WHERE recorded_at < $1")
            .bind(now - KEPT_MILLIS)
            .execute(store.write_pool())
            .await
            .map_err(failed)?;
    }
    Ok(())
}

// `DeliveryRecord` is another crate's trait, so each store implements it, with the queries above.
#[async_trait]
impl DeliveryRecord for SqliteStore {
    /// Grouped with the lookups the other deliveries make meanwhile (see `record_sent`).
    async fn sent(&self, channel: &str, id: &str) -> Result<Option<Sent>, RecordError> {
        let steps = self.sent_grouped(channel, id).await.map_err(|err| RecordError(err.to_string()))?;
        Ok(steps.map(decode))
    }

    /// Grouped with the records the other deliveries make meanwhile: every process's adapters
    /// finish their sends at once under load, and each record would be a round trip of its own
    /// to the one writer connection.
    async fn record_sent(&self, channel: &str, id: &str, steps: Sent) -> Result<(), RecordError> {
        self.record_sent_grouped(channel, id, encode(steps)).await.map_err(|err| RecordError(err.to_string()))?;
        prune_old(self).await
    }
}

#[async_trait]
impl DeliveryRecord for PostgresStore {
    async fn sent(&self, channel: &str, id: &str) -> Result<Option<Sent>, RecordError> {
        sent(self, channel, id).await
    }

    async fn record_sent(&self, channel: &str, id: &str, steps: Sent) -> Result<(), RecordError> {
        record_sent(self, channel, id, steps).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_rows_are_pruned_once_per_interval() {
        let now = LAST_PRUNED.load(Ordering::Relaxed) + PRUNE_EVERY_MILLIS;
        assert!(prune_due(now));
        assert!(!prune_due(now + 1), "not again within the interval");
        assert!(prune_due(now + PRUNE_EVERY_MILLIS));
    }

    #[test]
    fn progress_survives_the_round_trip() {
        for sent in [Sent::All, Sent::Steps(0), Sent::Steps(3)] {
            assert_eq!(decode(encode(sent)), sent);
        }
    }
}
