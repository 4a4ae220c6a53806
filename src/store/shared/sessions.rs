//! [`SessionStore`] for both stores: a session's transcript, its summary and compaction, and
//! the settings its chat chose. Conditional updates decide races by the row they change, and
//! upserts create a session row on first use.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

use super::{Backend, RowsAffected, TurnReads, lenient};
use crate::config::QueueMode;
use crate::provider::ChatMessage;
use crate::store::values::{now_millis, sql_limit, to_u64};
use crate::store::{
    Conversation, HistorySummary, LastTurn, RunKind, SessionHead, SessionInfo, SessionPrefs, SessionStart,
    SessionStore, StoreError,
};

/// Longer than any compaction takes (a flush turn with its timeout plus one summary call): a
/// mark older than this belongs to a process that died mid-compaction and is taken over, so a
/// crash never blocks a session's compaction for good.
const COMPACTION_STALE_AFTER_MS: i64 = 15 * 60 * 1000;

/// One run of a session as [`SessionStore::session_info`] reads it.
fn session_run<'r, R>(row: &'r R) -> Result<LastTurn, StoreError>
where
    R: sqlx::Row,
    &'static str: sqlx::ColumnIndex<R>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    f64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let count = |column: &'static str| -> Result<u64, StoreError> { to_u64(row.try_get(column)?, column) };
    let usage = switchboard_channels::contract::Usage {
        input_tokens: count("input_tokens")?,
        output_tokens: count("output_tokens")?,
        cache_read_tokens: count("cache_read_tokens")?,
        cache_write_tokens: count("cache_write_tokens")?,
        estimated: row.try_get("usage_estimated")?,
    };
    Ok(LastTurn { usage, cost_usd: row.try_get("cost_usd")?, context_tokens: count("context_tokens")? })
}

/// The session's history version (changed by every change to what its history shows)
/// and its summary. What does not decode is left out (see `lenient`).
async fn session_head<B>(store: &B, key: &str) -> Result<SessionHead, StoreError>
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> i64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
{
    let row = sqlx::query("SELECT history_version, summary, compaction_count FROM sessions WHERE key = $1")
        .bind(key)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map_or_else(|| Ok(SessionHead::default()), |row| lenient::head(key, row))
}

/// The session's settings and head in one statement (the defaults without a row).
pub(in crate::store) async fn read_start<'c, DB, E>(executor: E, key: &str) -> Result<SessionStart, StoreError>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    <DB as Database>::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    &'static str: ColumnIndex<DB::Row>,
    for<'r> i64: Decode<'r, DB> + Type<DB>,
    for<'r> bool: Decode<'r, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
{
    let row = sqlx::query(
        "SELECT queue_mode, model, show_progress, history_version, summary, compaction_count \
         FROM sessions WHERE key = $1",
    )
    .bind(key)
    .fetch_optional(executor)
    .await?;
    let Some(row) = row else { return Ok(SessionStart::default()) };
    Ok(SessionStart { prefs: lenient::prefs(key, &row)?, head: lenient::head(key, &row)? })
}

/// The newest `limit` messages of the session's history that decode, oldest first, and
/// whether every row read decoded.
async fn read_history<B>(
    store: &B,
    session_key: &str,
    limit: usize,
) -> Result<(Vec<(i64, ChatMessage)>, bool), StoreError>
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> i64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
{
    // Rows a compaction covered are summarised on the session, rows up to
    // `archived_through` belong to conversations ended by `/new`; COALESCE: no session
    // row yet means neither.
    let rows = sqlx::query(
        "SELECT id, message_json FROM transcript WHERE session_key = $1 AND id > COALESCE(( \
         SELECT CASE WHEN compacted_through > archived_through THEN compacted_through \
         ELSE archived_through END FROM sessions WHERE key = $1), 0) \
         ORDER BY id DESC LIMIT $2",
    )
    .bind(session_key)
    .bind(sql_limit(limit))
    .fetch_all(store.pool())
    .await?;
    let (messages, skipped) = lenient::transcript(session_key, &rows)?;
    Ok((messages, skipped == 0))
}

