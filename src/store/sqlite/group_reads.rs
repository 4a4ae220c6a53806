//! The reads that every turn makes, grouped like the writes (see [`Grouped`]): the sender's
//! user, the session's row when its task starts, and on NATS the chat adapter's look at how
//! far a reply got before it sends it. A read is a round trip to a reader
//! connection's thread, as a write is to the writer's; under load, the lookups asked for while
//! one is under way go together in the next statement. A lone lookup is the plain statement.

use std::sync::Arc;

use futures_util::FutureExt;
use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, Row, Sqlite, SqliteConnection, SqlitePool};

use super::grouped::{GroupOutcome, Grouped, Lane};
use crate::config::Identity;
use crate::store::shared::users::{USER_COLUMNS, UserRows, user_from_row};
use crate::store::shared::{deliveries, lenient, sessions};
use crate::store::users::User;
use crate::store::{SessionStart, StoreError};

/// A sender's user and the display name stored with the identity; `None` for a stranger.
pub(in crate::store) type Sender = Option<(User, String)>;

/// The grouped reads of one store, through its reader connections.
pub(in crate::store) struct GroupReads {
    pub senders: Arc<Grouped<Identity, Sender>>,
    /// Session keys; for each, its settings and head (the defaults for a session without a row).
    pub sessions: Arc<Grouped<String, SessionStart>>,
    /// Outbound messages as (channel, id); for each, the `steps` its delivery record holds.
    pub deliveries: Arc<Grouped<(String, String), Option<i64>>>,
}

impl std::fmt::Debug for GroupReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupReads")
    }
}

impl GroupReads {
    pub fn new(pool: &SqlitePool) -> Self {
        let lane = Lane::new(pool);
        Self {
            senders: Grouped::new(&lane, |conn, identities| senders(conn, identities).boxed()),
            sessions: Grouped::new(&lane, |conn, keys| session_starts(conn, keys).boxed()),
            deliveries: Grouped::new(&lane, |conn, messages| delivery_steps(conn, messages).boxed()),
        }
    }
}

/// The users behind `identities`, in their order. `CROSS JOIN` keeps the array the outer loop,
/// so each element is one lookup in the identities' primary key.
async fn senders(conn: &mut SqliteConnection, identities: Vec<Identity>) -> GroupOutcome<Sender> {
    let failed = |err: StoreError| err.to_string();
    if let [identity] = identities.as_slice() {
        return Sqlite::find(conn, identity).await.map(|sender| vec![sender]).map_err(failed);
    }
    let array = pairs_json(identities.iter().map(|id| [id.channel.as_str(), id.sender_id.as_str()]))?;
    let sql = format!(
        "SELECT j.key AS item, {USER_COLUMNS}, i.display_name FROM json_each($1) AS j \
         CROSS JOIN identities i ON i.channel = j.value ->> 0 AND i.sender_id = j.value ->> 1 \
         JOIN users u ON u.id = i.user_id"
    );
    let rows =
        sqlx::query(AssertSqlSafe(sql)).bind(array).fetch_all(&mut *conn).await.map_err(|err| err.to_string())?;
    let mut found: Vec<Sender> = vec![None; identities.len()];
    for row in &rows {
        let item = item_of(row, found.len())?;
        let name = row.try_get("display_name").map_err(|err| err.to_string())?;
        found[item] = Some((user_from_row(row).map_err(failed)?, name));
    }
    Ok(found)
}

/// The settings and heads of the sessions `keys`, in their order.
async fn session_starts(conn: &mut SqliteConnection, keys: Vec<String>) -> GroupOutcome<SessionStart> {
    let failed = |err: StoreError| err.to_string();
    if let [key] = keys.as_slice() {
        return sessions::read_start(conn, key).await.map(|start| vec![start]).map_err(failed);
    }
    let array = serde_json::to_string(&keys).map_err(|err| err.to_string())?;
    let rows = sqlx::query(
        "SELECT j.key AS item, s.queue_mode, s.model, s.show_progress, s.history_version, s.summary, \
         s.compaction_count FROM json_each($1) AS j CROSS JOIN sessions s ON s.key = j.value",
    )
    .bind(array)
    .fetch_all(&mut *conn)
    .await
    .map_err(|err| err.to_string())?;
    let mut starts = vec![SessionStart::default(); keys.len()];
    for row in &rows {
        let item = item_of(row, keys.len())?;
        let key = &keys[item];
        let prefs = lenient::prefs(key, row).map_err(failed)?;
        starts[item] = SessionStart { prefs, head: lenient::head(key, row).map_err(failed)? };
    }
    Ok(starts)
}

