//! Cron jobs and heartbeats in the console: listed with their next runs in the owner's time
//! zone, added, paused, resumed, deleted and run now.

use switchboard_channels::api::console::desk::{ConsoleError, CronAction};
use switchboard_channels::api::console::views::{CronJobItem, Decided, HeartbeatItem, NewCronJob, ScheduleView};

use super::{Console, failed};
use crate::control::CronChange;
use crate::scheduler::owner_job::{OWNER_LIMITS, OwnerJob};
use crate::scheduler::spec::ScheduleSpec;
use crate::store::cron::{AddOutcome, CronJob, Payload};

pub(super) async fn schedule(console: &Console) -> Result<ScheduleView, ConsoleError> {
    let jobs = console.store.cron_jobs(None).await.map_err(failed)?;
    let states = console.store.heartbeat_states().await.map_err(failed)?;
    let agents = console.config.agent_names();
    let heartbeats = agents
        .iter()
        .filter(|agent| console.config.heartbeat_for(agent).enabled)
        .map(|agent| {
            let config = console.config.heartbeat_for(agent);
            let state = states.get(agent.as_str());
            let hours = &config.active_hours;
            let zone = if config.timezone.is_empty() { &console.config.agent.timezone } else { &config.timezone };
            HeartbeatItem {
                agent: agent.clone(),
                every_minutes: config.every_minutes,
                target: config.target.clone(),
                active_hours: (!hours.start.is_empty()).then(|| format!("{}–{} {zone}", hours.start, hours.end)),
                next_at: state.map(|state| state.next_at),
                next: state.map(|state| console.local(state.next_at)),
                last_at: state.and_then(|state| state.last_at),
                last: state.and_then(|state| state.last_at).map(|at| console.local(at)),
                last_outcome: state.and_then(|state| state.last_outcome.clone()),
            }
        })
        .collect();
    Ok(ScheduleView {
        timezone: console.timezone().to_owned(),
        jobs: jobs.iter().map(|job| item(console, job)).collect(),
        heartbeats,
        agents,
    })
}

fn item(console: &Console, job: &CronJob) -> CronJobItem {
    let state = match (job.job.next_run_at, job.enabled) {
        (None, _) => "done",
        (Some(_), false) => "paused",
        (Some(_), true) => "active",
    };
    CronJobItem {
        id: job.id.clone(),
        name: job.job.name.clone(),
        state: state.into(),
        kind: job.job.payload.as_str().into(),
        schedule: job.job.schedule.describe(),
        to: job.job.chat.session_key(),
        agent: job.job.agent.clone(),
        message: job.job.message.clone(),
        tz: job.job.tz.clone(),
        next_run_at: job.job.next_run_at,
        next_run: job.job.next_run_at.map(|at| console.local(at)),
        last_run_at: job.last_run_at,
        last_run: job.last_run_at.map(|at| console.local(at)),
        last_status: job.last_status.clone(),
        last_error: job.last_error.clone(),
        created_by: job.job.created_by_id.clone(),
    }
}

pub(super) async fn add(console: &Console, job: &NewCronJob, by: &str) -> Result<CronJobItem, ConsoleError> {
    let kind = job.kind.as_deref().unwrap_or(Payload::Turn.as_str());
    let payload = Payload::parse(kind)
        .ok_or_else(|| ConsoleError::Invalid(format!("kind {kind:?} is not turn, reminder or isolated")))?;
    let request = OwnerJob {
        to: &job.to,
        message: &job.message,
        schedule: ScheduleSpec { at: job.at.as_deref(), every: job.every.as_deref(), cron: job.cron.as_deref() },
        tz: job.tz.as_deref(),
        payload,
        name: job.name.as_deref(),
        agent: job.agent.as_deref(),
        missed: job.missed.as_deref(),
        created_by_id: by,
        created_by_name: "owner console",
    };
    let new = request.build(&console.config, crate::clock::now()).map_err(ConsoleError::Invalid)?;
    match console.store.add_cron_job(&new, OWNER_LIMITS).await.map_err(failed)? {
        AddOutcome::Added(job) => {
            tracing::info!(id = %job.id, by, "cron job added from the owner console");
            Ok(item(console, &job))
        }
        AddOutcome::SessionFull(_) | AddOutcome::RunFull(_) => {
            Err(ConsoleError::Failed("the job store refused an owner's job".into()))
        }
    }
}

pub(super) async fn act(console: &Console, id: &str, action: CronAction, by: &str) -> Result<Decided, ConsoleError> {
    let gone = || ConsoleError::NotFound(format!("there is no cron job {id}"));
    let job = console.store.cron_job(id).await.map_err(failed)?.ok_or_else(gone)?;
    let name = &job.job.name;
    let control = &console.control;
    let change = match action {
        CronAction::Pause => control.pause_cron(id).await,
        CronAction::Resume => control.resume_cron(id).await,
        CronAction::Delete => control.delete_cron(id).await,
        CronAction::RunNow => {
            let found = console.store.request_cron_run(id, crate::clock::now()).await.map_err(failed)?;
            tracing::info!(id, by, "cron job run requested from the owner console");
            let message = format!("\"{name}\" runs within a few seconds.");
            return if found { Ok(Decided { outcome: "requested".into(), message }) } else { Err(gone()) };
        }
    };
    let (outcome, message) = match change.map_err(failed)? {
        CronChange::Paused => ("paused", format!("Paused \"{name}\".")),
        CronChange::Resumed(next) => {
            let when = next.map_or_else(
                || "its schedule has no run left".to_owned(),
                |at| format!("next run {}", console.local(at)),
            );
            ("resumed", format!("Resumed \"{name}\"; {when}."))
        }
        CronChange::Deleted => ("deleted", format!("Deleted \"{name}\".")),
        CronChange::Gone => return Err(gone()),
    };
    tracing::info!(id, by, outcome, "cron job changed from the owner console");
    Ok(Decided { outcome: outcome.into(), message })
}
