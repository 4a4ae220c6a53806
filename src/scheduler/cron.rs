//! The cron scheduler: finds due jobs at the injected clock's time, claims each occurrence in
//! the store (exactly once across schedulers) and publishes its system message on the bus.
//!
//! Order of a tick: scheduled occurrences, then run-now requests, then a sweep that publishes
//! every claimed-but-unpublished (`pending`) occurrence, whoever claimed it. Publishing is
//! idempotent by inbound id (bus dedupe, and one run per inbound id in the store), so a crash
//! between claim and publish loses nothing and a double publish changes nothing.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use switchboard_channels::Bus;
use switchboard_channels::bus::{BusError, BusExt};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use super::job::{Occurrence, local_time, manual_id, scheduled_id, system_message};
use crate::clock::{Clock, to_store_precision};
use crate::config::Config;
use crate::store::StoreError;
use crate::store::cron::{CronClaim, CronJob, CronRunStatus, CronStore, MissedPolicy, NewCronRun};

/// Missed occurrences counted at most; more are reported as "at least". Small, because each
/// step re-reads the schedule and this runs on the first tick after a long downtime.
const MAX_COUNTED: u32 = 1_000;

#[derive(Debug, Error)]
pub enum CronError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot publish a cron message: {0}")]
    Bus(#[from] BusError),
    #[error("cron job {0} does not exist")]
    NoSuchJob(String),
}

/// How the scheduler and the `cron` tool behave (from `[cron]`).
#[derive(Debug, Clone, PartialEq)]
pub struct CronSettings {
    pub poll_interval: Duration,
    pub missed_grace: Duration,
    pub history_limit: usize,
    pub max_jobs_per_session: usize,
    pub max_jobs_per_run: usize,
    pub max_generation: u32,
    pub min_interval: Duration,
    /// The zone of new jobs when none is given.
    pub default_timezone: String,
}

impl Default for CronSettings {
    fn default() -> Self {
        Self::from_config(&Config::default())
    }
}

impl CronSettings {
    pub fn from_config(config: &Config) -> Self {
        let cron = &config.cron;
        Self {
            poll_interval: cron.poll_interval(),
            missed_grace: cron.missed_grace(),
            history_limit: cron.history_limit,
            max_jobs_per_session: cron.max_jobs_per_session,
            max_jobs_per_run: cron.max_jobs_per_run,
            max_generation: cron.max_generation,
            min_interval: cron.min_interval(),
            default_timezone: cron.default_timezone(&config.agent.timezone).to_owned(),
        }
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Inbound ids of the occurrences this tick claimed and published.
    pub fired: Vec<String>,
    /// Ids of jobs whose missed runs were skipped.
    pub skipped: Vec<String>,
    /// Inbound ids of pending occurrences (claimed earlier, maybe by another scheduler)
    /// published by the sweep.
    pub republished: Vec<String>,
}

pub struct CronScheduler {
    store: Arc<dyn CronStore>,
    bus: Arc<dyn Bus>,
    clock: Clock,
    settings: CronSettings,
}

impl CronScheduler {
    pub fn new(store: Arc<dyn CronStore>, bus: Arc<dyn Bus>, clock: Clock, settings: CronSettings) -> Self {
        Self { store, bus, clock, settings }
    }

