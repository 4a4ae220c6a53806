//! [`PairingStore`] and the owner's pairing operations for both stores
//! (`migrations/sqlite/0007_pairing.sql`).
//!
//! Every read-then-write runs in the store's write transaction (`begin_write`), so two
//! messages of one stranger arriving at once get the same code, and the pending cap cannot be
//! overrun.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Transaction;
use switchboard_channels::pairing::{PairingError, PairingRequest, PairingStore};

use crate::config::{Identity, Level};
use crate::store::StoreError;
use crate::store::pairing::{
    ApprovedPairing, CodeProblem, DeniedPairing, PairingAdmin, PairingEntry, PairingState, RandomSourceError,
    SenderApproval, generate_code, normalize_code,
};
use crate::store::values::{from_millis, now_millis};

/// How long requests are kept after they expire: approving such a code says "expired"
/// rather than "unknown". Used codes expire too, so they go the same way.
const KEEP_EXPIRED: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest a code may live; a longer `ttl` is cut to this (and stays a valid time).
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Fresh codes tried when one is taken; with 2^40 codes one retry is already unlikely.
const CODE_ATTEMPTS: usize = 5;

/// The same queries serve both stores; only sqlx's types differ, hence a macro, expanded in a
/// module per store.
macro_rules! pairing_store {
    ($module:ident, $store:ty, $db:ty) => {
        pub(super) mod $module {
            #[allow(clippy::wildcard_imports)]
            use super::*;

            #[async_trait]
            impl PairingStore for $store {
                async fn is_approved(&self, channel: &str, sender_id: &str) -> Result<bool, PairingError> {
                    sqlx::query_scalar(
                        "SELECT EXISTS (SELECT 1 FROM pairing_approvals WHERE channel = $1 AND sender_id = $2)",
                    )
                    .bind(channel)
                    .bind(sender_id)
                    .fetch_one(self.pool())
                    .await
                    .map_err(|e| PairingError::Store(StoreError::from(e).to_string()))
                }

                async fn request(
                    &self,
                    channel: &str,
                    sender_id: &str,
                    sender_name: &str,
                    ttl: Duration,
                    max_pending: usize,
                ) -> Result<Option<PairingRequest>, PairingError> {
                    let sender = Sender { channel, id: sender_id, name: sender_name };
                    self.request_code(&sender, ttl, max_pending).await.map_err(|e| PairingError::Store(e.to_string()))
                }
            }

            /// Who asks for a code.
            struct Sender<'a> {
                channel: &'a str,
                id: &'a str,
                name: &'a str,
            }

            impl $store {
                async fn request_code(
                    &self,
                    sender: &Sender<'_>,
                    ttl: Duration,
                    max_pending: usize,
                ) -> Result<Option<PairingRequest>, StoreError> {
                    let mut tx = self.begin_write().await?;
                    let now = now_millis();
                    prune(&mut tx, now).await?;
                    let request = match valid_code(&mut tx, sender, now).await? {
                        Some((code, expires_at)) => Some(PairingRequest { code, expires_at: from_millis(expires_at)?, new: false }),
                        // Denied: not asked again until the denial is pruned.
                        None if denied_recently(&mut tx, sender).await? => None,
                        // The sender has no valid code, so every valid one is another sender's.
                        None if pending_count(&mut tx, sender.channel, now).await? >= max_pending => None,
                        None => {
                            let expires_at = now.saturating_add(millis(ttl.min(MAX_TTL)));
                            let code = insert_code(&mut tx, sender, now, expires_at).await?;
                            Some(PairingRequest { code, expires_at: from_millis(expires_at)?, new: true })
                        }
                    };
                    tx.commit().await?;
                    Ok(request)
                }
            }

            #[async_trait]
            impl PairingAdmin for $store {
                async fn approve_pairing(
                    &self,
                    channel: &str,
                    code: &str,
                    level: Level,
                    decided_by: &str,
                ) -> Result<ApprovedPairing, StoreError> {
                    let code = normalize_code(code);
                    let mut tx = self.begin_write().await?;
                    let now = now_millis();
                    let (sender_id, sender_name) = open_request(&mut tx, channel, &code, now).await?;
                    let sender = Sender { channel, id: &sender_id, name: &sender_name };
                    approve(&mut tx, &sender, now).await?;
                    record_decision(&mut tx, channel, &code, "approved", decided_by).await?;
                    let user = <$db as crate::store::shared::users::UserRows>::raise_level(&mut tx, &Identity::new(channel, &sender_id), &sender_name, level).await?;
                    tx.commit().await?;
                    Ok(ApprovedPairing { channel: channel.to_owned(), sender_id, sender_name, level: user.level })
                }

                async fn deny_pairing(&self, channel: &str, code: &str, decided_by: &str) -> Result<DeniedPairing, StoreError> {
                    let code = normalize_code(code);
                    let mut tx = self.begin_write().await?;
                    let now = now_millis();
                    let (sender_id, sender_name) = open_request(&mut tx, channel, &code, now).await?;
                    sqlx::query(
                        "UPDATE pairing_requests SET used_at = $3 \
                         WHERE channel = $1 AND sender_id = $2 AND used_at IS NULL AND expires_at > $3",
                    )
                    .bind(channel)
                    .bind(&sender_id)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                    record_decision(&mut tx, channel, &code, "denied", decided_by).await?;
                    tx.commit().await?;
                    Ok(DeniedPairing { channel: channel.to_owned(), sender_id, sender_name })
                }

                async fn approve_sender(
                    &self,
                    channel: &str,
                    sender_id: &str,
                    sender_name: &str,
                    level: Level,
                ) -> Result<SenderApproval, StoreError> {
                    let mut tx = self.begin_write().await?;
                    let added = approve(&mut tx, &Sender { channel, id: sender_id, name: sender_name }, now_millis()).await?;
                    let user = <$db as crate::store::shared::users::UserRows>::raise_level(&mut tx, &Identity::new(channel, sender_id), sender_name, level).await?;
                    tx.commit().await?;
                    Ok(SenderApproval { added, level: user.level })
                }

                async fn revoke_pairing(&self, channel: &str, sender_id: &str) -> Result<bool, StoreError> {
                    let deleted = sqlx::query("DELETE FROM pairing_approvals WHERE channel = $1 AND sender_id = $2")
                        .bind(channel)
                        .bind(sender_id)
                        .execute(self.pool())
                        .await?
                        .rows_affected();
                    Ok(deleted == 1)
                }

                async fn list_pairings(&self, channel: Option<&str>) -> Result<Vec<PairingEntry>, StoreError> {
                    // One read transaction: both lists from the same snapshot.
                    let mut tx = self.pool().begin().await?;
                    let pending: Vec<(String, String, String, String, i64)> = sqlx::query_as(
                        "SELECT channel, sender_id, sender_name, code, expires_at FROM pairing_requests \
                         WHERE used_at IS NULL AND expires_at > $1 AND ($2 IS NULL OR channel = $2) \
                         ORDER BY channel, expires_at, sender_id",
                    )
                    .bind(now_millis())
                    .bind(channel)
                    .fetch_all(&mut *tx)
                    .await?;
                    let approved: Vec<(String, String, String, i64)> = sqlx::query_as(
                        "SELECT channel, sender_id, sender_name, approved_at FROM pairing_approvals \
                         WHERE $1 IS NULL OR channel = $1 ORDER BY channel, approved_at, sender_id",
                    )
                    .bind(channel)
                    .fetch_all(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    let pending = pending.into_iter().map(|(channel, sender_id, sender_name, code, expires_at)| {
                        let state = PairingState::Pending { code, expires_at: from_millis(expires_at)? };
                        Ok(PairingEntry { channel, sender_id, sender_name, state })
                    });
                    let approved = approved.into_iter().map(|(channel, sender_id, sender_name, approved_at)| {
                        let state = PairingState::Approved { approved_at: from_millis(approved_at)? };
                        Ok(PairingEntry { channel, sender_id, sender_name, state })
                    });
                    pending.chain(approved).collect()
                }
            }

            /// The sender of the request `code`, if it is still open (not decided, not expired).
            async fn open_request(
                tx: &mut Transaction<'_, $db>,
                channel: &str,
                code: &str,
                now: i64,
            ) -> Result<(String, String), StoreError> {
                let row: Option<(String, String, i64, Option<i64>)> = sqlx::query_as(
                    "SELECT sender_id, sender_name, expires_at, used_at FROM pairing_requests \
                     WHERE channel = $1 AND code = $2",
                )
                .bind(channel)
                .bind(code)
                .fetch_optional(&mut **tx)
                .await?;
                let refuse = |problem| StoreError::PairingCode { channel: channel.to_owned(), code: code.to_owned(), problem };
                match row {
                    None => Err(refuse(CodeProblem::Unknown)),
                    Some((_, _, _, Some(_))) => Err(refuse(CodeProblem::Used)),
                    Some((_, _, expires_at, None)) if expires_at <= now => Err(refuse(CodeProblem::Expired)),
                    Some((sender_id, sender_name, _, None)) => Ok((sender_id, sender_name)),
                }
            }

            async fn record_decision(
                tx: &mut Transaction<'_, $db>,
                channel: &str,
                code: &str,
                decision: &str,
                decided_by: &str,
            ) -> Result<(), StoreError> {
                sqlx::query("UPDATE pairing_requests SET decision = $3, decided_by = $4 WHERE channel = $1 AND code = $2")
                    .bind(channel)
                    .bind(code)
                    .bind(decision)
                    .bind(decided_by)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }

            /// Whether the owner denied the sender and the denied request is still kept.
            async fn denied_recently(tx: &mut Transaction<'_, $db>, sender: &Sender<'_>) -> Result<bool, StoreError> {
                Ok(sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM pairing_requests \
                     WHERE channel = $1 AND sender_id = $2 AND decision = 'denied')",
                )
                .bind(sender.channel)
                .bind(sender.id)
                .fetch_one(&mut **tx)
                .await?)
            }

            /// Deletes requests that expired more than [`KEEP_EXPIRED`] ago, on every channel.
            async fn prune(tx: &mut Transaction<'_, $db>, now: i64) -> Result<(), StoreError> {
                sqlx::query("DELETE FROM pairing_requests WHERE expires_at < $1")
                    .bind(now.saturating_sub(millis(KEEP_EXPIRED)))
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }

            /// The sender's unused, unexpired code and when it expires.
            async fn valid_code(
                tx: &mut Transaction<'_, $db>,
                sender: &Sender<'_>,
                now: i64,
            ) -> Result<Option<(String, i64)>, StoreError> {
                Ok(sqlx::query_as(
                    "SELECT code, expires_at FROM pairing_requests \
                     WHERE channel = $1 AND sender_id = $2 AND used_at IS NULL AND expires_at > $3 \
                     ORDER BY expires_at DESC LIMIT 1",
                )
                .bind(sender.channel)
                .bind(sender.id)
                .bind(now)
                .fetch_optional(&mut **tx)
                .await?)
            }

            /// How many unused, unexpired codes the channel has.
            async fn pending_count(tx: &mut Transaction<'_, $db>, channel: &str, now: i64) -> Result<usize, StoreError> {
                let count: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM pairing_requests WHERE channel = $1 AND used_at IS NULL AND expires_at > $2",
                )
                .bind(channel)
                .bind(now)
                .fetch_one(&mut **tx)
                .await?;
                usize::try_from(count).map_err(|_| StoreError::Corrupt(format!("pending pairing count is negative: {count}")))
            }

            /// Stores a fresh code for the sender, drawing another if the channel has it already.
            async fn insert_code(
                tx: &mut Transaction<'_, $db>,
                sender: &Sender<'_>,
                now: i64,
                expires_at: i64,
            ) -> Result<String, StoreError> {
                for _ in 0..CODE_ATTEMPTS {
                    let code = generate_code()?;
                    let inserted = sqlx::query(
                        "INSERT INTO pairing_requests (channel, code, sender_id, sender_name, created_at, expires_at) \
                         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (channel, code) DO NOTHING",
                    )
                    .bind(sender.channel)
                    .bind(&code)
                    .bind(sender.id)
                    .bind(sender.name)
                    .bind(now)
                    .bind(expires_at)
                    .execute(&mut **tx)
                    .await?
                    .rows_affected();
                    if inserted == 1 {
                        return Ok(code);
                    }
                }
                Err(RandomSourceError(format!("{CODE_ATTEMPTS} fresh pairing codes in a row were taken already")).into())
            }

            /// Adds the approval (false if there was one) and marks the sender's valid codes used.
            async fn approve(tx: &mut Transaction<'_, $db>, sender: &Sender<'_>, now: i64) -> Result<bool, StoreError> {
                let added = sqlx::query(
                    "INSERT INTO pairing_approvals (channel, sender_id, sender_name, approved_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (channel, sender_id) DO NOTHING",
                )
                .bind(sender.channel)
                .bind(sender.id)
                .bind(sender.name)
                .bind(now)
                .execute(&mut **tx)
                .await?
                .rows_affected();
                sqlx::query(
                    "UPDATE pairing_requests SET used_at = $3 \
                     WHERE channel = $1 AND sender_id = $2 AND used_at IS NULL AND expires_at > $3",
                )
                .bind(sender.channel)
                .bind(sender.id)
                .bind(now)
                .execute(&mut **tx)
                .await?;
                Ok(added == 1)
            }
        }
    };
}

pairing_store!(sqlite, crate::store::sqlite::SqliteStore, sqlx::Sqlite);
pairing_store!(postgres, crate::store::postgres::PostgresStore, sqlx::Postgres);

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
