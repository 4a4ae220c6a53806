//! The PostgreSQL store's migrations: SQL files compiled into the binary, each applied in its
//! own transaction and recorded in `schema_migrations`, as for the SQLite store
//! (`store::migrate`). Several processes starting at once on one database take turns: each
//! holds a transaction-scoped advisory lock while it checks and applies.

use std::sync::LazyLock;

use chrono::Utc;
use sqlx::PgPool;

use crate::store::StoreError;
use crate::store::migrate::{Migration, failed};

/// Every migration this build knows, in version order. Those that create `finish_runs` from
/// 12 on are generated from the finish rule (`finish::function`): later ones supersede earlier
/// ones, so an earlier one creating today's function on a new database changes nothing.
pub(crate) static POSTGRES_MIGRATIONS: LazyLock<[Migration; 12]> = LazyLock::new(|| {
    [
        Migration { version: 1, name: "init", sql: include_str!("../../../migrations/postgres/0001_init.sql") },
        Migration {
            version: 2,
            name: "shared_dirs",
            sql: include_str!("../../../migrations/postgres/0002_shared_dirs.sql"),
        },
        Migration {
            version: 3,
            name: "deliveries",
            sql: include_str!("../../../migrations/postgres/0003_deliveries.sql"),
        },
        Migration {
            version: 4,
            name: "api_outbox",
            sql: include_str!("../../../migrations/postgres/0004_api_outbox.sql"),
        },
        Migration {
            version: 5,
            name: "session_prefs",
            sql: include_str!("../../../migrations/postgres/0005_session_prefs.sql"),
        },
        Migration {
            version: 6,
            name: "prompt_cache",
            sql: include_str!("../../../migrations/postgres/0006_prompt_cache.sql"),
        },
        Migration {
            version: 7,
            name: "approvals",
            sql: include_str!("../../../migrations/postgres/0007_approvals.sql"),
        },
        Migration {
            version: 8,
            name: "pairing_decisions",
            sql: include_str!("../../../migrations/postgres/0008_pairing_decisions.sql"),
        },
        Migration {
            version: 9,
            name: "run_payer",
            sql: include_str!("../../../migrations/postgres/0009_run_payer.sql"),
        },
        Migration {
            version: 10,
            name: "usage_cost",
            sql: include_str!("../../../migrations/postgres/0010_usage_cost.sql"),
        },
        Migration {
            version: 11,
            name: "model_windows",
            sql: include_str!("../../../migrations/postgres/0011_model_windows.sql"),
        },
        Migration { version: 12, name: "finish_rule", sql: super::finish::function() },
    ]
});

/// The fingerprint of the finish rule's function as the newest migration creating it creates
/// it (see `finish`'s test).
#[cfg(test)]
pub(super) const FINISH_RULE_FINGERPRINT: u64 = 11_161_536_843_899_666_779;

/// The advisory lock migrations hold ("sb" "mg" in ASCII); any fixed number would do.
const MIGRATION_LOCK: i64 = 0x7362_6d67;

/// Brings the database up to the newest schema this build knows; refuses one that a newer
/// build has migrated past us.
pub(super) async fn run(pool: &PgPool) -> Result<(), StoreError> {
    run_these(pool, &*POSTGRES_MIGRATIONS).await
}

async fn run_these(pool: &PgPool, migrations: &[Migration]) -> Result<(), StoreError> {
    let known = migrations.last().map_or(0, |m| m.version);
    let mut tx = pool.begin().await.map_err(|e| failed(0, "cannot start a transaction", e))?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(|e| failed(0, "cannot take the migration lock", e))?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
    )
    .execute(&mut *tx)
    .await
    .map_err(|e| failed(0, "cannot create schema_migrations", e))?;
    let current: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM schema_migrations")
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| failed(0, "cannot read schema_migrations", e))?;
    let current = current.unwrap_or(0);
    if current > known {
        return Err(StoreError::Migrate {
            version: current,
            reason: format!(
                "the database is at schema version {current}, written by a newer switchboard; \
                 this build knows up to version {known}. Upgrade switchboard or use another database"
            ),
        });
    }
    // One transaction for all: PostgreSQL's DDL is transactional, so a failed migration
    // leaves the database as it was, and the lock is held until every one is applied.
    let pending: Vec<&Migration> = migrations.iter().filter(|m| m.version > current).collect();
    for migration in &pending {
        let wrap = |e| failed(migration.version, migration.name, e);
        sqlx::raw_sql(migration.sql).execute(&mut *tx).await.map_err(wrap)?;
        sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)")
            .bind(migration.version)
            .bind(Utc::now().timestamp_millis())
            .execute(&mut *tx)
            .await
            .map_err(wrap)?;
    }
    tx.commit().await.map_err(|e| failed(known, "cannot commit the migrations", e))?;
    crate::store::migrate::report(current, &pending);
    Ok(())
}
