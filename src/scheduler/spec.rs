//! A schedule as people give it (one of `at`, `every`, `cron`, with a zone), checked against
//! the minimum interval; and jobs described in one line. Shared by the tool and the CLI.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::job::local_time;
use crate::schedule::Schedule;
use crate::store::cron::CronJob;

/// Consecutive firings of a cron expression checked against the minimum interval.
const INTERVAL_SAMPLES: usize = 12;

/// The schedule fields of a request; exactly one must be set.
#[derive(Debug, Clone, Default)]
pub struct ScheduleSpec<'a> {
    pub at: Option<&'a str>,
    pub every: Option<&'a str>,
    pub cron: Option<&'a str>,
}

impl ScheduleSpec<'_> {
    /// The schedule, or why not (a sentence the model or the owner can act on).
    pub fn build(&self, tz: &str, now: DateTime<Utc>, min_interval: Duration) -> Result<Schedule, String> {
        if let Err(unknown) = tz.parse::<crate::zone::Tz>() {
            return Err(unknown.to_string());
        }
        let schedule = match (self.at, self.every, self.cron) {
            (Some(at), None, None) => Schedule::at(at, tz, now).map_err(|e| e.to_string())?,
            (None, Some(every), None) => {
                let every = Schedule::parse_duration(every).map_err(|e| e.to_string())?;
                Schedule::every(every, now, min_interval).map_err(|e| e.to_string())?
            }
            (None, None, Some(expr)) => {
                let schedule = Schedule::cron(expr, tz).map_err(|e| e.to_string())?;
                check_cron_interval(&schedule, now, min_interval)?;
                schedule
            }
            _ => return Err("give exactly one of `at`, `every` or `cron`".into()),
        };
        Ok(schedule)
    }
}

/// Refuses a cron schedule whose firings come closer than `min_interval` (judged over its
/// next few firings), or that never fires.
fn check_cron_interval(schedule: &Schedule, now: DateTime<Utc>, min_interval: Duration) -> Result<(), String> {
    let Some(mut previous) = schedule.next_after(now) else {
        return Err("this cron expression never fires".into());
    };
    for _ in 0..INTERVAL_SAMPLES {
        let Some(next) = schedule.next_after(previous) else { break };
        if (next - previous).to_std().is_ok_and(|gap| gap < min_interval) {
            return Err(format!(
                "this schedule fires more often than the minimum interval of {}s; choose a slower one",
                min_interval.as_secs()
            ));
        }
        previous = next;
    }
    Ok(())
}

/// One line about a job: id, name, payload, schedule, next and last run, state.
pub fn job_line(job: &CronJob) -> String {
    let next = match (&job.job.next_run_at, job.enabled) {
        (None, _) => "done (will not run again)".to_owned(),
        (Some(_), false) => "paused".to_owned(),
        (Some(at), true) => format!("next {}", local_time(*at, &job.job.tz)),
    };
    let last = match (&job.last_run_at, &job.last_status) {
        (Some(at), status) => {
            let status = status.as_deref().unwrap_or("?");
            let error = job.last_error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
            format!("last {} {status}{error}", local_time(*at, &job.job.tz))
        }
        (None, _) => "never run".to_owned(),
    };
    format!(
        "{} \"{}\" [{}] {} → {}; {next}; {last}",
        job.id,
        job.job.name,
        job.job.payload.as_str(),
        job.job.schedule.describe(),
        job.job.chat.session_key(),
    )
}

/// A job's name when none is given: the start of its message.
pub fn default_name(message: &str) -> String {
    let first_line = message.lines().next().unwrap_or("").trim();
    let mut name: String = first_line.chars().take(40).collect();
    if first_line.chars().count() > 40 {
        name.push('…');
    }
    if name.is_empty() { "job".to_owned() } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z").unwrap().to_utc()
    }

    #[test]
    fn exactly_one_kind_of_schedule_is_taken() {
        let min = Duration::from_secs(60);
        let none = ScheduleSpec::default();
        assert!(none.build("UTC", now(), min).unwrap_err().contains("exactly one"));
        let both = ScheduleSpec { at: Some("+5m"), every: Some("1h"), cron: None };
        assert!(both.build("UTC", now(), min).is_err());
        let every = ScheduleSpec { every: Some("1h"), ..ScheduleSpec::default() };
        assert!(matches!(every.build("UTC", now(), min), Ok(Schedule::Every { every_secs: 3600, .. })));
    }

    #[test]
    fn fast_schedules_and_bad_zones_are_refused() {
        let min = Duration::from_secs(60);
        let every = ScheduleSpec { every: Some("30s"), ..ScheduleSpec::default() };
        assert!(every.build("UTC", now(), min).is_err());
        let cron = ScheduleSpec { cron: Some("0 8 * * *"), ..ScheduleSpec::default() };
        assert!(cron.build("Europe/Berlin", now(), min).is_ok());
        assert!(cron.build("Mars/Base", now(), min).unwrap_err().contains("IANA"));
        let hourly_limit = Duration::from_secs(2 * 3600);
        let hourly = ScheduleSpec { cron: Some("0 * * * *"), ..ScheduleSpec::default() };
        assert!(hourly.build("UTC", now(), hourly_limit).unwrap_err().contains("minimum interval"));
    }

    #[test]
    fn default_names_are_short() {
        assert_eq!(default_name("water the plants\nand the garden"), "water the plants");
        assert_eq!(default_name(&"x".repeat(50)).chars().count(), 41);
        assert_eq!(default_name(""), "job");
    }
}
