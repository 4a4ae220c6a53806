//! The `cron` tool: the agent adds, lists, pauses, resumes and removes the jobs of the session
//! it runs in, and reads a job's history.
//!
//! Loops are bounded: a session has at most `max_jobs_per_session` unfinished jobs; a run a
//! cron job started may add at most `max_jobs_per_run`, and its jobs are one generation
//! deeper than the job that started it, up to `max_generation`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_channels::contract::ChatAddress;

use super::cron::CronSettings;
use super::job::{ORIGIN_KIND, local_time, parse_address};
use super::spec::{ScheduleSpec, default_name, job_line};
use crate::clock::{Clock, to_store_precision};
use crate::store::cron::{AddLimits, AddOutcome, CronStore, MissedPolicy, NewCronJob, Payload};
use crate::tools::{Tool, ToolContext, ToolError, required_str};

/// History rows the `history` action shows.
const HISTORY_SHOWN: usize = 10;

pub struct CronTool {
    store: Arc<dyn CronStore>,
    clock: Clock,
    settings: CronSettings,
}

impl CronTool {
    pub fn new(store: Arc<dyn CronStore>, clock: Clock, settings: CronSettings) -> Self {
        Self { store, clock, settings }
    }
}

fn store_error(err: impl std::fmt::Display) -> ToolError {
    ToolError::Failed(format!("the job store failed: {err}"))
}

fn text<'a>(arguments: &'a Value, key: &str) -> Option<&'a str> {
    arguments.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

#[async_trait]
impl Tool for CronTool {
    fn name(&self) -> &str {
        "cron"
    }

    fn description(&self) -> &str {
        "Schedule work for later in this chat. action=add with `message` and one of `at` (\"+20m\", \
         \"2026-12-01 09:00\", RFC 3339), `every` (\"15m\", \"1d\") or `cron` (\"0 8 * * 1-5\"); `payload`: \
         `turn` (default: you get the message in this conversation), `isolated` (you run it in a \
         separate session; your answer goes to the chat) or `reminder` (the text is sent as is, \
         without you). action=list | remove | pause | resume | history with `id`. Jobs belong to \
         this conversation."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "list", "remove", "pause", "resume", "history"]},
                "id": {"type": "string", "description": "The job id (remove, pause, resume, history)."},
                "message": {"type": "string", "description": "What to do or say when the job fires."},
                "at": {"type": "string", "description": "One run: \"+20m\", \"in 2h\", \"2026-12-01 09:00\" (in tz) or RFC 3339."},
                "every": {"type": "string", "description": "Repeat at this interval: \"90s\", \"15m\", \"2h\", \"1d\", \"1h30m\"."},
                "cron": {"type": "string", "description": "Crontab expression (5 fields, or 6 with seconds first), or @daily, @hourly…"},
                "tz": {"type": "string", "description": "IANA time zone of `at` and `cron` (default: the configured one)."},
                "payload": {"type": "string", "enum": ["turn", "isolated", "reminder"]},
                "name": {"type": "string", "description": "A short name for the job."},
                "missed": {"type": "string", "enum": ["run_once", "skip"], "description": "Runs missed while switchboard was down: one late run (default) or skip."},
                "target": {"type": "string", "description": "Another chat for the results: channel:chat_id (default: this chat)."},
                "thread_id": {"type": "string", "description": "Topic or thread in `target`."}
            },
            "required": ["action"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        match required_str(&arguments, "action")? {
            "add" => self.add(&arguments, ctx).await,
            "list" => self.list(ctx).await,
            "remove" => self.remove(&arguments, ctx).await,
            "pause" => self.set_enabled(&arguments, ctx, false).await,
            "resume" => self.set_enabled(&arguments, ctx, true).await,
            "history" => self.history(&arguments, ctx).await,
            other => Err(ToolError::InvalidArguments(format!(
                "unknown action {other:?}; use add, list, remove, pause, resume or history"
            ))),
        }
    }
}

impl CronTool {
    async fn add(&self, arguments: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let now = to_store_precision((self.clock)());
        let message = text(arguments, "message")
            .ok_or_else(|| ToolError::InvalidArguments("`message` (what to do or say) is required".into()))?;
        let tz = text(arguments, "tz").unwrap_or(&self.settings.default_timezone).to_owned();
        let spec =
            ScheduleSpec { at: text(arguments, "at"), every: text(arguments, "every"), cron: text(arguments, "cron") };
        let schedule = spec.build(&tz, now, self.settings.min_interval).map_err(ToolError::InvalidArguments)?;
        let payload = match text(arguments, "payload") {
            None => Payload::Turn,
            Some(p) => Payload::parse(p).ok_or_else(|| {
                ToolError::InvalidArguments(format!("`payload` {p:?} is not one of turn, isolated, reminder"))
            })?,
        };
        let missed = match text(arguments, "missed") {
            None => MissedPolicy::RunOnce,
            Some(m) => MissedPolicy::parse(m)
                .ok_or_else(|| ToolError::InvalidArguments(format!("`missed` {m:?} is not run_once or skip")))?,
        };
        let (generation, parent_job) = self.lineage(ctx).await?;
        let job = NewCronJob {
            name: text(arguments, "name").map_or_else(|| default_name(message), str::to_owned),
            agent: ctx.agent.clone(),
            owner_session: ctx.session_key.to_string(),
            chat: target(arguments, ctx)?,
            payload,
            message: message.to_owned(),
            next_run_at: schedule.next_after(now),
            schedule,
            tz,
            missed,
            created_by_id: ctx.sender_id.clone(),
            created_by_name: ctx.sender_name.clone(),
            created_at: now,
            generation,
            parent_job,
            created_by_run: Some(ctx.run_id.clone()),
            on_behalf_of: ctx.on_behalf_of.clone(),
        };
        let limits = AddLimits {
            max_per_session: self.settings.max_jobs_per_session,
            max_per_run: is_cron_run(ctx).then_some(self.settings.max_jobs_per_run),
        };
        match self.store.add_cron_job(&job, limits).await.map_err(store_error)? {
            AddOutcome::Added(job) => Ok(format!("Added: {}", job_line(&job))),
            AddOutcome::SessionFull(n) => Err(ToolError::Refused(format!(
                "this conversation has {n} scheduled jobs, the most allowed; remove one (action=remove) first"
            ))),
            AddOutcome::RunFull(n) => Err(ToolError::Refused(format!(
                "a run started by a scheduled job may add at most {} job(s) and this one added {n}; do not \
                 schedule more now",
                self.settings.max_jobs_per_run
            ))),
        }
    }

