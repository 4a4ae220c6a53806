//! [`ApiStore`] for both stores: sessions and their messages, runs, and the API's outbox
//! (`migrations/sqlite/0018_api_outbox.sql`).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Row, Type};
use switchboard_channels::api::store::{
    ApiStore, ApiStoreError, MessagePage, OutboxEntry, RunFilter, RunView, SessionMessage, SessionScope,
    SessionSummary, WebhookDue,
};

use super::{Backend, RowsAffected, SearchEngine, lenient};
use crate::store::postgres::PostgresStore;
use crate::store::sqlite::SqliteStore;
use crate::store::values::{from_millis, now_millis, run_record, sql_limit, to_u32, to_u64};
use crate::store::{RunRecord, StoreError};
use rows::{outbox_line, outbox_message, tool_calls, transcript_lines};

mod rows;

fn failed(err: impl std::fmt::Display) -> ApiStoreError {
    ApiStoreError(err.to_string())
}

fn millis(at: Option<DateTime<Utc>>) -> i64 {
    at.map_or(i64::MAX, |at| at.timestamp_millis())
}

/// `LIKE` patterns for the session keys of API chats under `prefix`: the `main` agent's
/// (`api:<prefix>…`) and every other agent's (`<agent>/api:<prefix>…`).
fn chat_patterns(prefix: &str) -> (String, String) {
    let escaped: String = prefix
        .chars()
        .flat_map(|c| match c {
            '%' | '_' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    (format!("api:{escaped}%"), format!("%/api:{escaped}%"))
}

fn run_view(record: RunRecord) -> RunView {
    RunView {
        id: record.run_id,
        session_key: record.session_key,
        kind: record.kind.as_str().to_owned(),
        status: record.status.as_str().to_owned(),
        model: record.model,
        input_tokens: record.usage.input_tokens,
        output_tokens: record.usage.output_tokens,
        cache_read_tokens: record.usage.cache_read_tokens,
        cache_write_tokens: record.usage.cache_write_tokens,
        tokens_estimated: record.usage.estimated,
        cost_usd: record.cost_usd,
        iterations: record.iterations,
        error: record.error,
        started_at: record.started_at,
        finished_at: record.finished_at,
        tool_calls: None,
    }
}

/// A page of sessions with something to show, then their message counts: counted for the
/// page only, not for every session the scope holds. A chat that only ever received messages
/// (a cron reminder, a `message` from another chat) has outbox lines but no session row: it is
/// listed too, its times those of its lines. Its cost sums its runs' known costs (none when no
/// run had a price).
const SESSIONS_PAGE: &str = "SELECT p.key, p.created_at, p.updated_at, \
     (SELECT COUNT(*) FROM transcript t WHERE t.session_key = p.key) \
     + (SELECT COUNT(*) FROM api_outbox o WHERE o.session_key = p.key AND NOT o.in_transcript) AS messages, \
     (SELECT SUM(r.cost_usd) FROM runs r WHERE r.session_key = p.key) AS cost_usd \
     FROM (SELECT l.key, l.created_at, l.updated_at FROM ( \
     SELECT s.key, s.created_at, s.updated_at FROM sessions s \
     WHERE (s.key LIKE $1 ESCAPE '\\' OR s.key LIKE $2 ESCAPE '\\') \
     AND (EXISTS (SELECT 1 FROM transcript t WHERE t.session_key = s.key) \
     OR EXISTS (SELECT 1 FROM api_outbox o WHERE o.session_key = s.key AND NOT o.in_transcript)) \
     UNION ALL \
     SELECT o.session_key, MIN(o.created_at), MAX(o.created_at) FROM api_outbox o \
     WHERE (o.session_key LIKE $1 ESCAPE '\\' OR o.session_key LIKE $2 ESCAPE '\\') AND NOT o.in_transcript \
     AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.key = o.session_key) \
     GROUP BY o.session_key) AS l \
     WHERE l.updated_at < $3 ORDER BY l.updated_at DESC, l.key LIMIT $4) AS p \
     ORDER BY p.updated_at DESC, p.key";

fn summary(row: (String, i64, i64, i64, Option<f64>)) -> Result<SessionSummary, ApiStoreError> {
    let (key, created_at, updated_at, messages, cost_usd) = row;
    Ok(SessionSummary {
        key,
        created_at: from_millis(created_at).map_err(failed)?,
        updated_at: from_millis(updated_at).map_err(failed)?,
        messages: to_u64(messages, "messages").map_err(failed)?,
        cost_usd,
    })
}

/// Merges a page of transcript lines (oldest first) with the outbox lines of its time span.
fn merge(mut lines: Vec<SessionMessage>, outbox: Vec<SessionMessage>) -> Vec<SessionMessage> {
    lines.extend(outbox);
    // Stable: lines written in the same millisecond keep the order they were read in.
    lines.sort_by_key(|line| line.at);
    lines
}

/// The outbox lines of `key` (not already in its transcript) written in [from, to).
async fn outbox_lines<B>(store: &B, key: &str, from: i64, to: i64) -> Result<Vec<SessionMessage>, ApiStoreError>
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> i64: Decode<'r, B::Db> + Type<B::Db>,
{
    let rows = sqlx::query(
        "SELECT seq, message_json, created_at FROM api_outbox WHERE session_key = $1 AND NOT in_transcript \
         AND created_at >= $2 AND created_at < $3 ORDER BY seq",
    )
    .bind(key)
    .bind(from)
    .bind(to)
    .fetch_all(store.pool())
    .await
    .map_err(failed)?;
    let mut lines = Vec::with_capacity(rows.len());
    for row in &rows {
        match outbox_line(row).map_err(failed)? {
            Ok(line) => lines.push(line),
            Err(problem) => {
                let seq: i64 = row.try_get("seq").map_err(failed)?;
                tracing::warn!(session = %key, outbox_seq = seq, %problem,
                    "an outbox row is not a readable message; the session's messages are shown without it");
            }
        }
    }
    Ok(lines)
}

/// Deletes what a session said: its transcript, its outbox lines, its runs' replies and errors
/// (the runs stay for usage accounting), its summary and its conversation's memory chunks.
async fn delete_session_rows<B>(store: &B, key: &str) -> Result<(), StoreError>
where
    B: SearchEngine,
    for<'c> &'c mut <B::Db as Database>::Connection: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'r> (String,): FromRow<'r, <B::Db as Database>::Row>,
{
    let path = format!("{}{key}", crate::store::memory_index::CONVERSATION_PREFIX);
    let roots: Vec<String> = sqlx::query_scalar("SELECT DISTINCT root FROM memory_chunks WHERE path = $1")
        .bind(path.as_str())
        .fetch_all(store.pool())
        .await?;
    let mut tx = store.begin_write().await?;
    for root in &roots {
        B::remove_file_chunks(&mut tx, root, &path).await?;
    }
    for sql in [
        "DELETE FROM transcript WHERE session_key = $1",
        "DELETE FROM api_outbox WHERE session_key = $1",
        // The runs stay for usage accounting; what they said goes.
        "UPDATE runs SET reply_json = NULL, error = NULL WHERE session_key = $1 AND status <> 'running'",
    ] {
        sqlx::query(sql).bind(key).execute(&mut *tx).await?;
    }
    sqlx::query(
        "UPDATE sessions SET summary = NULL, compaction_count = 0, compacted_through = 0, \
         archived_through = 0, history_version = history_version + 1, updated_at = $2 WHERE key = $1",
    )
    .bind(key)
    .bind(now_millis())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    store.history_cache().forget(key);
    Ok(())
}

/// The API's queries over a store: [`ApiStore`] is another crate's trait, so each store
/// implements it by handing its calls to these.
struct Queries<'a, B>(&'a B);

#[async_trait]
impl<B> ApiStore for Queries<'_, B>
where
    B: SearchEngine,
    for<'c> &'c mut <B::Db as Database>::Connection: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> bool: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> Option<i64>: Encode<'q, B::Db> + Type<B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> i64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> f64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> bool: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> (String,): FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (bool,): FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (i64,): FromRow<'r, <B::Db as Database>::Row>,
    for<'r> (String, i64, i64, i64, Option<f64>): FromRow<'r, <B::Db as Database>::Row>,
{
    async fn sessions(
        &self,
        scope: &SessionScope,
        before: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, ApiStoreError> {
        let (main, others) = match scope {
            SessionScope::All => ("%".to_owned(), "%".to_owned()),
            SessionScope::ApiChatsUnder(prefix) => chat_patterns(prefix),
        };
        let rows: Vec<(String, i64, i64, i64, Option<f64>)> = sqlx::query_as(SESSIONS_PAGE)
            .bind(main.as_str())
            .bind(others.as_str())
            .bind(millis(before))
            .bind(sql_limit(limit))
            .fetch_all(self.0.pool())
            .await
            .map_err(failed)?;
        rows.into_iter().map(summary).collect()
    }

    async fn session_messages(
        &self,
        key: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<MessagePage, ApiStoreError> {
        let rows = sqlx::query(
            "SELECT id, run_id, message_json, created_at FROM transcript \
             WHERE session_key = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
        )
        .bind(key)
        .bind(before.unwrap_or(i64::MAX))
        .bind(sql_limit(limit))
        .fetch_all(self.0.pool())
        .await
        .map_err(failed)?;
        let full = rows.len() >= limit;
        // The outbox lines in this page's span of time: up to the page after it (or
        // now), down to its oldest line (or the beginning, on the oldest page).
        let to: Option<i64> = match before {
            Some(id) => sqlx::query_scalar("SELECT created_at FROM transcript WHERE id = $1")
                .bind(id)
                .fetch_optional(self.0.pool())
                .await
                .map_err(failed)?,
            None => None,
        };
        let from = match rows.last() {
            // A time that does not decode: from the beginning (the row is left out anyway).
            Some(row) if full => lenient::column::<_, i64>(row, "created_at").map_err(failed)?.unwrap_or(i64::MIN),
            _ => i64::MIN,
        };
        let outbox = outbox_lines(self.0, key, from, to.unwrap_or(i64::MAX)).await?;
        let next = match rows.last() {
            Some(row) if full => Some(row.try_get::<i64, _>("id").map_err(failed)?),
            _ => None,
        };
        let lines = transcript_lines(key, &rows).map_err(failed)?;
        Ok(MessagePage { messages: merge(lines, outbox), before: next })
    }

    async fn delete_session(&self, key: &str) -> Result<bool, ApiStoreError> {
        let known: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE key = $1)                      OR EXISTS (SELECT 1 FROM api_outbox WHERE session_key = $1)",
        )
        .bind(key)
        .fetch_one(self.0.pool())
        .await
        .map_err(failed)?;
        if !known {
            return Ok(false);
        }
        delete_session_rows(self.0, key).await.map_err(failed)?;
        Ok(true)
    }

    async fn runs(&self, filter: &RunFilter<'_>, limit: usize) -> Result<Vec<RunView>, ApiStoreError> {
        let sql = format!(
            "SELECT {} FROM runs WHERE ($1 = '' OR session_key = $1) AND started_at < $2 \
             AND ($4 OR kind IN ({})) ORDER BY started_at DESC, run_id DESC LIMIT $3",
            crate::store::shared::runs::RUN_COLUMNS,
            crate::store::shared::runs::listed_kinds()
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(filter.session.unwrap_or(""))
            .bind(millis(filter.before))
            .bind(sql_limit(limit))
            .bind(filter.commands)
            .fetch_all(self.0.pool())
            .await
            .map_err(failed)?;
        rows.iter().map(|row| run_record(row).map(run_view).map_err(failed)).collect()
    }

    async fn run(&self, id: &str) -> Result<Option<RunView>, ApiStoreError> {
        let sql = format!("SELECT {} FROM runs WHERE run_id = $1", crate::store::shared::runs::RUN_COLUMNS);
        let Some(row) = sqlx::query(AssertSqlSafe(sql)).bind(id).fetch_optional(self.0.pool()).await.map_err(failed)?
        else {
            return Ok(None);
        };
        let mut view = run_view(run_record(&row).map_err(failed)?);
        let rows = sqlx::query("SELECT id, message_json FROM transcript WHERE run_id = $1 ORDER BY id")
            .bind(id)
            .fetch_all(self.0.pool())
            .await
            .map_err(failed)?;
        view.tool_calls = Some(tool_calls(id, &rows).map_err(failed)?);
        Ok(Some(view))
    }

    async fn keep_outbound(&self, entry: &OutboxEntry) -> Result<bool, ApiStoreError> {
        let now = now_millis();
        let json = serde_json::to_string(&entry.message).map_err(failed)?;
        let kept = sqlx::query(
            "INSERT INTO api_outbox (outbound_id, session_key, message_json, in_transcript, created_at, \
             webhook_due_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (outbound_id) DO NOTHING",
        )
        .bind(entry.message.id.as_str())
        .bind(entry.session_key.as_str())
        .bind(json.as_str())
        .bind(entry.in_transcript)
        .bind(now)
        .bind(entry.webhook.then_some(now))
        .execute(self.0.write_pool())
        .await
        .map_err(failed)?;
        Ok(kept.rows_affected() == 1)
    }

    async fn claim_webhooks(&self, lease: Duration, limit: usize) -> Result<Vec<WebhookDue>, ApiStoreError> {
        let now = now_millis();
        let until = now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        // The outer condition again: of two processes claiming at once, the second finds
        // the rows the first took no longer due.
        let rows = sqlx::query(
            "UPDATE api_outbox SET webhook_due_at = $2, webhook_attempts = webhook_attempts + 1 \
             WHERE webhook_due_at <= $1 AND seq IN (SELECT seq FROM api_outbox \
             WHERE webhook_due_at <= $1 ORDER BY webhook_due_at LIMIT $3) \
             RETURNING seq, session_key, message_json, webhook_attempts",
        )
        .bind(now)
        .bind(until)
        .bind(sql_limit(limit))
        .fetch_all(self.0.write_pool())
        .await
        .map_err(failed)?;
        let mut due = Vec::with_capacity(rows.len());
        for row in &rows {
            let seq: i64 = row.try_get("seq").map_err(failed)?;
            let session_key: String = row.try_get("session_key").map_err(failed)?;
            match outbox_message(row).map_err(failed)? {
                Ok(message) => {
                    let attempts: i64 = row.try_get("webhook_attempts").map_err(failed)?;
                    let attempt = to_u32(attempts, "webhook_attempts").map_err(failed)?;
                    due.push(WebhookDue { seq, message, session_key, attempt });
                }
                // Given up for good: claimed again after every lease, it would fill each batch.
                Err(problem) => {
                    tracing::warn!(session = %session_key, outbox_seq = seq, %problem,
                        "an outbox row is not a readable message; its webhook post is given up");
                    self.webhook_outcome(seq, None).await?;
                }
            }
        }
        Ok(due)
    }

    async fn webhook_outcome(&self, seq: i64, retry_at: Option<DateTime<Utc>>) -> Result<(), ApiStoreError> {
        sqlx::query("UPDATE api_outbox SET webhook_due_at = $2 WHERE seq = $1")
            .bind(seq)
            .bind(retry_at.map(|at| at.timestamp_millis()))
            .execute(self.0.write_pool())
            .await
            .map_err(failed)?;
        Ok(())
    }
}

#[async_trait]
impl ApiStore for SqliteStore {
    async fn sessions(
        &self,
        scope: &SessionScope,
        before: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, ApiStoreError> {
        Queries(self).sessions(scope, before, limit).await
    }

    async fn session_messages(
        &self,
        key: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<MessagePage, ApiStoreError> {
        Queries(self).session_messages(key, before, limit).await
    }

    async fn delete_session(&self, key: &str) -> Result<bool, ApiStoreError> {
        Queries(self).delete_session(key).await
    }

    async fn runs(&self, filter: &RunFilter<'_>, limit: usize) -> Result<Vec<RunView>, ApiStoreError> {
        Queries(self).runs(filter, limit).await
    }

    async fn run(&self, id: &str) -> Result<Option<RunView>, ApiStoreError> {
        Queries(self).run(id).await
    }

    async fn keep_outbound(&self, entry: &OutboxEntry) -> Result<bool, ApiStoreError> {
        Queries(self).keep_outbound(entry).await
    }

    async fn claim_webhooks(&self, lease: Duration, limit: usize) -> Result<Vec<WebhookDue>, ApiStoreError> {
        Queries(self).claim_webhooks(lease, limit).await
    }

    async fn webhook_outcome(&self, seq: i64, retry_at: Option<DateTime<Utc>>) -> Result<(), ApiStoreError> {
        Queries(self).webhook_outcome(seq, retry_at).await
    }
}

#[async_trait]
impl ApiStore for PostgresStore {
    async fn sessions(
        &self,
        scope: &SessionScope,
        before: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>, ApiStoreError> {
        Queries(self).sessions(scope, before, limit).await
    }

    async fn session_messages(
        &self,
        key: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<MessagePage, ApiStoreError> {
        Queries(self).session_messages(key, before, limit).await
    }

    async fn delete_session(&self, key: &str) -> Result<bool, ApiStoreError> {
        Queries(self).delete_session(key).await
    }

    async fn runs(&self, filter: &RunFilter<'_>, limit: usize) -> Result<Vec<RunView>, ApiStoreError> {
        Queries(self).runs(filter, limit).await
    }

    async fn run(&self, id: &str) -> Result<Option<RunView>, ApiStoreError> {
        Queries(self).run(id).await
    }

    async fn keep_outbound(&self, entry: &OutboxEntry) -> Result<bool, ApiStoreError> {
        Queries(self).keep_outbound(entry).await
    }

    async fn claim_webhooks(&self, lease: Duration, limit: usize) -> Result<Vec<WebhookDue>, ApiStoreError> {
        Queries(self).claim_webhooks(lease, limit).await
    }

    async fn webhook_outcome(&self, seq: i64, retry_at: Option<DateTime<Utc>>) -> Result<(), ApiStoreError> {
        Queries(self).webhook_outcome(seq, retry_at).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_patterns_escape_like_wildcards() {
        assert_eq!(chat_patterns("al_ice/"), ("api:al\\_ice/%".to_owned(), "%/api:al\\_ice/%".to_owned()));
    }
}
