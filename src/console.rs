//! The owner console's desk: what the web page's admin routes (`/v1/admin/…`) do, on the store,
//! the config and the owner's operations the chat buttons and commands use ([`Control`]), so a
//! decision from the browser is the same decision as one from a chat. The API channel sees it
//! as a [`ConsoleDesk`].
//!
//! Health is the `doctor`'s, which sits above this module: the daemon hands in a
//! [`HealthProbe`].

mod cron;
mod decisions;
mod people;
mod usage;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use switchboard_channels::api::console::desk::{ApprovalDecision, ConsoleDesk, ConsoleError, CronAction};
use switchboard_channels::api::console::views::{
    ApprovalItem, CronJobItem, Decided, HealthCheck, NewCronJob, People, Person, ScheduleView, UsagePeriod, UsageReport,
};

use crate::config::Config;
use crate::control::Control;
use crate::store::StoreError;
use crate::store::roles::OwnerRecords;
use crate::store::usage::UsageLedger;

/// Runs the `doctor`'s checks for the console.
#[async_trait]
pub trait HealthProbe: Send + Sync {
    async fn examine(&self) -> Vec<HealthCheck>;
}

/// The daemon's [`ConsoleDesk`].
pub struct Console {
    control: Arc<Control>,
    /// The owner's operations' records ([`Control::store`]), read for the lists.
    store: Arc<dyn OwnerRecords>,
    /// What people used, for the usage report and when each was last active.
    usage: Arc<dyn UsageLedger>,
    config: Config,
    health: Option<Arc<dyn HealthProbe>>,
}

impl Console {
    pub fn new(
        control: Arc<Control>,
        usage: Arc<dyn UsageLedger>,
        config: Config,
        health: Option<Arc<dyn HealthProbe>>,
    ) -> Self {
        Self { store: Arc::clone(control.store()), usage, control, config, health }
    }

    /// The zone the owner reads times in: `[cron] timezone`, else `agent.timezone`.
    fn timezone(&self) -> &str {
        self.config.cron.default_timezone(&self.config.agent.timezone)
    }

    /// `at` in the owner's zone, as people read it.
    fn local(&self, at: DateTime<Utc>) -> String {
        crate::scheduler::job::local_time(at, self.timezone())
    }
}

/// A store failure, for the log (the caller is told only that it failed).
fn failed(err: StoreError) -> ConsoleError {
    ConsoleError::Failed(err.to_string())
}

#[async_trait]
impl ConsoleDesk for Console {
    async fn people(&self) -> Result<People, ConsoleError> {
        people::list(self).await
    }

    async fn set_level(&self, identity: &str, level: &str, by: &str) -> Result<Person, ConsoleError> {
        people::set_level(self, identity, level, by).await
    }

    async fn decide_pairing(
        &self,
        channel: &str,
        code: &str,
        approve: bool,
        by: &str,
    ) -> Result<Decided, ConsoleError> {
        decisions::pairing(self, channel, code, approve, by).await
    }

    async fn approvals(&self) -> Result<Vec<ApprovalItem>, ConsoleError> {
        decisions::approvals(self).await
    }

    async fn decide_approval(&self, code: &str, decision: ApprovalDecision, by: &str) -> Result<Decided, ConsoleError> {
        decisions::approval(self, code, decision, by).await
    }

    async fn schedule(&self) -> Result<ScheduleView, ConsoleError> {
        cron::schedule(self).await
    }

    async fn add_cron_job(&self, job: &NewCronJob, by: &str) -> Result<CronJobItem, ConsoleError> {
        cron::add(self, job, by).await
    }

    async fn cron_action(&self, id: &str, action: CronAction, by: &str) -> Result<Decided, ConsoleError> {
        cron::act(self, id, action, by).await
    }

    async fn usage(&self, period: UsagePeriod) -> Result<UsageReport, ConsoleError> {
        usage::report(self, period).await
    }

    async fn health(&self) -> Result<Vec<HealthCheck>, ConsoleError> {
        match &self.health {
            Some(probe) => Ok(probe.examine().await),
            None => Err(ConsoleError::Failed("this process was started without health checks".into())),
        }
    }
}