    /// Ticks every `poll_interval` until `shutdown` is cancelled. A failed tick is logged and
    /// the next one tries again.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut interval = tokio::time::interval(self.settings.poll_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tracing::info!(poll_ms = self.settings.poll_interval.as_millis() as u64, "cron scheduler started");
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = interval.tick() => {}
            }
            if let Err(err) = self.tick().await {
                tracing::warn!(%err, "cron tick failed; trying again at the next one");
            }
        }
        tracing::info!("cron scheduler stopped");
    }

    /// Does all work due at the clock's current time.
    pub async fn tick(&self) -> Result<TickReport, CronError> {
        let now = to_store_precision((self.clock)());
        let mut report = TickReport::default();
        for job in self.store.due_cron_jobs(now).await? {
            if let Err(err) = self.fire_due(&job, now, &mut report).await {
                tracing::warn!(job = %job.id, %err, "cannot fire a cron job; the next tick tries again");
            }
        }
        for job in self.store.requested_cron_jobs().await? {
            if let Err(err) = self.fire_requested(&job, now, &mut report).await {
                tracing::warn!(job = %job.id, %err, "cannot run a cron job on request; the next tick tries again");
            }
        }
        self.sweep_pending(now, &mut report).await?;
        Ok(report)
    }

    /// Claims the job's due occurrence (or its missed runs) and publishes it.
    async fn fire_due(&self, job: &CronJob, now: DateTime<Utc>, report: &mut TickReport) -> Result<(), CronError> {
        let Some(due) = job.job.next_run_at else { return Ok(()) };
        let schedule = &job.job.schedule;
        let late = (now - due).to_std().is_ok_and(|late| late > self.settings.missed_grace);
        if !late {
            let run = self.pending_run(scheduled_id(&job.id, due), due, String::new(), now);
            return self.claim_and_publish(job, due, schedule.next_after(due), run, now, report).await;
        }
        let missed = count_occurrences(job, due, now);
        let since = local_time(due, &job.job.tz);
        let next = schedule.next_after(now);
        match job.job.missed {
            MissedPolicy::Skip => {
                let note = format!("skipped {missed} missed run(s) due since {since} (switchboard was not running)");
                tracing::info!(job = %job.id, %note, "cron job missed runs");
                let run =
                    NewCronRun { scheduled_for: due, inbound_id: None, status: CronRunStatus::Missed, note, at: now };
                let claim = self.store.claim_cron_run(&job.id, due, next, &run, self.settings.history_limit).await?;
                if claim == CronClaim::Claimed {
                    report.skipped.push(job.id.clone());
                }
                Ok(())
            }
            MissedPolicy::RunOnce => {
                let note = format!(
                    "ran late at {}: {missed} run(s) missed since {since} (switchboard was not running)",
                    local_time(now, &job.job.tz)
                );
                let run = self.pending_run(scheduled_id(&job.id, due), due, note, now);
                self.claim_and_publish(job, due, next, run, now, report).await
            }
        }
    }

    async fn fire_requested(
        &self,
        job: &CronJob,
        now: DateTime<Utc>,
        report: &mut TickReport,
    ) -> Result<(), CronError> {
        let Some(requested) = job.run_requested_at else { return Ok(()) };
        let note = "run now on request (switchboard cron run)".to_owned();
        let run = self.pending_run(manual_id(&job.id, requested), now, note, now);
        let claim = self.store.claim_cron_request(&job.id, requested, &run, self.settings.history_limit).await?;
        if claim == CronClaim::Claimed {
            self.publish(job, &run, now).await?;
            report.fired.extend(run.inbound_id);
        }
        Ok(())
    }

    async fn claim_and_publish(
        &self,
        job: &CronJob,
        expected: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        run: NewCronRun,
        now: DateTime<Utc>,
        report: &mut TickReport,
    ) -> Result<(), CronError> {
        let claim = self.store.claim_cron_run(&job.id, expected, next, &run, self.settings.history_limit).await?;
        if claim == CronClaim::AlreadyClaimed {
            tracing::debug!(job = %job.id, "occurrence already claimed by another scheduler");
            return Ok(());
        }
        self.publish(job, &run, now).await?;
        report.fired.extend(run.inbound_id);
        Ok(())
    }

    /// Publishes an occurrence and marks it fired. A failure leaves it pending for the sweep.
    async fn publish(&self, job: &CronJob, run: &NewCronRun, now: DateTime<Utc>) -> Result<(), CronError> {
        let Some(inbound_id) = run.inbound_id.as_deref() else { return Ok(()) };
        let occurrence = Occurrence { inbound_id, scheduled_for: run.scheduled_for, note: &run.note, now };
        let msg = system_message(job, &occurrence);
        self.bus.publish_inbound(&msg).await?;
        tracing::info!(job = %job.id, inbound = %inbound_id, "cron job fired");
        self.store.mark_cron_fired(inbound_id, now).await?;
        Ok(())
    }

    /// Publishes occurrences claimed but not marked fired: a scheduler died between its claim
    /// and its publish, or its publish failed.
    async fn sweep_pending(&self, now: DateTime<Utc>, report: &mut TickReport) -> Result<(), CronError> {
        for pending in self.store.pending_cron_runs().await? {
            let Some(inbound_id) = pending.inbound_id.clone() else { continue };
            let Some(job) = self.store.cron_job(&pending.job_id).await? else { continue };
            let run = NewCronRun {
                at: now,
                ..self.pending_run(inbound_id.clone(), pending.scheduled_for, pending.note, now)
            };
            match self.publish(&job, &run, now).await {
                Ok(()) => report.republished.push(inbound_id),
                Err(err) => tracing::warn!(job = %job.id, %err, "cannot publish a pending cron run; retrying"),
            }
        }
        Ok(())
    }

    fn pending_run(
        &self,
        inbound_id: String,
        scheduled_for: DateTime<Utc>,
        note: String,
        now: DateTime<Utc>,
    ) -> NewCronRun {
        NewCronRun { scheduled_for, inbound_id: Some(inbound_id), status: CronRunStatus::Pending, note, at: now }
    }
}

/// Occurrences of `job` from `first` up to and including `now`.
fn count_occurrences(job: &CronJob, first: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let mut count = 0u32;
    let mut at = Some(first);
    while let Some(time) = at.filter(|t| *t <= now) {
        count += 1;
        if count >= MAX_COUNTED {
            return format!("at least {count}");
        }
        at = job.job.schedule.next_after(time);
    }
    count.to_string()
}
