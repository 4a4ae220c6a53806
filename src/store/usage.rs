//! Usage and cost as the owner reads them back: what finished model runs used, in short time
//! slices and by the person they were billed to, and when each person was last active. Read
//! from the runs themselves (`runs.billed_channel`, `runs.billed_sender`), not from the monthly
//! counters budgets are checked against, so any period can be asked for.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_channels::contract::Usage;

use super::StoreError;
use super::users::UserId;

/// The length of a [`UsageSlice`]: a quarter of an hour, so that slices add up to whole days
/// in any time zone (every zone's offset is a multiple of 15 minutes).
pub const SLICE_MINUTES: i64 = 15;

/// What the finished model runs that started in one slice and were billed to one person used.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageSlice {
    /// The start of the slice.
    pub start: DateTime<Utc>,
    /// The user the runs were billed to; `None`: billed to nobody (cron jobs and heartbeats
    /// acting for no one, runs from before switchboard recorded the payer).
    pub user: Option<UserId>,
    pub runs: u64,
    /// The token counts summed; `estimated` when any of them was.
    pub usage: Usage,
    /// The known costs summed, in USD.
    pub cost_usd: f64,
    /// Runs whose cost is unknown (a model without a price): not in `cost_usd`.
    pub unpriced_runs: u64,
}

/// A person's latest run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastActive {
    pub user: UserId,
    pub at: DateTime<Utc>,
}

#[async_trait]
pub trait UsageLedger: Send + Sync {
    /// The slices of finished model runs (turns, memory flushes, summaries) started in
    /// `[from, to)`, by slice and payer.
    async fn usage_slices(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<UsageSlice>, StoreError>;

    /// When each user's newest billed run started.
    async fn last_active(&self) -> Result<Vec<LastActive>, StoreError>;
}
