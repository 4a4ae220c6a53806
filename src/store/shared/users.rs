//! [`UserStore`] for both stores: users, identities and monthly usage
//! (`migrations/sqlite/0003_users.sql`), and groups' monthly usage (`0012_group_usage.sql`).
//!
//! Every write runs in the store's write transaction (`begin_write`), so the check-then-insert
//! of a new user cannot interleave with another process doing the same. The statements that
//! run in a transaction are [`UserRows`], which the run and sub-agent finishes and pairing
//! approvals use in theirs.

use std::collections::BTreeMap;

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Row, Type};
use switchboard_channels::contract::Usage;

use super::{RowsAffected, TurnReads};
use crate::config::{Identity, Level};
use crate::store::StoreError;
use crate::store::users::{Billing, LinkOutcome, MonthCost, User, UserId, UserStore, UserSummary};
use crate::store::values::{from_millis, now_millis, to_i64, to_u64};

pub(in crate::store) const USER_COLUMNS: &str = "u.id, u.level, u.budget_tokens, u.created_at";

#[async_trait]
impl<B> UserStore for B
where
    B: TurnReads,
    B::Db: UserRows,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'r> (i64, i64, i64): FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (f64, i64): FromRow<'r, <B::Db as Database>::Row>,
{
    async fn resolve_user(
        &self,
        identity: &Identity,
        display_name: &str,
        new_level: Level,
    ) -> Result<User, StoreError> {
        // Almost every message comes from a known sender: look without taking the write lock.
        if let Some((user, stored_name)) = self.find_sender(identity).await? {
            if !display_name.is_empty() && stored_name != display_name {
                let mut conn = self.write_pool().acquire().await?;
                B::Db::rename(&mut conn, identity, display_name).await?;
            }
            return Ok(user);
        }
        let mut tx = self.begin_write().await?;
        let user = B::Db::ensure_user(&mut tx, identity, display_name, new_level).await?;
        tx.commit().await?;
        Ok(user)
    }

    async fn set_level(&self, identity: &Identity, level: Level) -> Result<User, StoreError> {
        let mut tx = self.begin_write().await?;
        let user = B::Db::ensure_user(&mut tx, identity, "", level).await?;
        B::Db::update_level(&mut tx, user.id, level).await?;
        tx.commit().await?;
        Ok(User { level, ..user })
    }

    async fn set_budget(&self, identity: &Identity, budget: Option<u64>, new_level: Level) -> Result<User, StoreError> {
        let mut tx = self.begin_write().await?;
        let user = B::Db::ensure_user(&mut tx, identity, "", new_level).await?;
        B::Db::update_budget(&mut tx, user.id, budget).await?;
        tx.commit().await?;
        Ok(User { budget, ..user })
    }

    async fn link(&self, first: &Identity, second: &Identity, new_level: Level) -> Result<LinkOutcome, StoreError> {
        let mut tx = self.begin_write().await?;
        let user = B::Db::ensure_user(&mut tx, first, "", new_level).await?;
        let outcome = match B::Db::find(&mut tx, second).await? {
            Some((other, _)) if other.id == user.id => LinkOutcome::AlreadyLinked { user },
            Some((merged, _)) => {
                B::Db::merge(&mut tx, merged.id, user.id).await?;
                LinkOutcome::Merged { user, merged }
            }
            None => {
                B::Db::insert_identity(&mut tx, second, "", user.id).await?;
                LinkOutcome::Linked { user }
            }
        };
        tx.commit().await?;
        Ok(outcome)
    }

    async fn monthly_usage(&self, user: UserId, month: &str) -> Result<Usage, StoreError> {
        let row: Option<(i64, i64, i64)> = sqlx::query_as(
            "SELECT input_tokens, output_tokens, cache_read_tokens FROM usage_monthly \
             WHERE user_id = $1 AND month = $2",
        )
        .bind(user.0)
        .bind(month)
        .fetch_optional(self.pool())
        .await?;
        row.map_or(Ok(Usage::default()), |(input, output, cached)| usage_with_cache(input, output, cached))
    }

    async fn group_usage(&self, group: &str, month: &str) -> Result<Usage, StoreError> {
        let row: Option<(i64, i64, i64)> = sqlx::query_as(
            "SELECT input_tokens, output_tokens, cache_read_tokens FROM group_usage_monthly \
             WHERE group_key = $1 AND month = $2",
        )
        .bind(group)
        .bind(month)
        .fetch_optional(self.pool())
        .await?;
        row.map_or(Ok(Usage::default()), |(input, output, cached)| usage_with_cache(input, output, cached))
    }

    async fn group_cost(&self, group: &str, month: &str) -> Result<MonthCost, StoreError> {
        let row: Option<(f64, i64)> = sqlx::query_as(
            "SELECT cost_usd, unpriced_tokens FROM group_usage_monthly WHERE group_key = $1 AND month = $2",
        )
        .bind(group)
        .bind(month)
        .fetch_optional(self.pool())
        .await?;
        row.map_or(Ok(MonthCost::default()), |(usd, unpriced)| month_cost(usd, unpriced))
    }

    async fn list_users(&self, month: &str) -> Result<Vec<UserSummary>, StoreError> {
        // One read transaction: users and identities from the same snapshot.
        let mut tx = self.pool().begin().await?;
        let summaries = B::Db::summaries(&mut tx, month).await?;
        tx.commit().await?;
        Ok(summaries)
    }
}

