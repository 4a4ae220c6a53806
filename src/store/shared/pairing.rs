//! [`PairingStore`] and the owner's pairing operations for both stores
//! (`migrations/sqlite/0007_pairing.sql`).
//!
//! Every read-then-write runs in the store's write transaction (`begin_write`), so two
//! messages of one stranger arriving at once get the same code, and the pending cap cannot be
//! overrun.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};
use switchboard_channels::pairing::{PairingError, PairingRequest, PairingStore};

use super::users::UserRows;
use super::{Backend, RowsAffected};
use crate::config::{Identity, Level};
use crate::store::StoreError;
use crate::store::pairing::{
    ApprovedPairing, CodeProblem, DeniedPairing, KEEP_DECISIONS, PairingAdmin, PairingDecision, PairingEntry,
    PairingState, RandomSourceError, SenderApproval, generate_code, normalize_code,
};
use crate::store::postgres::PostgresStore;
use crate::store::sqlite::SqliteStore;
use crate::store::values::{duration_millis, from_millis, now_millis, sql_limit};

/// How long undecided requests are kept after they expire: approving such a code says
/// "expired" rather than "unknown". Decided ones are kept [`KEEP_DECISIONS`] after the decision,
/// but a denial keeps the sender from a new code only this long after the code's expiry.
const KEEP_EXPIRED: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest a code may live; a longer `ttl` is cut to this (and stays a valid time).
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Fresh codes tried when one is taken; with 2^40 codes one retry is already unlikely.
const CODE_ATTEMPTS: usize = 5;

// `PairingStore` is the channels crate's trait, so it cannot be implemented for every `Backend`
// at once (a foreign trait needs a local type): each store's implementation hands over.

#[async_trait]
impl PairingStore for SqliteStore {
    async fn is_approved(&self, channel: &str, sender_id: &str) -> Result<bool, PairingError> {
        is_approved(self, channel, sender_id).await
    }

    async fn request(
        &self,
        channel: &str,
        sender_id: &str,
        sender_name: &str,
        ttl: Duration,
        max_pending: usize,
    ) -> Result<Option<PairingRequest>, PairingError> {
        request(self, &Sender { channel, id: sender_id, name: sender_name }, ttl, max_pending).await
    }
}

#[async_trait]
impl PairingStore for PostgresStore {
    async fn is_approved(&self, channel: &str, sender_id: &str) -> Result<bool, PairingError> {
        is_approved(self, channel, sender_id).await
    }

    async fn request(
        &self,
        channel: &str,
        sender_id: &str,
        sender_name: &str,
        ttl: Duration,
        max_pending: usize,
    ) -> Result<Option<PairingRequest>, PairingError> {
        request(self, &Sender { channel, id: sender_id, name: sender_name }, ttl, max_pending).await
    }
}

/// Who asks for a code.
struct Sender<'a> {
    channel: &'a str,
    id: &'a str,
    name: &'a str,
}

async fn is_approved<B>(store: &B, channel: &str, sender_id: &str) -> Result<bool, PairingError>
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'r> (bool,): FromRow<'r, <B::Db as Database>::Row>,
{
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pairing_approvals WHERE channel = $1 AND sender_id = $2)")
        .bind(channel)
        .bind(sender_id)
        .fetch_one(store.pool())
        .await
        .map_err(|e| PairingError::Store(StoreError::from(e).to_string()))
}

/// The sender's valid code, or a new one unless the sender was denied or the channel has
/// `max_pending` codes out already.
async fn request<B>(
    store: &B,
    sender: &Sender<'_>,
    ttl: Duration,
    max_pending: usize,
) -> Result<Option<PairingRequest>, PairingError>
where
    B: Backend,
    B::Db: PairingRows,
{
    request_code(store, sender, ttl, max_pending).await.map_err(|e| PairingError::Store(e.to_string()))
}

async fn request_code<B>(
    store: &B,
    sender: &Sender<'_>,
    ttl: Duration,
    max_pending: usize,
) -> Result<Option<PairingRequest>, StoreError>
where
    B: Backend,
    B::Db: PairingRows,
{
    let mut tx = store.begin_write().await?;
    let now = now_millis();
    B::Db::prune(&mut tx, now).await?;
    let request = match B::Db::valid_code(&mut tx, sender, now).await? {
        Some((code, expires_at)) => Some(PairingRequest { code, expires_at: from_millis(expires_at)?, new: false }),
        // Denied: not asked again until a day after the denied code's expiry.
        None if B::Db::denied_recently(&mut tx, sender, now).await? => None,
        // The sender has no valid code, so every valid one is another sender's.
        None if B::Db::pending_count(&mut tx, sender.channel, now).await? >= max_pending => None,
        None => {
            let expires_at = now.saturating_add(duration_millis(ttl.min(MAX_TTL)));
            let code = B::Db::insert_code(&mut tx, sender, now, expires_at).await?;
            Some(PairingRequest { code, expires_at: from_millis(expires_at)?, new: true })
        }
    };
    tx.commit().await?;
    Ok(request)
}