#[async_trait]
impl<B> SessionStore for B
where
    B: TurnReads,
    for<'c> &'c mut <B::Db as Database>::Connection: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> bool: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> Option<&'q str>: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> Option<f64>: Encode<'q, B::Db> + Type<B::Db>,
    &'static str: ColumnIndex<<B::Db as Database>::Row>,
    usize: ColumnIndex<<B::Db as Database>::Row>,
    for<'r> i64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> f64: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> bool: Decode<'r, B::Db> + Type<B::Db>,
    for<'r> String: Decode<'r, B::Db> + Type<B::Db>,
{
    async fn history(&self, session_key: &str, limit: usize) -> Result<Vec<ChatMessage>, StoreError> {
        Ok(self.history_rows(session_key, limit).await?.into_iter().map(|(_, message)| message).collect())
    }

    async fn history_rows(&self, session_key: &str, limit: usize) -> Result<Vec<(i64, ChatMessage)>, StoreError> {
        Ok(read_history(self, session_key, limit).await?.0)
    }

    async fn session_summary(&self, session_key: &str) -> Result<Option<HistorySummary>, StoreError> {
        Ok(session_head(self, session_key).await?.summary)
    }

    async fn conversation(&self, session_key: &str, limit: usize) -> Result<Conversation, StoreError> {
        let head = session_head(self, session_key).await?;
        self.conversation_from(session_key, limit, head).await
    }

    async fn conversation_from(
        &self,
        session_key: &str,
        limit: usize,
        head: SessionHead,
    ) -> Result<Conversation, StoreError> {
        let SessionHead { found: true, version, summary } = head else {
            return Ok(Conversation::default());
        };
        if let Some(history) = version.and_then(|version| self.history_cache().get(session_key, version, limit)) {
            return Ok(Conversation { history, summary });
        }
        let (rows, whole) = read_history(self, session_key, limit).await?;
        let history: Vec<ChatMessage> = rows.into_iter().map(|(_, message)| message).collect();
        // Kept under the version read before the rows: should the history have changed in
        // between, the next turn reads a newer version and does not use this copy. A
        // history with rows left out is not kept: the copy counts rows to know what it
        // holds.
        if let (Some(version), true) = (version, whole) {
            self.history_cache().put(session_key, version, limit, history.clone());
        }
        Ok(Conversation { history, summary })
    }

    async fn begin_compaction(&self, session_key: &str) -> Result<bool, StoreError> {
        let now = now_millis();
        let updated = sqlx::query(
            "UPDATE sessions SET compacting_since = $1 \
             WHERE key = $2 AND (compacting_since IS NULL OR compacting_since < $3)",
        )
        .bind(now)
        .bind(session_key)
        .bind(now - COMPACTION_STALE_AFTER_MS)
        .execute(self.write_pool())
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    async fn finish_compaction(&self, session_key: &str, summary: &str, through_id: i64) -> Result<(), StoreError> {
        self.history_cache().forget(session_key);
        // A compaction never un-hides rows an earlier one covered.
        let updated = sqlx::query(
            "UPDATE sessions SET summary = $1, compacted_through = CASE WHEN compacted_through > $2 \
             THEN compacted_through ELSE $2 END, compaction_count = compaction_count + 1, \
             compacting_since = NULL, updated_at = $3, history_version = history_version + 1 \
             WHERE key = $4",
        )
        .bind(summary)
        .bind(through_id)
        .bind(now_millis())
        .bind(session_key)
        .execute(self.write_pool())
        .await?
        .rows_affected();
        if updated == 0 {
            return Err(StoreError::NoSuchSession(session_key.to_owned()));
        }
        Ok(())
    }

    async fn abort_compaction(&self, session_key: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE sessions SET compacting_since = NULL WHERE key = $1")
            .bind(session_key)
            .execute(self.write_pool())
            .await?;
        Ok(())
    }

    async fn archive_session(&self, session_key: &str) -> Result<(), StoreError> {
        self.history_cache().forget(session_key);
        // The summary belongs to the old conversation too: a new one starts without it.
        sqlx::query(
            "INSERT INTO sessions AS s (key, created_at, updated_at) VALUES ($2, $1, $1) \
             ON CONFLICT (key) DO UPDATE SET updated_at = $1, summary = NULL, \
             history_version = s.history_version + 1, \
             archived_through = COALESCE((SELECT MAX(id) FROM transcript WHERE session_key = $2), 0)",
        )
        .bind(now_millis())
        .bind(session_key)
        .execute(self.write_pool())
        .await?;
        Ok(())
    }

    async fn session_info(&self, session_key: &str) -> Result<SessionInfo, StoreError> {
        let Some(row) =
            sqlx::query("SELECT queue_mode, archived_through, compaction_count FROM sessions WHERE key = $1")
                .bind(session_key)
                .fetch_optional(self.pool())
                .await?
        else {
            return Ok(SessionInfo::default());
        };
        let archived_through: i64 = row.try_get("archived_through")?;
        let queue_mode = lenient::queue_mode(session_key, &row)?;
        let compactions = lenient::column::<_, i64>(&row, "compaction_count")?
            .and_then(|count| u64::try_from(count).map_err(|_| format!("{count} is out of range")));
        let compactions = lenient::setting(session_key, "compaction_count", compactions);
        // Runs since `/new`: from the first that wrote a transcript row after the archive
        // point on (compactions' side runs write none, and are counted too).
        let since: Option<i64> = sqlx::query_scalar(
            "SELECT MIN(r.started_at) FROM runs r JOIN transcript t ON t.run_id = r.run_id \
             WHERE t.session_key = $1 AND t.id > $2",
        )
        .bind(session_key)
        .bind(archived_through)
        .fetch_one(self.pool())
        .await?;
        let Some(since) = since else {
            return Ok(SessionInfo { queue_mode, compactions, ..SessionInfo::default() });
        };
        let rows = sqlx::query(
            "SELECT kind, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, usage_estimated, \
             cost_usd, context_tokens FROM runs \
             WHERE session_key = $1 AND started_at >= $2 AND status <> 'running' ORDER BY started_at, run_id",
        )
        .bind(session_key)
        .bind(since)
        .fetch_all(self.pool())
        .await?;
        let mut info = SessionInfo { queue_mode, compactions, cost_usd: Some(0.0), ..SessionInfo::default() };
        for row in &rows {
            let turn = session_run(row)?;
            info.used.add(turn.usage);
            info.cost_usd = match (info.cost_usd, turn.cost_usd) {
                (Some(total), Some(cost)) => Some(total + cost),
                _ if turn.usage.total() == 0 => info.cost_usd,
                _ => None,
            };
            if row.try_get::<String, _>("kind")? == RunKind::Turn.as_str() {
                info.last_turn = Some(turn);
            }
        }
        Ok(info)
    }

    async fn session_prefs(&self, session_key: &str) -> Result<SessionPrefs, StoreError> {
        Ok(self.read_session_start(session_key).await?.prefs)
    }

    async fn session_start(&self, session_key: &str) -> Result<SessionStart, StoreError> {
        self.read_session_start(session_key).await
    }

    async fn set_session_model(&self, session_key: &str, model: Option<&str>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at, model) VALUES ($1, $2, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET model = $3, updated_at = $2",
        )
        .bind(session_key)
        .bind(now_millis())
        .bind(model)
        .execute(self.write_pool())
        .await?;
        Ok(())
    }

    async fn set_verbose(&self, session_key: &str, verbose: bool) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at, show_progress) VALUES ($1, $2, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET show_progress = $3, updated_at = $2",
        )
        .bind(session_key)
        .bind(now_millis())
        .bind(verbose)
        .execute(self.write_pool())
        .await?;
        Ok(())
    }

    async fn set_queue_mode(&self, session_key: &str, mode: Option<QueueMode>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (key, created_at, updated_at, queue_mode) VALUES ($1, $2, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET queue_mode = $3, updated_at = $2",
        )
        .bind(session_key)
        .bind(now_millis())
        .bind(mode.map(QueueMode::as_str))
        .execute(self.write_pool())
        .await?;
        Ok(())
    }
}
