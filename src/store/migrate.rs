//! A small schema migration runner for the SQLite store.
//!
//! Migrations are SQL files compiled into the binary, so a data dir never depends on files next
//! to the executable, and the build needs no database (unlike sqlx's `migrate!`). Each one is
//! applied in its own `BEGIN IMMEDIATE` transaction and recorded in `schema_migrations`, which
//! makes start-up idempotent and safe when two processes open the same file at once.

use chrono::Utc;
use sqlx::{AssertSqlSafe, SqlitePool};

use super::StoreError;

/// One schema change, identified by a version that only ever grows.
pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration this build knows, in version order.
pub(crate) const SQLITE_MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "init", sql: include_str!("../../migrations/sqlite/0001_init.sql") },
    Migration { version: 2, name: "bus_journal", sql: include_str!("../../migrations/sqlite/0002_bus_journal.sql") },
    Migration { version: 3, name: "users", sql: include_str!("../../migrations/sqlite/0003_users.sql") },
    Migration { version: 4, name: "run_cost", sql: include_str!("../../migrations/sqlite/0004_run_cost.sql") },
    Migration { version: 5, name: "compaction", sql: include_str!("../../migrations/sqlite/0005_compaction.sql") },
    Migration { version: 6, name: "sessions", sql: include_str!("../../migrations/sqlite/0006_sessions.sql") },
    Migration { version: 7, name: "pairing", sql: include_str!("../../migrations/sqlite/0007_pairing.sql") },
    Migration { version: 8, name: "cron", sql: include_str!("../../migrations/sqlite/0008_cron.sql") },
    Migration { version: 9, name: "subagents", sql: include_str!("../../migrations/sqlite/0009_subagents.sql") },
    Migration { version: 10, name: "heartbeat", sql: include_str!("../../migrations/sqlite/0010_heartbeat.sql") },
    Migration {
        version: 11,
        name: "usage_estimated",
        sql: include_str!("../../migrations/sqlite/0011_usage_estimated.sql"),
    },
    Migration { version: 12, name: "group_usage", sql: include_str!("../../migrations/sqlite/0012_group_usage.sql") },
    Migration { version: 13, name: "memory_index", sql: include_str!("../../migrations/sqlite/0013_memory_index.sql") },
    Migration {
        version: 14,
        name: "memory_transcripts",
        sql: include_str!("../../migrations/sqlite/0014_memory_transcripts.sql"),
    },
    Migration {
        version: 15,
        name: "memory_embeddings",
        sql: include_str!("../../migrations/sqlite/0015_memory_embeddings.sql"),
    },
    Migration { version: 16, name: "turn_writes", sql: include_str!("../../migrations/sqlite/0016_turn_writes.sql") },
    Migration { version: 17, name: "deliveries", sql: include_str!("../../migrations/sqlite/0017_deliveries.sql") },
    Migration { version: 18, name: "api_outbox", sql: include_str!("../../migrations/sqlite/0018_api_outbox.sql") },
    Migration {
        version: 19,
        name: "session_prefs",
        sql: include_str!("../../migrations/sqlite/0019_session_prefs.sql"),
    },
    Migration { version: 20, name: "prompt_cache", sql: include_str!("../../migrations/sqlite/0020_prompt_cache.sql") },
    Migration { version: 21, name: "approvals", sql: include_str!("../../migrations/sqlite/0021_approvals.sql") },
    Migration {
        version: 22,
        name: "pairing_decisions",
        sql: include_str!("../../migrations/sqlite/0022_pairing_decisions.sql"),
    },
    Migration { version: 23, name: "run_payer", sql: include_str!("../../migrations/sqlite/0023_run_payer.sql") },
    Migration { version: 24, name: "usage_cost", sql: include_str!("../../migrations/sqlite/0024_usage_cost.sql") },
    Migration {
        version: 25,
        name: "model_windows",
        sql: include_str!("../../migrations/sqlite/0025_model_windows.sql"),
    },
];

