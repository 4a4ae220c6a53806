//! The statements of the in-process bus's journal (`bus_journal`, migration 0002), for the
//! `Journal` implementation (`store::journal`) and for a run's finishing trigger (`finish`), which
//! writes the reply's row and deletes the answered message's row itself.

use sqlx::Sqlite;
use switchboard_channels::bus::journal::JournalError;
use switchboard_channels::subject::Flow;

pub(in crate::store) fn flow_name(flow: Flow) -> Result<&'static str, JournalError> {
    match flow {
        Flow::In => Ok("in"),
        Flow::Out => Ok("out"),
        Flow::Events => Err(JournalError("events are not journaled".into())),
    }
}

pub(in crate::store) type Query<'q, T> = sqlx::query::QueryScalar<'q, Sqlite, T, sqlx::sqlite::SqliteArguments<'q>>;

/// Journals a message unless one with its dedupe id is still pending; returns its row.
pub(in crate::store) fn append_query<'q>(
    flow: &'static str,
    channel: &'q str,
    subject: &'q str,
    dedupe_id: Option<&'q str>,
    payload: &'q [u8],
    now: i64,
) -> Query<'q, i64> {
    sqlx::query_scalar(
        "INSERT INTO bus_journal (flow, channel, subject, dedupe_id, payload, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (dedupe_id) DO NOTHING RETURNING seq",
    )
    .bind(flow)
    .bind(channel)
    .bind(subject)
    .bind(dedupe_id)
    .bind(payload)
    .bind(now)
}
