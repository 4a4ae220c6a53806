//! [`DeliveryRecord`] for both stores (`migrations/sqlite/0017_deliveries.sql`): one upsert per
//! record; rows older than [`KEPT_MILLIS`] are deleted now and then (at most every
//! [`PRUNE_EVERY_MILLIS`] per process), so the table holds about two days of deliveries however
//! long the deployment runs, without a second statement per reply.

use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use switchboard_channels::delivery::{DeliveryRecord, RecordError, Sent};

use crate::store::values::now_millis;

/// How long a delivery is remembered: far beyond any redelivery (replies older than
/// `bus_options.outbound_max_age_secs`, an hour by default, are not sent at all).
const KEPT_MILLIS: i64 = 2 * 24 * 3600 * 1000;

/// How often a process deletes the old rows.
const PRUNE_EVERY_MILLIS: i64 = 10 * 60 * 1000;

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

fn decode(steps: i64) -> Sent {
    usize::try_from(steps).map_or(Sent::All, Sent::Steps)
}

/// The same queries serve both stores; only sqlx's types differ, hence a macro.
macro_rules! delivery_record {
    ($store:ty) => {
        #[async_trait]
        impl DeliveryRecord for $store {
            async fn sent(&self, channel: &str, id: &str) -> Result<Option<Sent>, RecordError> {
                let steps: Option<i64> = sqlx::query_scalar("SELECT steps FROM deliveries WHERE channel = $1 AND id = $2")
                    .bind(channel)
                    .bind(id)
                    .fetch_optional(self.pool())
                    .await
                    .map_err(failed)?;
                Ok(steps.map(decode))
            }

            async fn record_sent(&self, channel: &str, id: &str, sent: Sent) -> Result<(), RecordError> {
                let now = now_millis();
                sqlx::query(
                    "INSERT INTO deliveries (channel, id, steps, recorded_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (channel, id) DO UPDATE SET steps = excluded.steps, recorded_at = excluded.recorded_at",
                )
                .bind(channel)
                .bind(id)
                .bind(encode(sent))
                .bind(now)
                .execute(self.write_pool())
                .await
                .map_err(failed)?;
                if prune_due(now) {
                    sqlx::query("DELETE FROM deliveries WHERE recorded_at < $1")
                        .bind(now - KEPT_MILLIS)
                        .execute(self.write_pool())
                        .await
                        .map_err(failed)?;
                }
                Ok(())
            }
        }
    };
}

delivery_record!(crate::store::sqlite::SqliteStore);
delivery_record!(crate::store::postgres::PostgresStore);

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
