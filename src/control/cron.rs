//! Pausing, resuming and deleting cron jobs.

use chrono::{DateTime, Utc};

use super::Control;
use crate::store::StoreError;

/// What a change did to a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CronChange {
    Paused,
    /// Resumed; its next run (none when its schedule has no run left).
    Resumed(Option<DateTime<Utc>>),
    Deleted,
    /// No such job.
    Gone,
}

impl Control {
    pub async fn pause_cron(&self, id: &str) -> Result<CronChange, StoreError> {
        let found = self.store.set_cron_enabled(id, None, false, None).await?;
        Ok(if found { CronChange::Paused } else { CronChange::Gone })
    }

    /// Resumes a job from now: runs due while it was paused are not made up.
    pub async fn resume_cron(&self, id: &str) -> Result<CronChange, StoreError> {
        let Some(job) = self.store.cron_job(id).await? else {
            return Ok(CronChange::Gone);
        };
        let next = job.job.schedule.next_after(crate::clock::now());
        let found = self.store.set_cron_enabled(id, None, true, next).await?;
        Ok(if found { CronChange::Resumed(next) } else { CronChange::Gone })
    }

    /// Deletes a job and its history.
    pub async fn delete_cron(&self, id: &str) -> Result<CronChange, StoreError> {
        let found = self.store.remove_cron_job(id, None).await?;
        Ok(if found { CronChange::Deleted } else { CronChange::Gone })
    }
}
