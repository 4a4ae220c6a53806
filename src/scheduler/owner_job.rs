//! A cron job the owner adds by hand, from the shell (`switchboard cron add`) or from the web
//! console: checked against the config (the agent exists, the schedule is slow enough, the zone
//! is known) and built the same way from both.

use super::job::parse_address;
use super::spec::{ScheduleSpec, default_name};
use crate::config::{Config, MAIN_AGENT};
use crate::store::cron::{AddLimits, MissedPolicy, NewCronJob, Payload};
use chrono::{DateTime, Utc};
use switchboard_channels::contract::SessionKey;

/// The owner is not held to the agent's per-session limit.
pub const OWNER_LIMITS: AddLimits = AddLimits { max_per_session: usize::MAX, max_per_run: None };

/// What the owner asked for.
#[derive(Debug, Clone, Default)]
pub struct OwnerJob<'a> {
    /// Where results go, written like a session key.
    pub to: &'a str,
    pub message: &'a str,
    pub schedule: ScheduleSpec<'a>,
    /// IANA zone; `None`: `[cron] timezone`, else `agent.timezone`.
    pub tz: Option<&'a str>,
    pub payload: Payload,
    pub name: Option<&'a str>,
    /// `None`: the main agent.
    pub agent: Option<&'a str>,
    /// `run_once` or `skip`; `None`: `run_once`.
    pub missed: Option<&'a str>,
    /// Who added it, as the job records it: `cli`, `api:<identity>`.
    pub created_by_id: &'a str,
    pub created_by_name: &'a str,
}

impl OwnerJob<'_> {
    /// The job to store, or why not (a sentence for the owner).
    pub fn build(&self, config: &Config, now: DateTime<Utc>) -> Result<NewCronJob, String> {
        let chat = parse_address(self.to)?;
        if self.message.trim().is_empty() {
            return Err("a job needs a message".into());
        }
        let tz = self.tz.filter(|tz| !tz.is_empty()).unwrap_or(config.cron.default_timezone(&config.agent.timezone));
        let schedule = self.schedule.build(tz, now, config.cron.min_interval())?;
        let missed = self.missed.unwrap_or(MissedPolicy::RunOnce.as_str());
        let missed = MissedPolicy::parse(missed).ok_or_else(|| format!("missed {missed:?} is not run_once or skip"))?;
        let agent = self.agent.filter(|agent| !agent.is_empty()).unwrap_or(MAIN_AGENT);
        if agent != MAIN_AGENT && !config.agents.contains_key(agent) {
            return Err(format!("no agent named {agent:?} in the config"));
        }
        // Stored as text: the worker reads it back as the job's session (`SessionKey::stored`).
        let owner_session = SessionKey::of_chat(agent, &chat).into();
        Ok(NewCronJob {
            name: self
                .name
                .filter(|name| !name.trim().is_empty())
                .map_or_else(|| default_name(self.message), str::to_owned),
            agent: agent.to_owned(),
            owner_session,
            chat,
            payload: self.payload,
            message: self.message.to_owned(),
            next_run_at: schedule.next_after(now),
            schedule,
            tz: tz.to_owned(),
            missed,
            created_by_id: self.created_by_id.to_owned(),
            created_by_name: self.created_by_name.to_owned(),
            created_at: now,
            generation: 0,
            parent_job: None,
            created_by_run: None,
            on_behalf_of: None,
        })
    }
}