/// How far each of `messages` got on its channel, in their order.
async fn delivery_steps(conn: &mut SqliteConnection, messages: Vec<(String, String)>) -> GroupOutcome<Option<i64>> {
    if let [(channel, id)] = messages.as_slice() {
        let steps = sqlx::query_scalar(deliveries::SENT_ONE).bind(channel).bind(id).fetch_optional(conn).await;
        return steps.map(|steps| vec![steps]).map_err(|err| err.to_string());
    }
    let array = pairs_json(messages.iter().map(|(channel, id)| [channel.as_str(), id.as_str()]))?;
    let rows = sqlx::query(
        "SELECT j.key AS item, d.steps FROM json_each($1) AS j \
         CROSS JOIN deliveries d ON d.channel = j.value ->> 0 AND d.id = j.value ->> 1",
    )
    .bind(array)
    .fetch_all(&mut *conn)
    .await
    .map_err(|err| err.to_string())?;
    let mut steps = vec![None; messages.len()];
    for row in &rows {
        let item = item_of(row, steps.len())?;
        steps[item] = Some(row.try_get("steps").map_err(|err| err.to_string())?);
    }
    Ok(steps)
}

/// Pairs of text as a JSON array of two-element arrays, for `json_each`.
fn pairs_json<'a>(pairs: impl Iterator<Item = [&'a str; 2]>) -> Result<String, String> {
    serde_json::to_string(&pairs.collect::<Vec<_>>()).map_err(|err| err.to_string())
}

/// Which of the `asked` elements a row of a grouped read answers (its index in the array).
fn item_of(row: &SqliteRow, asked: usize) -> Result<usize, String> {
    let item: i64 = row.try_get("item").map_err(|err| err.to_string())?;
    usize::try_from(item)
        .ok()
        .filter(|&item| item < asked)
        .ok_or_else(|| format!("a row for element {item} of {asked}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Level;
    use crate::store::SessionStore;
    use crate::store::sqlite::SqliteStore;
    use crate::store::users::UserStore;

    /// Several lookups in one statement each get their own row, strangers and sessions
    /// without a row included, in the order asked (an item that is asked twice too).
    #[tokio::test]
    async fn a_group_of_lookups_gives_each_its_own_row_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
        let ann = Identity::new("telegram", "1");
        let bob = Identity::new("discord", "1");
        let ann_user = store.resolve_user(&ann, "Ann", Level::User).await.unwrap();
        let bob_user = store.resolve_user(&bob, "Bob", Level::Guest).await.unwrap();
        let stranger = Identity::new("telegram", "2");
        let asked = vec![bob.clone(), stranger, ann.clone(), bob];
        let mut conn = store.pool().acquire().await.unwrap();
        let found = senders(&mut conn, asked).await.unwrap();
        let names: Vec<_> = found.iter().map(|f| f.as_ref().map(|(user, name)| (user.id, name.as_str()))).collect();
        assert_eq!(names, [Some((bob_user.id, "Bob")), None, Some((ann_user.id, "Ann")), Some((bob_user.id, "Bob"))]);
        assert_eq!(found[2].as_ref().map(|(user, _)| user.level), Some(Level::User));

        store.set_verbose("telegram:1", true).await.unwrap();
        store.set_session_model("discord:1", Some("local/small")).await.unwrap();
        let keys = ["discord:1", "telegram:9", "telegram:1"].map(str::to_owned).to_vec();
        let starts = session_starts(&mut conn, keys).await.unwrap();
        let prefs: Vec<_> = starts.iter().map(|start| (start.prefs.model.as_deref(), start.prefs.verbose)).collect();
        assert_eq!(prefs, [(Some("local/small"), false), (None, false), (None, true)]);
        assert_eq!(starts[1], SessionStart::default());
        assert_eq!(starts[0], store.session_start("discord:1").await.unwrap());

        store.record_sent_grouped("telegram", "r1", -1).await.unwrap();
        store.record_sent_grouped("discord", "r1", 2).await.unwrap();
        let asked = [("discord", "r1"), ("telegram", "r2"), ("telegram", "r1")];
        let asked = asked.map(|(channel, id)| (channel.to_owned(), id.to_owned())).to_vec();
        assert_eq!(delivery_steps(&mut conn, asked).await.unwrap(), [Some(2), None, Some(-1)]);
    }
}
