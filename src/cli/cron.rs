//! `switchboard cron …`: the owner's view of every job: list, add, remove, pause, resume, run
//! now and history. Works on the store directly, so it needs no running daemon; `run` leaves a
//! request that the daemon's scheduler fires.

use std::io::Write as _;

use clap::{Args, Subcommand};

use super::CliError;
use crate::config::{Config, MAIN_AGENT};
use crate::scheduler::job::local_time;
use crate::scheduler::owner_job::{OWNER_LIMITS, OwnerJob};
use crate::scheduler::spec::{ScheduleSpec, job_line};
use crate::store::cron::{AddOutcome, CronStore, Payload};

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// List every job: id, name, schedule, chat, next run, last run and status
    List,
    /// Add a job
    Add(AddArgs),
    /// Remove a job and its history
    Remove { id: String },
    /// Pause a job (it keeps its place in the list)
    Pause { id: String },
    /// Resume a paused job; runs due while it was paused are not made up
    Resume { id: String },
    /// Run a job now: the running daemon fires it within a poll interval (or when it next starts)
    Run { id: String },
    /// Show a job's recent runs
    History { id: String },
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Where results go, written like a session key: telegram:-100123, telegram:-100123:topic:7,
    /// discord:55:thread:9, api:me
    #[arg(long, value_name = "CHAT")]
    to: String,
    /// Once: "+1h", "2026-12-01 09:00" (in --tz) or RFC 3339
    #[arg(long, group = "when")]
    at: Option<String>,
    /// Repeatedly: "15m", "2h", "1d", "1h30m"
    #[arg(long, group = "when")]
    every: Option<String>,
    /// A crontab expression: "0 8 * * 1-5" (5 fields, or 6 with seconds), @daily …
    #[arg(long, group = "when")]
    cron: Option<String>,
    /// IANA time zone (default: [cron] timezone, else agent.timezone)
    #[arg(long)]
    tz: Option<String>,
    /// What the agent is asked to do, or the reminder's text
    #[arg(long)]
    message: String,
    /// Deliver the message as is, without the model
    #[arg(long, conflicts_with = "isolated")]
    reminder: bool,
    /// Run in the job's own session; the reply goes to --to
    #[arg(long)]
    isolated: bool,
    /// A short name (default: the start of the message)
    #[arg(long)]
    name: Option<String>,
    /// The agent that runs the job
    #[arg(long, default_value = MAIN_AGENT)]
    agent: String,
    /// Runs missed while switchboard was down: run_once or skip
    #[arg(long, default_value = "run_once")]
    missed: String,
}

/// Runs `command` against the configured store and prints its answer.
pub(super) async fn run(config: &Config, command: CronCommand) -> Result<(), CliError> {
    let store = crate::store::open(&config.store).await?;
    let result = execute(config, &*store, command).await;
    store.close().await;
    std::io::stdout().lock().write_all(result?.as_bytes())?;
    Ok(())
}

async fn execute(config: &Config, store: &dyn CronStore, command: CronCommand) -> Result<String, CliError> {
    let now = crate::clock::now();
    Ok(match command {
        CronCommand::List => {
            let jobs = store.cron_jobs(None).await?;
            if jobs.is_empty() {
                "no cron jobs\n".to_owned()
            } else {
                jobs.iter().map(|job| format!("{}\n", job_line(job))).collect()
            }
        }
        CronCommand::Add(args) => add(config, store, args).await?,
        CronCommand::Remove { id } => {
            found(store.remove_cron_job(&id, None).await?, &id)?;
            format!("removed {id}\n")
        }
        CronCommand::Pause { id } => {
            found(store.set_cron_enabled(&id, None, false, None).await?, &id)?;
            format!("paused {id}\n")
        }
        CronCommand::Resume { id } => {
            let job = store.cron_job(&id).await?.ok_or_else(|| CliError::NoSuchJob(id.clone()))?;
            let next = job.job.schedule.next_after(now);
            found(store.set_cron_enabled(&id, None, true, next).await?, &id)?;
            match next {
                Some(next) => format!("resumed {id}; next run {}\n", local_time(next, &job.job.tz)),
                None => format!("resumed {id}; its schedule has no run left\n"),
            }
        }
        CronCommand::Run { id } => {
            found(store.request_cron_run(&id, now).await?, &id)?;
            format!(
                "run of {id} requested: a running switchboard (run or agent) fires it within its poll \
                 interval ({} ms); if none is running, it fires when one next starts\n",
                config.cron.poll_interval_ms
            )
        }
        CronCommand::History { id } => history(store, &id).await?,
    })
}

async fn add(config: &Config, store: &dyn CronStore, args: AddArgs) -> Result<String, CliError> {
    let payload = match (args.reminder, args.isolated) {
        (true, _) => Payload::Reminder,
        (_, true) => Payload::Isolated,
        _ => Payload::Turn,
    };
    let request = OwnerJob {
        to: &args.to,
        message: &args.message,
        schedule: ScheduleSpec { at: args.at.as_deref(), every: args.every.as_deref(), cron: args.cron.as_deref() },
        tz: args.tz.as_deref(),
        payload,
        name: args.name.as_deref(),
        agent: Some(&args.agent),
        missed: Some(&args.missed),
        created_by_id: "cli",
        created_by_name: "switchboard cron add",
    };
    let job = request.build(config, crate::clock::now()).map_err(CliError::Invalid)?;
    match store.add_cron_job(&job, OWNER_LIMITS).await? {
        AddOutcome::Added(job) => Ok(format!("added {}\n{}\n", job.id, job_line(&job))),
        AddOutcome::SessionFull(_) | AddOutcome::RunFull(_) => {
            Err(CliError::Invalid("the job store refused the job".into()))
        }
    }
}

async fn history(store: &dyn CronStore, id: &str) -> Result<String, CliError> {
    let job = store.cron_job(id).await?.ok_or_else(|| CliError::NoSuchJob(id.to_owned()))?;
    let runs = store.cron_history(id, usize::MAX).await?;
    if runs.is_empty() {
        return Ok(format!("{id} has not run yet\n"));
    }
    Ok(runs
        .iter()
        .map(|run| {
            let error = run.error.as_deref().map(|e| format!(" error: {e}")).unwrap_or_default();
            let note = if run.note.is_empty() { String::new() } else { format!(" — {}", run.note) };
            let id = run.inbound_id.as_deref().unwrap_or("-");
            format!("{} {} {id}{error}{note}\n", local_time(run.scheduled_for, &job.job.tz), run.status.as_str())
        })
        .collect())
}

fn found(found: bool, id: &str) -> Result<(), CliError> {
    if found { Ok(()) } else { Err(CliError::NoSuchJob(id.to_owned())) }
}