    /// The generation and parent of a job this run adds: a person's run makes generation 0;
    /// a run a cron job started makes its job's generation + 1, refused past the limit.
    async fn lineage(&self, ctx: &ToolContext) -> Result<(u32, Option<String>), ToolError> {
        let Some(parent_id) = ctx.origin.as_ref().filter(|_| is_cron_run(ctx)).map(|o| o.id.clone()) else {
            return Ok((0, None));
        };
        // A parent removed meanwhile counts as a person's job: its child is generation 1.
        let parent_generation =
            self.store.cron_job(&parent_id).await.map_err(store_error)?.map_or(0, |p| p.job.generation);
        let generation = parent_generation + 1;
        if generation > self.settings.max_generation {
            return Err(ToolError::Refused(format!(
                "jobs added by scheduled jobs may nest {} deep and this would be generation {generation}; \
                 do not schedule further jobs from this one",
                self.settings.max_generation
            )));
        }
        Ok((generation, Some(parent_id)))
    }

    async fn list(&self, ctx: &ToolContext) -> Result<String, ToolError> {
        let jobs = self.store.cron_jobs(Some(&ctx.session_key)).await.map_err(store_error)?;
        if jobs.is_empty() {
            return Ok("No scheduled jobs in this conversation.".into());
        }
        Ok(jobs.iter().map(job_line).collect::<Vec<_>>().join("\n"))
    }

    async fn remove(&self, arguments: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let id = required_str(arguments, "id")?.trim();
        if !self.store.remove_cron_job(id, Some(&ctx.session_key)).await.map_err(store_error)? {
            return Err(no_such_job(id));
        }
        Ok(format!("Removed job {id}."))
    }

    async fn set_enabled(&self, arguments: &Value, ctx: &ToolContext, enabled: bool) -> Result<String, ToolError> {
        let id = required_str(arguments, "id")?.trim();
        let job = self.store.cron_job(id).await.map_err(store_error)?;
        let job = job.filter(|job| job.job.owner_session == ctx.session_key).ok_or_else(|| no_such_job(id))?;
        // Runs due while paused are not made up: a resumed job runs next after now.
        let next = job.job.schedule.next_after((self.clock)());
        self.store.set_cron_enabled(id, Some(&ctx.session_key), enabled, next).await.map_err(store_error)?;
        Ok(match (enabled, next) {
            (false, _) => format!("Paused job {id}."),
            (true, Some(next)) => format!("Resumed job {id}; next run {}.", local_time(next, &job.job.tz)),
            (true, None) => format!("Resumed job {id}, but its schedule has no run left."),
        })
    }

    async fn history(&self, arguments: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let id = required_str(arguments, "id")?.trim();
        let job = self.store.cron_job(id).await.map_err(store_error)?;
        let job = job.filter(|job| job.job.owner_session == ctx.session_key).ok_or_else(|| no_such_job(id))?;
        let runs = self.store.cron_history(id, HISTORY_SHOWN).await.map_err(store_error)?;
        if runs.is_empty() {
            return Ok(format!("Job {id} has not run yet."));
        }
        let lines = runs.iter().map(|run| {
            let error = run.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default();
            let note = if run.note.is_empty() { String::new() } else { format!(" — {}", run.note) };
            format!("{} {}{error}{note}", local_time(run.scheduled_for, &job.job.tz), run.status.as_str())
        });
        Ok(lines.collect::<Vec<_>>().join("\n"))
    }
}

fn is_cron_run(ctx: &ToolContext) -> bool {
    ctx.origin.as_ref().is_some_and(|origin| origin.kind == ORIGIN_KIND)
}

fn no_such_job(id: &str) -> ToolError {
    ToolError::InvalidArguments(format!("this conversation has no job {id:?}; action=list shows its jobs"))
}

/// Where results go: `target` (+ `thread_id`), else the current chat with its topic or thread.
fn target(arguments: &Value, ctx: &ToolContext) -> Result<ChatAddress, ToolError> {
    let Some(target) = text(arguments, "target") else {
        return Ok(ChatAddress {
            channel: ctx.channel.clone(),
            chat_id: ctx.chat_id.clone(),
            thread_id: ctx.thread_id.clone(),
            is_group: ctx.is_group,
        });
    };
    let mut chat = parse_address(target).map_err(ToolError::InvalidArguments)?;
    if let Some(thread) = text(arguments, "thread_id") {
        chat.thread_id = Some(thread.to_owned());
    }
    if chat.channel == ctx.channel && chat.chat_id == ctx.chat_id {
        chat.is_group = ctx.is_group;
    }
    Ok(chat)
}