#[async_trait]
impl<B> PairingAdmin for B
where
    B: Backend,
    B::Db: PairingRows + UserRows,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::QueryResult: RowsAffected,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
{
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
        let (sender_id, sender_name) = B::Db::open_request(&mut tx, channel, &code, now).await?;
        let sender = Sender { channel, id: &sender_id, name: &sender_name };
        B::Db::approve(&mut tx, &sender, now).await?;
        B::Db::record_decision(&mut tx, channel, &code, "approved", decided_by).await?;
        let user = B::Db::raise_level(&mut tx, &Identity::new(channel, &sender_id), &sender_name, level).await?;
        tx.commit().await?;
        Ok(ApprovedPairing { channel: channel.to_owned(), sender_id, sender_name, level: user.level })
    }

    async fn deny_pairing(&self, channel: &str, code: &str, decided_by: &str) -> Result<DeniedPairing, StoreError> {
        let code = normalize_code(code);
        let mut tx = self.begin_write().await?;
        let now = now_millis();
        let (sender_id, sender_name) = B::Db::open_request(&mut tx, channel, &code, now).await?;
        B::Db::mark_used(&mut tx, &Sender { channel, id: &sender_id, name: &sender_name }, now).await?;
        B::Db::record_decision(&mut tx, channel, &code, "denied", decided_by).await?;
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
        let added =
            B::Db::approve(&mut tx, &Sender { channel, id: sender_id, name: sender_name }, now_millis()).await?;
        let user = B::Db::raise_level(&mut tx, &Identity::new(channel, sender_id), sender_name, level).await?;
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
        let entries = B::Db::entries(&mut tx, channel).await?;
        tx.commit().await?;
        Ok(entries)
    }

    async fn pairing_decisions(&self, channel: Option<&str>, limit: usize) -> Result<Vec<PairingDecision>, StoreError> {
        let mut conn = self.pool().acquire().await?;
        B::Db::decisions(&mut conn, channel, limit).await
    }
}

/// The pairing statements that run inside a write transaction, written once for every
/// database whose sqlx types they need (both stores').
trait PairingRows: Database {
    /// The sender of the request `code`, if it is still open (not decided, not expired).
    fn open_request(
        conn: &mut Self::Connection,
        channel: &str,
        code: &str,
        now: i64,
    ) -> impl Future<Output = Result<(String, String), StoreError>> + Send;