/// Brings the database up to the newest schema this build knows.
///
/// Refuses a database that a newer build has migrated past us: running old code on a newer
/// schema could silently write rows the newer code misreads.
pub(crate) async fn run(pool: &SqlitePool, migrations: &[Migration]) -> Result<(), StoreError> {
    create_ledger(pool).await?;
    let known = migrations.last().map_or(0, |m| m.version);
    let current = current_version(pool).await?;
    if current > known {
        return Err(StoreError::Migrate {
            version: current,
            reason: format!(
                "the database is at schema version {current}, written by a newer switchboard; \
                 this build knows up to version {known}. Upgrade switchboard or use another data dir"
            ),
        });
    }
    let pending: Vec<&Migration> = migrations.iter().filter(|m| m.version > current).collect();
    if current == 0 && pending.len() > 1 && create_schema(pool, &pending).await {
        report(current, &pending);
        return Ok(());
    }
    let mut applied = Vec::new();
    for migration in pending {
        if apply(pool, migration).await? {
            applied.push(migration);
        }
    }
    report(current, &applied);
    Ok(())
}

/// One line for what start-up did to the schema (each migration is logged at debug): a new
/// data dir gets "created the database schema", not a line per migration.
pub(crate) fn report(before: i64, applied: &[&Migration]) {
    let Some(last) = applied.last() else { return };
    for migration in applied {
        tracing::debug!(version = migration.version, name = migration.name, "applied database migration");
    }
    if before == 0 {
        tracing::info!(version = last.version, "created the database schema");
    } else {
        let names: Vec<&str> = applied.iter().map(|migration| migration.name).collect();
        tracing::info!(from = before, to = last.version, migrations = %names.join(", "), "upgraded the database schema");
    }
}

async fn create_ledger(pool: &SqlitePool) -> Result<(), StoreError> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (\
             version BIGINT PRIMARY KEY NOT NULL, \
             applied_at BIGINT NOT NULL)",
    )
    .execute(pool)
    .await
    .map_err(|e| failed(0, "cannot create schema_migrations", e))?;
    Ok(())
}

async fn current_version(pool: &SqlitePool) -> Result<i64, StoreError> {
    let version: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM schema_migrations")
        .fetch_one(pool)
        .await
        .map_err(|e| failed(0, "cannot read schema_migrations", e))?;
    Ok(version.unwrap_or(0))
}

/// A new database's whole schema in one transaction: one write of the file instead of one per
/// migration (a first start spent 60 ms on them). False, with nothing written, when another
/// process got there first or a statement fails: the migrations are then applied one by one,
/// which names the one that fails.
async fn create_schema(pool: &SqlitePool, pending: &[&Migration]) -> bool {
    let attempt = async {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let current: Option<i64> =
            sqlx::query_scalar("SELECT MAX(version) FROM schema_migrations").fetch_one(&mut *tx).await?;
        if current.is_some() {
            return Ok(false);
        }
        let sql: String = pending.iter().map(|migration| format!("{};\n", migration.sql)).collect();
        // The build's own migration files and integer versions: no outside text.
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *tx).await?;
        let now = Utc::now().timestamp_millis();
        let rows: Vec<String> = pending.iter().map(|migration| format!("({}, {now})", migration.version)).collect();
        let ledger = format!("INSERT INTO schema_migrations (version, applied_at) VALUES {}", rows.join(", "));
        sqlx::raw_sql(AssertSqlSafe(ledger)).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(true)
    };
    match attempt.await {
        Ok(created) => created,
        Err(err) => {
            tracing::debug!(%err, "creating the schema at once failed; applying the migrations one by one");
            false
        }
    }
}

/// Applies one migration unless another process applied it since we looked: the check is
/// repeated inside the write transaction, which `BEGIN IMMEDIATE` serializes. True when this
/// process applied it.
async fn apply(pool: &SqlitePool, migration: &Migration) -> Result<bool, StoreError> {
    let version = migration.version;
    let wrap = |e| failed(version, migration.name, e);
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(wrap)?;
    let done: Option<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations WHERE version = $1")
        .bind(version)
        .fetch_optional(&mut *tx)
        .await
        .map_err(wrap)?;
    if done.is_some() {
        return Ok(false);
    }
    sqlx::raw_sql(migration.sql).execute(&mut *tx).await.map_err(wrap)?;
    sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)")
        .bind(version)
        .bind(Utc::now().timestamp_millis())
        .execute(&mut *tx)
        .await
        .map_err(wrap)?;
    tx.commit().await.map_err(wrap)?;
    Ok(true)
}