/// The users' statements that run on one connection, most of them inside a write transaction,
/// written once for every database whose sqlx types they need (both stores').
pub(in crate::store) trait UserRows: Database {
    /// The user behind `identity` and the display name stored with the identity.
    fn find(
        conn: &mut Self::Connection,
        identity: &Identity,
    ) -> impl Future<Output = Result<Option<(User, String)>, StoreError>> + Send;

    fn rename(
        conn: &mut Self::Connection,
        identity: &Identity,
        display_name: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The user behind `identity`, created at `level` if there is none. Call inside a write
    /// transaction.
    fn ensure_user(
        conn: &mut Self::Connection,
        identity: &Identity,
        display_name: &str,
        level: Level,
    ) -> impl Future<Output = Result<User, StoreError>> + Send;

    /// Gives the user `identity` belongs to at least `level` (an identity never seen gets a new
    /// user at `level`); a higher level is kept. Part of a pairing approval's transaction, so an
    /// approved sender is never left at the level of a stranger.
    fn raise_level(
        conn: &mut Self::Connection,
        identity: &Identity,
        display_name: &str,
        level: Level,
    ) -> impl Future<Output = Result<User, StoreError>> + Send;

    fn update_level(
        conn: &mut Self::Connection,
        user: UserId,
        level: Level,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    fn update_budget(
        conn: &mut Self::Connection,
        user: UserId,
        budget: Option<u64>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Adds an identity to a user; false if the identity exists already.
    fn insert_identity(
        conn: &mut Self::Connection,
        identity: &Identity,
        display_name: &str,
        user: UserId,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Moves everything of user `from` to user `into` and deletes `from`: its identities, and its
    /// usage added month by month (so a shared budget counts what both used).
    fn merge(
        conn: &mut Self::Connection,
        from: UserId,
        into: UserId,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every user with their identities and what they used in `month`.
    fn summaries(
        conn: &mut Self::Connection,
        month: &str,
    ) -> impl Future<Output = Result<Vec<UserSummary>, StoreError>> + Send;

    /// Adds a finished run's tokens and cost (`None`: unknown) to its user's month (and its
    /// group's, when it ran in a configured group), inside `finish_run`'s transaction, so a
    /// run is counted exactly when it is finished: never twice, never without its transcript.
    fn record_usage(
        conn: &mut Self::Connection,
        billing: &Billing,
        used: Usage,
        cost_usd: Option<f64>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl<DB> UserRows for DB
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::QueryResult: RowsAffected,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'a> String: Encode<'a, DB> + Decode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Decode<'a, DB> + Type<DB>,
    for<'a> f64: Encode<'a, DB> + Decode<'a, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    &'static str: ColumnIndex<DB::Row>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (i64, String, String, String): FromRow<'r, DB::Row>,
{
    async fn find(conn: &mut DB::Connection, identity: &Identity) -> Result<Option<(User, String)>, StoreError> {
        let sql = format!(
            "SELECT {USER_COLUMNS}, i.display_name FROM identities i JOIN users u ON u.id = i.user_id \
             WHERE i.channel = $1 AND i.sender_id = $2"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(&identity.channel)
            .bind(&identity.sender_id)
            .fetch_optional(conn)
            .await?;
        row.map(|row| Ok((user_from_row(&row)?, row.try_get("display_name")?))).transpose()
    }

    async fn rename(conn: &mut DB::Connection, identity: &Identity, display_name: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE identities SET display_name = $1 WHERE channel = $2 AND sender_id = $3")
            .bind(display_name)
            .bind(&identity.channel)
            .bind(&identity.sender_id)
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn ensure_user(
        conn: &mut DB::Connection,
        identity: &Identity,
        display_name: &str,
        level: Level,
    ) -> Result<User, StoreError> {
        if let Some((user, _)) = Self::find(conn, identity).await? {
            return Ok(user);
        }
        let now = now_millis();
        let id: i64 =
            sqlx::query_scalar("INSERT INTO users (level, created_at, updated_at) VALUES ($1, $2, $2) RETURNING id")
                .bind(level.as_str())
                .bind(now)
                .fetch_one(&mut *conn)
                .await?;
        if !Self::insert_identity(conn, identity, display_name, UserId(id)).await? {
            // Another writer created it first: possible only where writers are not serialized
            // (PostgreSQL). Its user wins and ours is dropped.
            sqlx::query("DELETE FROM users WHERE id = $1").bind(id).execute(&mut *conn).await?;
            let (user, _) = Self::find(conn, identity)
                .await?
                .ok_or_else(|| StoreError::Corrupt(format!("identity {identity} conflicts but has no user")))?;
            return Ok(user);
        }
        Ok(User { id: UserId(id), level, budget: None, created_at: from_millis(now)? })
    }

    async fn raise_level(
        conn: &mut DB::Connection,
        identity: &Identity,
        display_name: &str,
        level: Level,
    ) -> Result<User, StoreError> {
        let user = Self::ensure_user(conn, identity, display_name, level).await?;
        if user.level >= level {
            return Ok(user);
        }
        Self::update_level(conn, user.id, level).await?;
        Ok(User { level, ..user })
    }

    async fn update_level(conn: &mut DB::Connection, user: UserId, level: Level) -> Result<(), StoreError> {
        sqlx::query("UPDATE users SET level = $1, updated_at = $2 WHERE id = $3")
            .bind(level.as_str())
            .bind(now_millis())
            .bind(user.0)
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn update_budget(conn: &mut DB::Connection, user: UserId, budget: Option<u64>) -> Result<(), StoreError> {
        sqlx::query("UPDATE users SET budget_tokens = $1, updated_at = $2 WHERE id = $3")
            .bind(budget.map(to_i64))
            .bind(now_millis())
            .bind(user.0)
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn insert_identity(
        conn: &mut DB::Connection,
        identity: &Identity,
        display_name: &str,
        user: UserId,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO identities (channel, sender_id, user_id, display_name, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (channel, sender_id) DO NOTHING",
        )
        .bind(&identity.channel)
        .bind(&identity.sender_id)
        .bind(user.0)
        .bind(display_name)
        .bind(now_millis())
        .execute(conn)
        .await?
        .rows_affected();
        Ok(inserted == 1)
    }

    async fn merge(conn: &mut DB::Connection, from: UserId, into: UserId) -> Result<(), StoreError> {
        sqlx::query("UPDATE identities SET user_id = $1 WHERE user_id = $2")
            .bind(into.0)
            .bind(from.0)
            .execute(&mut *conn)
            .await?;
        // `WHERE true` keeps SQLite from reading ON CONFLICT as a join constraint.
        sqlx::query(
            "INSERT INTO usage_monthly (user_id, month, input_tokens, output_tokens, cache_read_tokens, \
             cost_usd, unpriced_tokens) \
             SELECT $1, month, input_tokens, output_tokens, cache_read_tokens, cost_usd, unpriced_tokens \
             FROM usage_monthly WHERE user_id = $2 AND true \
             ON CONFLICT (user_id, month) DO UPDATE SET \
             input_tokens = usage_monthly.input_tokens + excluded.input_tokens, \
             output_tokens = usage_monthly.output_tokens + excluded.output_tokens, \
             cache_read_tokens = usage_monthly.cache_read_tokens + excluded.cache_read_tokens, \
             cost_usd = usage_monthly.cost_usd + excluded.cost_usd, \
             unpriced_tokens = usage_monthly.unpriced_tokens + excluded.unpriced_tokens",
        )
        .bind(into.0)
        .bind(from.0)
        .execute(&mut *conn)
        .await?;
        for sql in ["DELETE FROM usage_monthly WHERE user_id = $1", "DELETE FROM users WHERE id = $1"] {
            sqlx::query(sql).bind(from.0).execute(&mut *conn).await?;
        }
        Ok(())
    }

    async fn summaries(conn: &mut DB::Connection, month: &str) -> Result<Vec<UserSummary>, StoreError> {
        let sql = format!(
            "SELECT {USER_COLUMNS}, COALESCE(m.input_tokens, 0) AS input_tokens, \
             COALESCE(m.output_tokens, 0) AS output_tokens, \
             COALESCE(m.cost_usd, 0.0) AS cost_usd, COALESCE(m.unpriced_tokens, 0) AS unpriced_tokens \
             FROM users u LEFT JOIN usage_monthly m ON m.user_id = u.id AND m.month = $1 ORDER BY u.id"
        );
        let rows = sqlx::query(AssertSqlSafe(sql)).bind(month).fetch_all(&mut *conn).await?;
        let mut identities = identities_by_user::<DB>(conn).await?;
        rows.iter()
            .map(|row| {
                let user = user_from_row(row)?;
                let used = usage(row.try_get("input_tokens")?, row.try_get("output_tokens")?)?;
                let cost = month_cost(row.try_get("cost_usd")?, row.try_get("unpriced_tokens")?)?;
                let identities = identities.remove(&user.id.0).unwrap_or_default();
                Ok(UserSummary { identities, user, used, cost })
            })
            .collect()
    }

    async fn record_usage(
        conn: &mut DB::Connection,
        billing: &Billing,
        used: Usage,
        cost_usd: Option<f64>,
    ) -> Result<(), StoreError> {
        let cost = run_cost(used, cost_usd);
        let added = sqlx::query(
            "INSERT INTO usage_monthly (user_id, month, input_tokens, output_tokens, cache_read_tokens, \
             cost_usd, unpriced_tokens) \
             SELECT user_id, $3, $4, $5, $6, $7, $8 FROM identities WHERE channel = $1 AND sender_id = $2 \
             ON CONFLICT (user_id, month) DO UPDATE SET \
             input_tokens = usage_monthly.input_tokens + excluded.input_tokens, \
             output_tokens = usage_monthly.output_tokens + excluded.output_tokens, \
             cache_read_tokens = usage_monthly.cache_read_tokens + excluded.cache_read_tokens, \
             cost_usd = usage_monthly.cost_usd + excluded.cost_usd, \
             unpriced_tokens = usage_monthly.unpriced_tokens + excluded.unpriced_tokens",
        )
        .bind(&billing.identity.channel)
        .bind(&billing.identity.sender_id)
        .bind(&billing.month)
        .bind(to_i64(used.input_tokens))
        .bind(to_i64(used.output_tokens))
        .bind(to_i64(used.cache_read_tokens))
        .bind(cost.usd)
        .bind(to_i64(cost.unpriced_tokens))
        .execute(&mut *conn)
        .await?
        .rows_affected();
        if added == 0 {
            // Identities are only ever moved, never deleted, so this needs a hand-edited database.
            // Failing would only make the message run (and cost) again, with the same result.
            tracing::warn!(identity = %billing.identity, "a run's usage has no user to be counted for");
        }
        if let Some(group) = &billing.group {
            sqlx::query(
                "INSERT INTO group_usage_monthly (group_key, month, input_tokens, output_tokens, cache_read_tokens, \
                 cost_usd, unpriced_tokens) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (group_key, month) DO UPDATE SET \
                 input_tokens = group_usage_monthly.input_tokens + excluded.input_tokens, \
                 output_tokens = group_usage_monthly.output_tokens + excluded.output_tokens, \
                 cache_read_tokens = group_usage_monthly.cache_read_tokens + excluded.cache_read_tokens, \
                 cost_usd = group_usage_monthly.cost_usd + excluded.cost_usd, \
                 unpriced_tokens = group_usage_monthly.unpriced_tokens + excluded.unpriced_tokens",
            )
            .bind(group)
            .bind(&billing.month)
            .bind(to_i64(used.input_tokens))
            .bind(to_i64(used.output_tokens))
            .bind(to_i64(used.cache_read_tokens))
            .bind(cost.usd)
            .bind(to_i64(cost.unpriced_tokens))
            .execute(&mut *conn)
            .await?;
        }
        Ok(())
    }
}

/// Every identity with its display name, grouped by user id.
async fn identities_by_user<DB>(conn: &mut DB::Connection) -> Result<BTreeMap<i64, Vec<(Identity, String)>>, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'r> (i64, String, String, String): FromRow<'r, DB::Row>,
{
    let rows: Vec<(i64, String, String, String)> = sqlx::query_as(
        "SELECT user_id, channel, sender_id, display_name FROM identities ORDER BY user_id, channel, sender_id",
    )
    .fetch_all(conn)
    .await?;
    let mut grouped: BTreeMap<i64, Vec<(Identity, String)>> = BTreeMap::new();
    for (user_id, channel, sender_id, name) in rows {
        grouped.entry(user_id).or_default().push((Identity { channel, sender_id }, name));
    }
    Ok(grouped)
}

pub(in crate::store) fn user_from_row<'r, R>(row: &'r R) -> Result<User, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let level: String = row.try_get("level")?;
    let budget: Option<i64> = row.try_get("budget_tokens")?;
    Ok(User {
        id: UserId(row.try_get("id")?),
        level: level.parse().map_err(|e| StoreError::Corrupt(format!("users.level: {e}")))?,
        budget: budget.map(|b| to_u64(b, "budget_tokens")).transpose()?,
        created_at: from_millis(row.try_get("created_at")?)?,
    })
}

fn usage(input: i64, output: i64) -> Result<Usage, StoreError> {
    Ok(Usage::new(to_u64(input, "input_tokens")?, to_u64(output, "output_tokens")?))
}

fn usage_with_cache(input: i64, output: i64, cached: i64) -> Result<Usage, StoreError> {
    Ok(usage(input, output)?.with_cache(to_u64(cached, "cache_read_tokens")?, 0))
}

fn month_cost(usd: f64, unpriced: i64) -> Result<MonthCost, StoreError> {
    Ok(MonthCost { usd, unpriced_tokens: to_u64(unpriced, "unpriced_tokens")? })
}

/// What one run adds to its month: its cost when known, else its tokens as unpriced.
fn run_cost(used: Usage, cost_usd: Option<f64>) -> MonthCost {
    match cost_usd {
        Some(usd) => MonthCost { usd, unpriced_tokens: 0 },
        None => MonthCost { usd: 0.0, unpriced_tokens: used.input_tokens.saturating_add(used.output_tokens) },
    }
}
