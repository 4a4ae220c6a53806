//! Both stores for tests that hold for either: a fresh SQLite file in a tempdir and a fresh
//! PostgreSQL database on the machine's server. [`on_both_stores!`] runs a test body on each.

#![allow(dead_code)]

use std::sync::Arc;

use switchboard::provider::ChatMessage;
use switchboard::store::postgres::PostgresStore;
use switchboard::store::sqlite::SqliteStore;
use switchboard::store::{Database, RunClaim, RunOutcome, RunStatus, Store};
use switchboard_channels::contract::Usage;
use switchboard_testkit::postgres::TempDatabase;
use tempfile::TempDir;

/// A fresh store and what keeps its data alive (the tempdir, the database).
pub struct Fresh {
    pub store: Arc<dyn Database>,
    _data: Data,
}

enum Data {
    Sqlite(TempDir),
    Postgres(TempDatabase),
}

impl Fresh {
    pub async fn sqlite() -> Fresh {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("store.db")).await.unwrap();
        Fresh { store: Arc::new(store), _data: Data::Sqlite(dir) }
    }

    pub async fn postgres() -> Fresh {
        let database = TempDatabase::create();
        let store = PostgresStore::connect(database.url()).await.unwrap();
        Fresh { store: Arc::new(store), _data: Data::Postgres(database) }
    }

    /// Another handle on the same data, as another process (or host) would open it.
    pub async fn another(&self) -> Arc<dyn Database> {
        match &self._data {
            Data::Sqlite(dir) => Arc::new(SqliteStore::open(&dir.path().join("store.db")).await.unwrap()),
            Data::Postgres(database) => Arc::new(PostgresStore::connect(database.url()).await.unwrap()),
        }
    }

    /// Runs `statement` on the store's data as another client would (to break what it wrote);
    /// returns how many rows it changed.
    pub async fn execute(&self, statement: &str) -> u64 {
        use sqlx::Connection;
        match &self._data {
            Data::Sqlite(dir) => {
                let url = format!("sqlite://{}", dir.path().join("store.db").display());
                let mut connection = sqlx::SqliteConnection::connect(&url).await.unwrap();
                let changed = sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
                    .execute(&mut connection)
                    .await
                    .unwrap()
                    .rows_affected();
                connection.close().await.unwrap();
                changed
            }
            Data::Postgres(database) => {
                let mut connection = sqlx::PgConnection::connect(database.url()).await.unwrap();
                let changed = sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
                    .execute(&mut connection)
                    .await
                    .unwrap()
                    .rows_affected();
                connection.close().await.unwrap();
                changed
            }
        }
    }

    /// The PostgreSQL database, for tests that look at it with SQL.
    pub fn database(&self) -> Option<&TempDatabase> {
        match &self._data {
            Data::Postgres(database) => Some(database),
            Data::Sqlite(_) => None,
        }
    }
}

/// `on_both_stores! { async fn name(fresh) { … } }`: the body, with `fresh` a [`Fresh`]
/// store, as two tests, `name::sqlite` and `name::postgres`.
macro_rules! on_both_stores {
    ($($(#[doc = $doc:expr])* async fn $name:ident($fresh:ident) $body:block)*) => {$(
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body($fresh: &$crate::stores::Fresh) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                body(&$crate::stores::Fresh::sqlite().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                body(&$crate::stores::Fresh::postgres().await).await;
            }
        }
    )*};
}
pub(crate) use on_both_stores;

/// A completed run's outcome with `transcript`: what a turn stores, without reply or error.
pub fn completed(transcript: Vec<ChatMessage>) -> RunOutcome {
    let usage = Usage::new(10, 5);
    let model = "m".into();
    RunOutcome {
        transcript,
        usage,
        model,
        iterations: 1,
        ..RunOutcome::without_model(RunStatus::Completed, None, None)
    }
}

/// A turn of `session` claimed by `inbound` and finished: `question`, answered `re: question`.
pub async fn finished_turn(store: &dyn Store, session: &str, inbound: &str, question: &str) {
    let RunClaim::New { run_id } = store.claim_run(inbound, session).await.unwrap() else { panic!("not new") };
    let exchange = vec![ChatMessage::user(question), ChatMessage::assistant(format!("re: {question}"), Vec::new())];
    store.finish_run(&run_id, &completed(exchange)).await.unwrap();
}