pub(crate) fn failed(version: i64, what: &str, err: sqlx::Error) -> StoreError {
    StoreError::Migrate { version, reason: format!("{what}: {err}") }
}

#[cfg(test)]
mod tests {
    use sqlx::sqlite::SqliteConnectOptions;

    use super::*;

    async fn pool(dir: &tempfile::TempDir) -> SqlitePool {
        let options = SqliteConnectOptions::new().filename(dir.path().join("m.db")).create_if_missing(true);
        SqlitePool::connect_with(options).await.unwrap()
    }

    async fn tables(pool: &SqlitePool) -> Vec<String> {
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .fetch_all(pool)
            .await
            .unwrap()
    }

    const FIRST: Migration = Migration { version: 1, name: "a", sql: "CREATE TABLE a (x INTEGER);" };

    #[tokio::test]
    async fn a_failing_migration_leaves_no_trace_and_can_be_retried() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir).await;
        run(&pool, &[FIRST]).await.unwrap();
        let broken = Migration { version: 2, name: "b", sql: "CREATE TABLE b (x INTEGER); NOT SQL;" };
        let err = run(&pool, &[FIRST, broken]).await.unwrap_err();
        assert!(matches!(err, StoreError::Migrate { version: 2, .. }), "{err}");
        // Migration 1 stays applied; migration 2's first statement was rolled back with it.
        assert_eq!(tables(&pool).await, ["a", "schema_migrations"]);

        let fixed = Migration { version: 2, name: "b", sql: "CREATE TABLE b (x INTEGER);" };
        run(&pool, &[FIRST, fixed]).await.unwrap();
        assert_eq!(tables(&pool).await, ["a", "b", "schema_migrations"]);
    }

    /// A new database gets every migration in one transaction, each recorded; when one fails
    /// there, they are applied one by one, which names the one that fails.
    #[tokio::test]
    async fn a_new_database_gets_its_whole_schema_at_once() {
        let second = || Migration { version: 2, name: "b", sql: "CREATE TABLE b (x INTEGER REFERENCES a (x));" };
        let dir = tempfile::tempdir().unwrap();
        let fresh = pool(&dir).await;
        run(&fresh, &[FIRST, second()]).await.unwrap();
        assert_eq!(tables(&fresh).await, ["a", "b", "schema_migrations"]);
        let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations ORDER BY version")
            .fetch_all(&fresh)
            .await
            .unwrap();
        assert_eq!(versions, [1, 2]);

        let other = tempfile::tempdir().unwrap();
        let fresh = pool(&other).await;
        let broken = Migration { version: 3, name: "c", sql: "CREATE TABLE c (x INTEGER); NOT SQL;" };
        let err = run(&fresh, &[FIRST, second(), broken]).await.unwrap_err();
        assert!(matches!(err, StoreError::Migrate { version: 3, .. }), "{err}");
        assert_eq!(tables(&fresh).await, ["a", "b", "schema_migrations"]);
    }

    #[tokio::test]
    async fn running_twice_applies_each_migration_once() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir).await;
        run(&pool, &[FIRST]).await.unwrap();
        // A second run would fail on CREATE TABLE if it applied the migration again.
        run(&pool, &[FIRST]).await.unwrap();
        let versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM schema_migrations").fetch_all(&pool).await.unwrap();
        assert_eq!(versions, [1]);
    }

    #[test]
    fn shipped_migrations_are_in_strictly_increasing_order() {
        let versions: Vec<i64> = SQLITE_MIGRATIONS.iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        assert_eq!(versions.first(), Some(&1));
    }
}
