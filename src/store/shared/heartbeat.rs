//! [`HeartbeatStore`] for both stores (`migrations/sqlite/0010_heartbeat.sql`).
//!
//! A slot is claimed by one conditional `UPDATE … WHERE next_at = <slot>`: the database runs
//! it atomically (SQLite under its write lock, PostgreSQL under the row's lock, re-checking
//! the condition after a concurrent update), so of two schedulers, even on two hosts, only
//! one sees a changed row.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};
use switchboard_channels::contract::ChatAddress;

use super::{Backend, RowsAffected};
use crate::config::Identity;
use crate::store::StoreError;
use crate::store::heartbeat::{HeartbeatState, HeartbeatStore, OwnerChat, SlotClaim};

fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

fn time(column: &str, value: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(value).ok_or_else(|| StoreError::Corrupt(format!("{column} out of range: {value}")))
}

#[async_trait]
impl<B> HeartbeatStore for B
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::QueryResult: RowsAffected,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'r> (i64, Option<i64>, Option<String>): FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (String, i64, Option<i64>, Option<String>): FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (String, String, i64): FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (bool,): FromRow<'r, <B::Db as Database>::Row>,
{
    async fn heartbeat_state(&self, agent: &str, first_at: DateTime<Utc>) -> Result<HeartbeatState, StoreError> {
        sqlx::query("INSERT INTO heartbeats (agent, next_at) VALUES ($1, $2) ON CONFLICT (agent) DO NOTHING")
            .bind(agent)
            .bind(millis(first_at))
            .execute(self.pool())
            .await?;
        let (next_at, last_at, last_outcome): (i64, Option<i64>, Option<String>) =
            sqlx::query_as("SELECT next_at, last_at, last_outcome FROM heartbeats WHERE agent = $1")
                .bind(agent)
                .fetch_one(self.pool())
                .await?;
        Ok(HeartbeatState {
            next_at: time("heartbeats.next_at", next_at)?,
            last_at: last_at.map(|at| time("heartbeats.last_at", at)).transpose()?,
            last_outcome,
        })
    }

    async fn heartbeat_states(&self) -> Result<BTreeMap<String, HeartbeatState>, StoreError> {
        let rows: Vec<(String, i64, Option<i64>, Option<String>)> =
            sqlx::query_as("SELECT agent, next_at, last_at, last_outcome FROM heartbeats ORDER BY agent")
                .fetch_all(self.pool())
                .await?;
        rows.into_iter()
            .map(|(agent, next_at, last_at, last_outcome)| {
                let state = HeartbeatState {
                    next_at: time("heartbeats.next_at", next_at)?,
                    last_at: last_at.map(|at| time("heartbeats.last_at", at)).transpose()?,
                    last_outcome,
                };
                Ok((agent, state))
            })
            .collect()
    }

    async fn claim_heartbeat_slot(&self, claim: &SlotClaim<'_>) -> Result<bool, StoreError> {
        let updated = sqlx::query(
            "UPDATE heartbeats SET next_at = $1, last_at = $2, last_outcome = $3 WHERE agent = $4 AND next_at = $5",
        )
        .bind(millis(claim.next))
        .bind(millis(claim.now))
        .bind(claim.outcome)
        .bind(claim.agent)
        .bind(millis(claim.slot))
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    async fn move_heartbeat_slot(
        &self,
        agent: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let updated = sqlx::query("UPDATE heartbeats SET next_at = $1 WHERE agent = $2 AND next_at = $3")
            .bind(millis(to))
            .bind(agent)
            .bind(millis(from))
            .execute(self.pool())
            .await?
            .rows_affected();
        Ok(updated == 1)
    }

    async fn record_owner_chat(
        &self,
        agent: &str,
        identity: &Identity,
        chat: &ChatAddress,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let identity = identity.to_string();
        let chat_json = serde_json::to_string(chat).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "INSERT INTO owner_chats (agent, identity, chat_json, written_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (agent, identity) DO UPDATE SET chat_json = excluded.chat_json, \
             written_at = excluded.written_at WHERE excluded.written_at >= owner_chats.written_at",
        )
        .bind(agent)
        .bind(identity.as_str())
        .bind(chat_json.as_str())
        .bind(millis(at))
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn owner_chats(&self, agent: &str) -> Result<Vec<OwnerChat>, StoreError> {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT identity, chat_json, written_at FROM owner_chats WHERE agent = $1 ORDER BY identity",
        )
        .bind(agent)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(|(identity, chat_json, at)| owner_chat(agent, identity, &chat_json, at)).collect()
    }

    async fn latest_owner_chat(&self, agent: &str) -> Result<Option<OwnerChat>, StoreError> {
        let row: Option<(String, String, i64)> = sqlx::query_as(
            "SELECT identity, chat_json, written_at FROM owner_chats WHERE agent = $1 \
             ORDER BY written_at DESC, identity LIMIT 1",
        )
        .bind(agent)
        .fetch_optional(self.pool())
        .await?;
        let Some((identity, chat_json, at)) = row else { return Ok(None) };
        owner_chat(agent, identity, &chat_json, at).map(Some)
    }

    async fn session_has_running_run(
        &self,
        session_key: &str,
        started_after: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let running: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE session_key = $1 AND status = 'running' AND started_at > $2)",
        )
        .bind(session_key)
        .bind(millis(started_after))
        .fetch_one(self.pool())
        .await?;
        Ok(running)
    }
}

/// An `owner_chats` row.
fn owner_chat(agent: &str, identity: String, chat_json: &str, at: i64) -> Result<OwnerChat, StoreError> {
    let chat = serde_json::from_str(chat_json)
        .map_err(|e| StoreError::Corrupt(format!("owner_chats.chat_json of {agent}/{identity}: {e}")))?;
    Ok(OwnerChat { identity, chat, at: time("owner_chats.written_at", at)? })
}
