//! Conversions between the stores' columns and Rust values, shared by the SQLite and the
//! PostgreSQL store: both keep times as unix milliseconds, counts as signed integers, and
//! messages and replies as JSON text.

use chrono::{DateTime, Utc};
use switchboard_channels::bus::journal::JournalError;
use switchboard_channels::contract::OutboundMessage;
use switchboard_channels::subject::Flow;

use sqlx::{ColumnIndex, Decode, Row, Type};
use switchboard_channels::contract::Usage;

use super::{RunKind, RunRecord, RunStatus, StoreError};
use crate::provider::Role;

pub(super) fn parse_status(status: &str) -> Result<RunStatus, StoreError> {
    match status {
        "running" => Ok(RunStatus::Running),
        "completed" => Ok(RunStatus::Completed),
        "failed" => Ok(RunStatus::Failed),
        other => Err(StoreError::Corrupt(format!("unknown run status {other:?}"))),
    }
}

/// The role column lets operators read the transcript with plain SQL; the JSON is authoritative.
pub(super) fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

pub(super) fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("cannot encode as JSON: {e}")))
}

pub(super) fn decode_reply(run_id: &str, json: &str) -> Result<OutboundMessage, StoreError> {
    serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("reply of run {run_id} is unreadable: {e}")))
}

pub(super) fn now_millis() -> i64 {
    Utc::now().timestamp_millis()
}

pub(super) fn from_millis(millis: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(millis).ok_or_else(|| StoreError::Corrupt(format!("time {millis} is out of range")))
}

/// A duration as stored (milliseconds), saturating.
pub(super) fn duration_millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Database integers are signed; a `usize` limit beyond `i64::MAX` means "no limit" anyway.
pub(super) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// Token counts beyond `i64::MAX` cannot happen; saturating beats failing a finished run.
pub(super) fn to_i64(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

pub(super) fn to_u64(value: i64, column: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("{column} is negative: {value}")))
}

pub(super) fn to_u32(value: i64, column: &str) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| StoreError::Corrupt(format!("{column} is out of range: {value}")))
}

/// The flows as the in-process bus's journal (`bus_journal`) names them.
pub(super) fn flow_name(flow: Flow) -> Result<&'static str, JournalError> {
    match flow {
        Flow::In => Ok("in"),
        Flow::Out => Ok("out"),
        Flow::Events => Err(JournalError("events are not journaled".into())),
    }
}

/// A `runs` row as operators see it, from either store (the columns of `store::shared::runs`'s `RUN_COLUMNS`).
pub(super) fn run_record<'r, R>(row: &'r R) -> Result<RunRecord, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    f64: Decode<'r, R::Database> + Type<R::Database>,
    bool: Decode<'r, R::Database> + Type<R::Database>,
{
    let run_id: String = row.try_get("run_id")?;
    let finished_at: Option<i64> = row.try_get("finished_at")?;
    let status: String = row.try_get("status")?;
    let kind: String = row.try_get("kind")?;
    Ok(RunRecord {
        inbound_id: row.try_get("inbound_id")?,
        session_key: row.try_get("session_key")?,
        status: parse_status(&status)?,
        attempt: to_u32(row.try_get("attempt")?, "attempt")?,
        model: row.try_get("model")?,
        usage: Usage {
            input_tokens: to_u64(row.try_get("input_tokens")?, "input_tokens")?,
            output_tokens: to_u64(row.try_get("output_tokens")?, "output_tokens")?,
            cache_read_tokens: to_u64(row.try_get("cache_read_tokens")?, "cache_read_tokens")?,
            cache_write_tokens: to_u64(row.try_get("cache_write_tokens")?, "cache_write_tokens")?,
            estimated: row.try_get("usage_estimated")?,
        },
        kind: RunKind::parse(&kind)
            .ok_or_else(|| StoreError::Corrupt(format!("run {run_id} has the kind {kind:?}")))?,
        cost_usd: row.try_get("cost_usd")?,
        iterations: to_u32(row.try_get("iterations")?, "iterations")?,
        error: row.try_get("error")?,
        started_at: from_millis(row.try_get("started_at")?)?,
        finished_at: finished_at.map(from_millis).transpose()?,
        reply_delivered: row.try_get("reply_delivered")?,
        run_id,
    })
}
