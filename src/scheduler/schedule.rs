//! PLACEHOLDER for the schedule helper (replaced by the real file at merge): the public API
//! the cron scheduler codes against. `At` and `Every` work; `Cron` is only checked for its
//! field count, and `next_after` understands numeric or `*` minute and hour fields only.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, TimeZone, Timelike, Utc};
use serde::{Deserialize, Serialize};

/// When a job runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Schedule {
    At { at: DateTime<Utc> },
    Every { every_secs: u64, anchor: DateTime<Utc> },
    Cron { expr: String, tz: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0:?} is not an IANA time zone")]
    Zone(String),
    #[error("{0:?} is not a cron expression (5 or 6 fields)")]
    Cron(String),
    #[error("{0:?} is not a duration such as 90s, 15m, 2h, 1d or 1h30m")]
    Duration(String),
    #[error("{0:?} is not a time (RFC 3339, \"2026-12-01 09:00\" or \"+20m\")")]
    Time(String),
    #[error("{0} is not in the future")]
    Past(String),
    #[error("every {every:?} is more often than allowed (at most every {min:?})")]
    TooOften { every: Duration, min: Duration },
}

impl Schedule {
    pub fn cron(expr: &str, tz: &str) -> Result<Schedule, ScheduleError> {
        let _: chrono_tz::Tz = tz.parse().map_err(|_| ScheduleError::Zone(tz.to_owned()))?;
        let fields = expr.split_whitespace().count();
        if !(fields == 5 || fields == 6 || expr.trim_start().starts_with('@')) {
            return Err(ScheduleError::Cron(expr.to_owned()));
        }
        Ok(Schedule::Cron { expr: expr.trim().to_owned(), tz: tz.to_owned() })
    }

    pub fn every(every: Duration, now: DateTime<Utc>, min: Duration) -> Result<Schedule, ScheduleError> {
        if every < min || every.is_zero() {
            return Err(ScheduleError::TooOften { every, min });
        }
        Ok(Schedule::Every { every_secs: every.as_secs(), anchor: now })
    }

    pub fn parse_duration(text: &str) -> Result<Duration, ScheduleError> {
        let bad = || ScheduleError::Duration(text.to_owned());
        let (mut total, mut number) = (0u64, String::new());
        for c in text.trim().chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            let unit = match c {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86_400,
                _ => return Err(bad()),
            };
            let n: u64 = number.parse().map_err(|_| bad())?;
            total += n * unit;
            number.clear();
        }
        if !number.is_empty() || total == 0 {
            return Err(bad());
        }
        Ok(Duration::from_secs(total))
    }

    pub fn at(text: &str, tz: &str, now: DateTime<Utc>) -> Result<Schedule, ScheduleError> {
        let zone: chrono_tz::Tz = tz.parse().map_err(|_| ScheduleError::Zone(tz.to_owned()))?;
        let text = text.trim();
        let relative = text.strip_prefix('+').or_else(|| text.strip_prefix("in "));
        let at = if let Some(rest) = relative {
            now + chrono::Duration::from_std(Self::parse_duration(rest.trim())?)
                .map_err(|_| ScheduleError::Time(text.to_owned()))?
        } else if let Ok(at) = DateTime::parse_from_rfc3339(text) {
            at.with_timezone(&Utc)
        } else {
            let local = NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M")
                .map_err(|_| ScheduleError::Time(text.to_owned()))?;
            zone.from_local_datetime(&local).earliest().ok_or_else(|| ScheduleError::Time(text.to_owned()))?.to_utc()
        };
        if at <= now {
            return Err(ScheduleError::Past(at.to_rfc3339()));
        }
        Ok(Schedule::At { at })
    }

    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::At { at } => (*at > after).then_some(*at),
            Schedule::Every { every_secs, anchor } => {
                let every = i64::try_from(*every_secs).ok().filter(|&s| s > 0)?;
                if after < *anchor {
                    return Some(*anchor);
                }
                let steps = (after - *anchor).num_seconds() / every + 1;
                Some(*anchor + chrono::Duration::seconds(steps * every))
            }
            Schedule::Cron { expr, tz } => {
                let zone: chrono_tz::Tz = tz.parse().ok()?;
                let fields: Vec<&str> = expr.split_whitespace().collect();
                let (minute, hour) = match fields.len() {
                    5 => (fields[0], fields[1]),
                    6 => (fields[1], fields[2]),
                    _ => ("0", "0"),
                };
                let matches = |field: &str, value: u32| field == "*" || field.parse::<u32>() == Ok(value);
                let mut t = after.with_second(0)?.with_nanosecond(0)? + chrono::Duration::minutes(1);
                for _ in 0..(3 * 24 * 60) {
                    let local = t.with_timezone(&zone);
                    if matches(minute, local.minute()) && matches(hour, local.hour()) {
                        return Some(t);
                    }
                    t += chrono::Duration::minutes(1);
                }
                None
            }
        }
    }

    pub fn validate(&self) -> Result<(), ScheduleError> {
        match self {
            Schedule::Cron { expr, tz } => Self::cron(expr, tz).map(|_| ()),
            _ => Ok(()),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Schedule::At { at } => format!("once at {}", at.to_rfc3339()),
            Schedule::Every { every_secs, .. } => format!("every {every_secs}s"),
            Schedule::Cron { expr, tz } => format!("cron \"{expr}\" ({tz})"),
        }
    }
}
