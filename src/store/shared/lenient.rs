//! Reading a session's rows when part of what they store does not decode (a transcript row
//! that is not a chat message, a summary that is not text, a setting of the wrong type).
//!
//! A turn must never wait on such a row: it would be given back to the bus and fail again on
//! every retry until the message ages out, and the chat's next message with it. So the part that
//! does not decode is left out (or replaced by its default) with a warning naming the session,
//! the row and what is wrong, never the stored content; the turn runs on the rest. Memory search
//! and the API's views of a session or a run leave such a row out the same way. Only decoding
//! is forgiven: a column that is missing, a lost connection or a failed statement stay errors.

use chrono::{DateTime, Utc};
use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::config::QueueMode;
use crate::provider::ChatMessage;
use crate::store::values::from_millis;
use crate::store::{HistorySummary, SessionHead, SessionPrefs, StoreError};

/// A column's value, or why it does not decode (`Ok(Err(reason))`).
pub(super) fn column<'r, R, T>(row: &'r R, name: &'static str) -> Result<Result<T, String>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    T: Decode<'r, R::Database> + Type<R::Database>,
{
    match row.try_get(name) {
        Ok(value) => Ok(Ok(value)),
        Err(sqlx::Error::ColumnDecode { source, .. }) => Ok(Err(source.to_string())),
        Err(err) => Err(err.into()),
    }
}

/// Transcript rows (`id`, `message_json`) fetched newest first, as messages oldest first, with
/// how many were left out.
pub(super) fn transcript<'r, R>(
    session_key: &str,
    rows: &'r [R],
) -> Result<(Vec<(i64, ChatMessage)>, usize), StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    let mut messages = Vec::with_capacity(rows.len());
    let mut skipped = 0;
    // Fetched newest first so LIMIT keeps the most recent ones; the model wants them oldest first.
    for row in rows.iter().rev() {
        let id: i64 = row.try_get("id")?;
        match message(row)? {
            Ok(message) => messages.push((id, message)),
            Err(problem) => {
                skipped += 1;
                tracing::warn!(session = %session_key, row = id, %problem,
                    "a transcript row is not a readable chat message; the history goes on without it");
            }
        }
    }
    Ok((messages, skipped))
}

/// A transcript row's `message_json` as a chat message, or why it is not one (`Ok(Err(reason))`).
pub(super) fn message<'r, R>(row: &'r R) -> Result<Result<ChatMessage, String>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(column::<R, String>(row, "message_json")?
        .and_then(|json| serde_json::from_str::<ChatMessage>(&json).map_err(|e| e.to_string())))
}

/// A transcript row's message with when it was written (`message_json`, `created_at`), or why
/// either does not decode.
pub(super) fn dated_message<'r, R>(row: &'r R) -> Result<Result<(ChatMessage, DateTime<Utc>), String>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    let message = message(row)?;
    let at = column::<R, i64>(row, "created_at")?.and_then(|millis| from_millis(millis).map_err(|e| e.to_string()));
    Ok(message.and_then(|message| Ok((message, at?))))
}

/// [`SessionHead`] from a row of `history_version`, `summary` and `compaction_count`. A
/// version that does not decode is `None`: the history is then read afresh every turn.
pub(in crate::store) fn head<'r, R>(session_key: &str, row: &'r R) -> Result<SessionHead, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    let version = column::<R, i64>(row, "history_version")?
        .map_err(|problem| {
            tracing::warn!(session = %session_key, %problem,
                "the session's history_version does not decode; its history is read afresh each turn");
        })
        .ok();
    let summary = match column::<R, Option<String>>(row, "summary")? {
        Ok(summary) => summary,
        Err(problem) => {
            tracing::warn!(session = %session_key, %problem,
                "the session's summary does not decode; the turn goes on without it");
            None
        }
    };
    let Some(text) = summary else { return Ok(SessionHead { found: true, version, summary: None }) };
    // The count only tells how many compactions made the summary: at least one did.
    let count = column::<R, i64>(row, "compaction_count")?
        .and_then(|count| u32::try_from(count).map_err(|_| format!("{count} is out of range")))
        .unwrap_or_else(|problem| {
            tracing::warn!(session = %session_key, %problem,
                "the session's compaction_count does not decode; counting its summary as one compaction");
            1
        });
    Ok(SessionHead { found: true, version, summary: Some(HistorySummary { text, compactions: count }) })
}

/// [`SessionPrefs`] from a row of `queue_mode`, `model` and `show_progress`: a setting that
/// does not decode is the default, the others stay as chosen.
pub(in crate::store) fn prefs<'r, R>(session_key: &str, row: &'r R) -> Result<SessionPrefs, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    bool: Decode<'r, R::Database> + Type<R::Database>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(SessionPrefs {
        queue_mode: queue_mode(session_key, row)?,
        model: setting(session_key, "model", column(row, "model")?),
        verbose: setting(session_key, "show_progress", column(row, "show_progress")?),
    })
}

/// The session's queue mode from a row's `queue_mode`: `None` (the configured one) with a
/// warning when it does not decode or names no mode (stored by a newer build, or by hand).
pub(super) fn queue_mode<'r, R>(session_key: &str, row: &'r R) -> Result<Option<QueueMode>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    let mode = column::<R, Option<String>>(row, "queue_mode")?.and_then(|name| {
        name.map(|name| QueueMode::parse(&name).ok_or_else(|| format!("{name:?} is not a queue mode"))).transpose()
    });
    Ok(setting(session_key, "queue_mode", mode))
}

/// A setting's value, or its default with a warning when it does not decode.
pub(super) fn setting<T: Default>(session_key: &str, name: &str, value: Result<T, String>) -> T {
    value.unwrap_or_else(|problem| {
        tracing::warn!(session = %session_key, setting = name, %problem,
            "a session setting does not decode; using its default");
        T::default()
    })
}

/// The stored reply of a finished run, for its redelivery; `None` with a warning when it does
/// not decode: the message is settled without it rather than retried until it ages out.
pub(super) fn reply(run_id: &str, json: &str) -> Option<switchboard_channels::contract::OutboundMessage> {
    match crate::store::values::decode_reply(run_id, json) {
        Ok(reply) => Some(reply),
        Err(problem) => {
            tracing::warn!(run = %run_id, %problem, "the stored reply of a finished run does not decode; it is not delivered again");
            None
        }
    }
}
