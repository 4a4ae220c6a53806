//! `[cron]`: the cron scheduler and the limits of the `cron` tool.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CronConfig {
    /// Runs the scheduler where a worker runs and offers the `cron` tool to every agent.
    pub enabled: bool,
    /// How often the scheduler looks for due jobs, in milliseconds.
    pub poll_interval_ms: u64,
    /// Default IANA time zone of new jobs; empty = `agent.timezone`.
    pub timezone: String,
    /// A run found more than this many seconds after it was due was missed (the daemon was
    /// down): the job's missed policy applies.
    pub missed_grace_secs: u64,
    /// History rows kept per job.
    pub history_limit: usize,
    /// Unfinished jobs one session may have.
    pub max_jobs_per_session: usize,
    /// Jobs one run started by a cron job may add (0 = cron turns cannot add jobs).
    pub max_jobs_per_run: usize,
    /// How deep jobs made by cron turns may nest (a person's job is 0, its child 1, …).
    pub max_generation: u32,
    /// Schedules that fire more often than this are refused.
    pub min_interval_secs: u64,
}

impl Default for CronConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            poll_interval_ms: 1000,
            timezone: String::new(),
            missed_grace_secs: 120,
            history_limit: 20,
            max_jobs_per_session: 20,
            max_jobs_per_run: 1,
            max_generation: 3,
            min_interval_secs: 60,
        }
    }
}

impl CronConfig {
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }

    pub fn missed_grace(&self) -> Duration {
        Duration::from_secs(self.missed_grace_secs)
    }

    pub fn min_interval(&self) -> Duration {
        Duration::from_secs(self.min_interval_secs)
    }

    /// The zone new jobs get by default: `timezone`, else `agent_timezone`.
    pub fn default_timezone<'a>(&'a self, agent_timezone: &'a str) -> &'a str {
        if self.timezone.is_empty() { agent_timezone } else { &self.timezone }
    }
}

/// The first bad `[cron]` value, with its key.
pub(super) fn problem(cron: &CronConfig) -> Option<(&'static str, String)> {
    let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    for (key, value) in [
        ("cron.poll_interval_ms", cron.poll_interval_ms),
        ("cron.missed_grace_secs", cron.missed_grace_secs),
        ("cron.history_limit", as_u64(cron.history_limit)),
        ("cron.max_jobs_per_session", as_u64(cron.max_jobs_per_session)),
        ("cron.min_interval_secs", cron.min_interval_secs),
    ] {
        if value == 0 {
            return Some((key, "must be at least 1, not 0".into()));
        }
    }
    if cron.poll_interval_ms > 60_000 {
        return Some(("cron.poll_interval_ms", format!("{} is more than a minute (60000)", cron.poll_interval_ms)));
    }
    if !cron.timezone.is_empty()
        && let Err(unknown) = cron.timezone.parse::<crate::zone::Tz>()
    {
        return Some(("cron.timezone", unknown.to_string()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_their_key() {
        assert_eq!(problem(&CronConfig::default()), None);
        let zero = CronConfig { min_interval_secs: 0, ..CronConfig::default() };
        assert_eq!(problem(&zero).map(|p| p.0), Some("cron.min_interval_secs"));
        let zone = CronConfig { timezone: "Mars/Olympus".into(), ..CronConfig::default() };
        assert_eq!(problem(&zone).map(|p| p.0), Some("cron.timezone"));
        let slow = CronConfig { poll_interval_ms: 120_000, ..CronConfig::default() };
        assert_eq!(problem(&slow).map(|p| p.0), Some("cron.poll_interval_ms"));
    }

    #[test]
    fn the_default_zone_falls_back_to_the_agents() {
        assert_eq!(CronConfig::default().default_timezone("Europe/Berlin"), "Europe/Berlin");
        let own = CronConfig { timezone: "UTC".into(), ..CronConfig::default() };
        assert_eq!(own.default_timezone("Europe/Berlin"), "UTC");
    }
}
