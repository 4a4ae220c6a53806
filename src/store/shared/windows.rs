//! [`WindowStore`] for both stores (`migrations/sqlite/0025_model_windows.sql`).

use async_trait::async_trait;
use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Pool, Type};

use super::Backend;
use crate::store::StoreError;
use crate::store::values::{now_millis, to_i64, to_u64};
use crate::store::windows::{LearnedWindow, WindowStore};

#[async_trait]
impl<B> WindowStore for B
where
    B: Backend,
    for<'c> &'c Pool<B::Db>: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'q> &'q str: Encode<'q, B::Db> + Type<B::Db>,
    for<'q> i64: Encode<'q, B::Db> + Type<B::Db>,
    for<'r> (String, i64, i64): FromRow<'r, <B::Db as Database>::Row>,
{
    async fn learned_windows(&self) -> Result<Vec<LearnedWindow>, StoreError> {
        let rows: Vec<(String, i64, i64)> =
            sqlx::query_as("SELECT model, learned, configured FROM model_windows ORDER BY model")
                .fetch_all(self.pool())
                .await?;
        rows.into_iter()
            .map(|(model, window, configured)| {
                let window = to_u64(window, "model_windows.learned")?;
                let configured = to_u64(configured, "model_windows.configured")?;
                Ok(LearnedWindow { model, window, configured })
            })
            .collect()
    }

    async fn save_learned_window(&self, learned: &LearnedWindow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO model_windows (model, learned, configured, learned_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (model) DO UPDATE SET learned = excluded.learned, \
             configured = excluded.configured, learned_at = excluded.learned_at \
             WHERE model_windows.configured <> excluded.configured OR excluded.learned < model_windows.learned",
        )
        .bind(learned.model.as_str())
        .bind(to_i64(learned.window))
        .bind(to_i64(learned.configured))
        .bind(now_millis())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn forget_learned_window(&self, model: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM model_windows WHERE model = $1").bind(model).execute(self.pool()).await?;
        Ok(())
    }
}