    fn record_decision(
        conn: &mut Self::Connection,
        channel: &str,
        code: &str,
        decision: &str,
        decided_by: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether the owner denied the sender a code that expired less than [`KEEP_EXPIRED`] ago.
    fn denied_recently(
        conn: &mut Self::Connection,
        sender: &Sender<'_>,
        now: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes undecided requests that expired more than [`KEEP_EXPIRED`] ago and decided ones
    /// decided more than [`KEEP_DECISIONS`] ago, on every channel.
    fn prune(conn: &mut Self::Connection, now: i64) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The sender's unused, unexpired code and when it expires.
    fn valid_code(
        conn: &mut Self::Connection,
        sender: &Sender<'_>,
        now: i64,
    ) -> impl Future<Output = Result<Option<(String, i64)>, StoreError>> + Send;

    /// How many unused, unexpired codes the channel has.
    fn pending_count(
        conn: &mut Self::Connection,
        channel: &str,
        now: i64,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Stores a fresh code for the sender, drawing another if the channel has it already.
    fn insert_code(
        conn: &mut Self::Connection,
        sender: &Sender<'_>,
        now: i64,
        expires_at: i64,
    ) -> impl Future<Output = Result<String, StoreError>> + Send;

    /// Adds the approval (false if there was one) and marks the sender's valid codes used.
    fn approve(
        conn: &mut Self::Connection,
        sender: &Sender<'_>,
        now: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Marks the sender's valid codes used.
    fn mark_used(
        conn: &mut Self::Connection,
        sender: &Sender<'_>,
        now: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Senders waiting with a valid code, then approved senders, on `channel` or on every one.
    fn entries(
        conn: &mut Self::Connection,
        channel: Option<&str>,
    ) -> impl Future<Output = Result<Vec<PairingEntry>, StoreError>> + Send;

    /// The newest `limit` decided requests, newest first.
    fn decisions(
        conn: &mut Self::Connection,
        channel: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<PairingDecision>, StoreError>> + Send;
}

impl<DB> PairingRows for DB
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::QueryResult: RowsAffected,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> (bool,): FromRow<'r, DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (String, i64): FromRow<'r, DB::Row>,
    for<'r> (String, String, i64, Option<i64>): FromRow<'r, DB::Row>,
    for<'r> (String, String, String, String, i64): FromRow<'r, DB::Row>,
    for<'r> (String, String, String, i64): FromRow<'r, DB::Row>,
    for<'r> (String, String, String, String, String, String, i64): FromRow<'r, DB::Row>,
{
    async fn open_request(
        conn: &mut DB::Connection,
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
        .fetch_optional(&mut *conn)
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
        conn: &mut DB::Connection,
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
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    async fn denied_recently(conn: &mut DB::Connection, sender: &Sender<'_>, now: i64) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pairing_requests \
             WHERE channel = $1 AND sender_id = $2 AND decision = 'denied' AND expires_at >= $3)",
        )
        .bind(sender.channel)
        .bind(sender.id)
        .bind(now.saturating_sub(duration_millis(KEEP_EXPIRED)))
        .fetch_one(&mut *conn)
        .await?)
    }

    async fn prune(conn: &mut DB::Connection, now: i64) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM pairing_requests WHERE (decision IS NULL AND expires_at < $1) \
             OR (decision IS NOT NULL AND used_at < $2)",
        )
        .bind(now.saturating_sub(duration_millis(KEEP_EXPIRED)))
        .bind(now.saturating_sub(duration_millis(KEEP_DECISIONS)))
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    async fn valid_code(
        conn: &mut DB::Connection,
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
        .fetch_optional(&mut *conn)
        .await?)
    }

    async fn pending_count(conn: &mut DB::Connection, channel: &str, now: i64) -> Result<usize, StoreError> {
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pairing_requests WHERE channel = $1 AND used_at IS NULL AND expires_at > $2",
        )
        .bind(channel)
        .bind(now)
        .fetch_one(&mut *conn)
        .await?;
        usize::try_from(count).map_err(|_| StoreError::Corrupt(format!("pending pairing count is negative: {count}")))
    }

    async fn insert_code(
        conn: &mut DB::Connection,
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
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if inserted == 1 {
                return Ok(code);
            }
        }
        Err(RandomSourceError(format!("{CODE_ATTEMPTS} fresh pairing codes in a row were taken already")).into())
    }

    async fn approve(conn: &mut DB::Connection, sender: &Sender<'_>, now: i64) -> Result<bool, StoreError> {
        let added = sqlx::query(
            "INSERT INTO pairing_approvals (channel, sender_id, sender_name, approved_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (channel, sender_id) DO NOTHING",
        )
        .bind(sender.channel)
        .bind(sender.id)
        .bind(sender.name)
        .bind(now)
        .execute(&mut *conn)
        .await?
        .rows_affected();
        Self::mark_used(conn, sender, now).await?;
        Ok(added == 1)
    }

    async fn mark_used(conn: &mut DB::Connection, sender: &Sender<'_>, now: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE pairing_requests SET used_at = $3 \
             WHERE channel = $1 AND sender_id = $2 AND used_at IS NULL AND expires_at > $3",
        )
        .bind(sender.channel)
        .bind(sender.id)
        .bind(now)
        .execute(conn)
        .await?;
        Ok(())
    }

    async fn entries(conn: &mut DB::Connection, channel: Option<&str>) -> Result<Vec<PairingEntry>, StoreError> {
        let pending: Vec<(String, String, String, String, i64)> = sqlx::query_as(
            "SELECT channel, sender_id, sender_name, code, expires_at FROM pairing_requests \
             WHERE used_at IS NULL AND expires_at > $1 AND ($2 IS NULL OR channel = $2) \
             ORDER BY channel, expires_at, sender_id",
        )
        .bind(now_millis())
        .bind(channel)
        .fetch_all(&mut *conn)
        .await?;
        let approved: Vec<(String, String, String, i64)> = sqlx::query_as(
            "SELECT channel, sender_id, sender_name, approved_at FROM pairing_approvals \
             WHERE $1 IS NULL OR channel = $1 ORDER BY channel, approved_at, sender_id",
        )
        .bind(channel)
        .fetch_all(&mut *conn)
        .await?;
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

    async fn decisions(
        conn: &mut DB::Connection,
        channel: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PairingDecision>, StoreError> {
        let rows: Vec<(String, String, String, String, String, String, i64)> = sqlx::query_as(
            "SELECT channel, sender_id, sender_name, code, decision, COALESCE(decided_by, ''), used_at \
             FROM pairing_requests WHERE decision IS NOT NULL AND used_at IS NOT NULL \
             AND ($1 IS NULL OR channel = $1) ORDER BY used_at DESC, code LIMIT $2",
        )
        .bind(channel)
        .bind(sql_limit(limit))
        .fetch_all(&mut *conn)
        .await?;
        rows.into_iter()
            .map(|(channel, sender_id, sender_name, code, decision, decided_by, decided_at)| {
                let decided_at = from_millis(decided_at)?;
                Ok(PairingDecision { channel, sender_id, sender_name, code, decision, decided_by, decided_at })
            })
            .collect()
    }
}
