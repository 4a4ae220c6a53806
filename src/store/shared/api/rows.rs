//! A session's messages and a run's tool calls as the API shows them, from stored rows. A row
//! that does not decode is left out with a warning naming it (never its content), so one bad
//! row does not take a whole page or run view with it (see `lenient`).

use serde_json::{Value, json};
use sqlx::{ColumnIndex, Decode, Row, Type};
use switchboard_channels::api::store::SessionMessage;
use switchboard_channels::contract::OutboundMessage;

use super::super::lenient;
use crate::provider::Role;
use crate::store::StoreError;
use crate::store::values::{from_millis, role_name};

/// Longest tool result a session's messages or a run's details show; the transcript keeps it
/// whole.
const TOOL_RESULT_CHARS: usize = 2000;

fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Transcript rows (`id`, `run_id`, `message_json`, `created_at`) fetched newest first, as a
/// session's messages oldest first. A row that does not decode is left out with a warning
/// naming it, so one bad row does not take the whole page with it (see `lenient`).
pub(super) fn transcript_lines<'r, R>(session_key: &str, rows: &'r [R]) -> Result<Vec<SessionMessage>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    let mut lines = Vec::with_capacity(rows.len());
    for row in rows.iter().rev() {
        let id: i64 = row.try_get("id")?;
        let (message, at) = match lenient::dated_message(row)? {
            Ok(dated) => dated,
            Err(problem) => {
                tracing::warn!(session = %session_key, row = id, %problem,
                    "a transcript row is not a readable chat message; the session's messages are shown without it");
                continue;
            }
        };
        let tool_calls = message.tool_calls.iter().map(|call| json!({"name": call.name, "arguments": call.arguments}));
        let content = match message.role {
            Role::Tool => cut(&message.content, TOOL_RESULT_CHARS),
            _ => message.content.clone(),
        };
        lines.push(SessionMessage {
            role: role_name(message.role).to_owned(),
            content,
            at,
            run_id: lenient::column::<R, String>(row, "run_id")?.ok(),
            tool_calls: tool_calls.collect(),
            name: message.name.clone(),
        });
    }
    Ok(lines)
}

/// An outbox row (`message_json`, `created_at`) as a session's message, or why it does not
/// decode (`Ok(Err(reason))`).
pub(super) fn outbox_line<'r, R>(row: &'r R) -> Result<Result<SessionMessage, String>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    let message = outbox_message(row)?;
    let at = lenient::column::<R, i64>(row, "created_at")?.and_then(|ms| from_millis(ms).map_err(|e| e.to_string()));
    Ok(message.and_then(|message| {
        Ok(SessionMessage {
            role: "outbox".into(),
            content: message.content,
            at: at?,
            run_id: None,
            tool_calls: Vec::new(),
            name: None,
        })
    }))
}

/// An outbox row's `message_json` as the message kept, or why it is not one (`Ok(Err(reason))`).
pub(super) fn outbox_message<'r, R>(row: &'r R) -> Result<Result<OutboundMessage, String>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(lenient::column::<R, String>(row, "message_json")?
        .and_then(|json| serde_json::from_str::<OutboundMessage>(&json).map_err(|e| e.to_string())))
}

/// A run's tool calls with their results, from its transcript rows (`id`, `message_json`); a
/// row that does not decode is left out with a warning naming it.
pub(super) fn tool_calls<'r, R>(run_id: &str, rows: &'r [R]) -> Result<Vec<Value>, StoreError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    String: Decode<'r, R::Database> + Type<R::Database>,
{
    let mut messages = Vec::with_capacity(rows.len());
    for row in rows {
        match lenient::message(row)? {
            Ok(message) => messages.push(message),
            Err(problem) => {
                let id: i64 = row.try_get("id")?;
                tracing::warn!(run = %run_id, row = id, %problem,
                    "a transcript row is not a readable chat message; the run's tool calls are shown without it");
            }
        }
    }
    let result_of =
        |call_id: &str| messages.iter().find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(call_id));
    let calls = messages.iter().flat_map(|m| &m.tool_calls).map(|call| {
        let result = result_of(&call.id);
        json!({
            "name": call.name,
            "arguments": call.arguments,
            "result": result.map(|r| cut(&r.content, TOOL_RESULT_CHARS)),
        })
    });
    Ok(calls.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_tool_results_are_cut_on_a_character() {
        assert_eq!(cut("héllo", 2), "hé…");
        assert_eq!(cut("hé", 2), "hé");
    }
}
