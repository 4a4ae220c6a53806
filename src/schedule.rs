//! When a scheduled job fires: once at an instant, at a fixed interval, or on a crontab
//! expression evaluated in an IANA time zone.

mod crontab;
mod local;
#[cfg(test)]
mod tests;

use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::clock::to_store_precision;
use crate::zone::{Tz, UnknownZone};
use crontab::Crontab;

/// When a job fires. Stored as JSON in the database: keep the serde shape.
///
/// Its instants are kept at the store's precision (see [`crate::clock::to_store_precision`]):
/// the constructors cut them, reading a stored schedule cuts them (jobs stored before this rule
/// carried nanoseconds), and [`Schedule::next_after`] computes at that precision whatever it
/// is given, so an occurrence read back from the store is never found "after" itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Schedule {
    /// Once, at an instant.
    At {
        #[serde(deserialize_with = "stored_time")]
        at: DateTime<Utc>,
    },
    /// Every `every_secs` seconds, counted from `anchor` (fires at anchor + k*every, k >= 1).
    Every {
        every_secs: u64,
        #[serde(deserialize_with = "stored_time")]
        anchor: DateTime<Utc>,
    },
    /// A crontab expression as users write it, evaluated in the IANA zone `tz`.
    Cron { expr: String, tz: String },
}

/// What is wrong with one crontab field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldProblem {
    #[error("{value} is out of range {min}-{max}")]
    OutOfRange { value: String, min: u8, max: u8 },
    #[error("`{0}` is not a number or a known name")]
    BadValue(String),
    #[error("range {lo}-{hi} runs backwards")]
    BackwardsRange { lo: u8, hi: u8 },
    #[error("step `{0}` is not a number from 1 to 255")]
    BadStep(String),
    #[error("step 0 never advances")]
    ZeroStep,
    #[error("empty list item")]
    Empty,
}

/// Why a schedule was rejected; the message says precisely what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "crontab needs 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading \
         seconds field, found {found}{}",
        if *found == 7 { "; a year field is not supported" } else { "" }
    )]
    FieldCount { found: usize },
    #[error("field {position} ({field}): {problem}")]
    Field { position: usize, field: &'static str, problem: FieldProblem },
    #[error(
        "unknown crontab macro `{0}`; known: @hourly @daily @midnight @weekly @monthly @yearly \
         @annually"
    )]
    UnknownMacro(String),
    #[error("the days selected by day of month and month never occur in a calendar")]
    NeverFires,
    #[error("the `cron` crate rejected the translated expression `{expr}`: {reason}")]
    Translation { expr: String, reason: String },
    #[error(transparent)]
    UnknownZone(#[from] UnknownZone),
    #[error("interval {every} is below the minimum of {min}")]
    IntervalTooShort { every: String, min: String },
    #[error("duration `{text}`: {reason}")]
    BadDuration { text: String, reason: &'static str },
    #[error(
        "cannot read `{0}` as a time; use RFC 3339 (2026-12-01T09:00:00+01:00), a local \
         \"2026-12-01 09:00\", or a relative \"+20m\" / \"in 20m\""
    )]
    BadTime(String),
    #[error("{local} does not exist in {tz}: the clocks skip over it for daylight saving time")]
    NonexistentLocalTime { local: String, tz: String },
    #[error("{at} is not in the future (now is {now})")]
    NotInFuture { at: DateTime<Utc>, now: DateTime<Utc> },
}

impl Schedule {
    /// Parses and validates a crontab expression and zone (5 fields, or 6 with a leading
    /// seconds field; also @hourly/@daily/@midnight/@weekly/@monthly/@yearly/@annually).
    pub fn cron(expr: &str, tz: &str) -> Result<Schedule, ScheduleError> {
        let zone = parse_zone(tz)?;
        compile(expr)?;
        let expr = expr.split_whitespace().collect::<Vec<_>>().join(" ");
        Ok(Schedule::Cron { expr, tz: zone.name().to_owned() })
    }

    /// `every` with a minimum interval (reject below `min`), anchored at `now`.
    pub fn every(every: Duration, now: DateTime<Utc>, min: Duration) -> Result<Schedule, ScheduleError> {
        // Whole seconds are what is stored; a sub-second remainder would be lost anyway.
        let every_secs = every.as_secs();
        if every_secs == 0 || Duration::from_secs(every_secs) < min {
            return Err(ScheduleError::IntervalTooShort {
                every: format_duration_exact(every),
                min: format_duration_exact(min),
            });
        }
        let anchor = to_store_precision(now);
        // An interval past the end of the calendar would be accepted and never fire.
        if every_next_after(every_secs, anchor, anchor).is_none() {
            return Err(ScheduleError::BadDuration { text: format_duration_exact(every), reason: "too long" });
        }
        Ok(Schedule::Every { every_secs, anchor })
    }

    /// Reads a user-friendly duration like "90s", "15m", "2h", "1d", "1h30m" (for `every` and
    /// relative `at`).
    pub fn parse_duration(text: &str) -> Result<Duration, ScheduleError> {
        parse_duration(text)
    }

    /// Reads an `at` time: RFC 3339 ("2026-12-01T09:00:00+01:00"), a local "2026-12-01 09:00" /
    /// "2026-12-01T09:00" in zone `tz`, or relative "+20m"/"in 20m" relative to `now`. Rejects
    /// times not after `now`. A repeated local time (fall-back) means the earlier instant; a
    /// local time the clocks skip is rejected, since a one-off reminder at a time that does
    /// not exist is more likely a mistake than a wish.
    pub fn at(text: &str, tz: &str, now: DateTime<Utc>) -> Result<Schedule, ScheduleError> {
        let text = text.trim();
        let at = match relative(text) {
            Some(rest) => now
                .checked_add_signed(chrono_duration(rest)?)
                .ok_or_else(|| ScheduleError::BadDuration { text: rest.to_owned(), reason: "too long" })?,
            None => absolute(text, tz)?,
        };
        let at = to_store_precision(at);
        if at <= now {
            return Err(ScheduleError::NotInFuture { at, now });
        }
        Ok(Schedule::At { at })
    }

    /// The first firing time strictly after `after`; `None` when it never fires again (an `At`
    /// in the past).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::At { at } => {
                let at = to_store_precision(*at);
                (at > after).then_some(at)
            }
            Schedule::Every { every_secs, anchor } => every_next_after(*every_secs, to_store_precision(*anchor), after),
            Schedule::Cron { expr, tz } => {
                // A stored schedule that no longer parses never fires; `validate` reports why.
                let tab = compile(expr).ok()?;
                local::next_after(&tab, &parse_zone(tz).ok()?, after)
            }
        }
    }

    /// Re-checks a stored schedule (e.g. the zone still exists): used when loading from the
    /// store.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        match self {
            Schedule::At { .. } => Ok(()),
            Schedule::Every { every_secs: 0, .. } => {
                Err(ScheduleError::IntervalTooShort { every: "0s".to_owned(), min: "1s".to_owned() })
            }
            Schedule::Every { .. } => Ok(()),
            Schedule::Cron { expr, tz } => Schedule::cron(expr, tz).map(|_| ()),
        }
    }

    /// Short human description for lists: "at 2026-12-01 08:00 UTC", "every 15m",
    /// "cron `0 9 * * 1-5` (Europe/Berlin)".
    pub fn describe(&self) -> String {
        match self {
            Schedule::At { at } => {
                let format = if at.timestamp_subsec_nanos() == 0 && at.timestamp() % 60 == 0 {
                    "%Y-%m-%d %H:%M"
                } else {
                    "%Y-%m-%d %H:%M:%S"
                };
                format!("at {} UTC", at.format(format))
            }
            Schedule::Every { every_secs, .. } => {
                format!("every {}", format_duration_exact(Duration::from_secs(*every_secs)))
            }
            Schedule::Cron { expr, tz } => format!("cron `{expr}` ({tz})"),
        }
    }
}

/// Parses the crontab and makes sure the `cron` crate accepts what we hand it.
fn compile(expr: &str) -> Result<Crontab, ScheduleError> {
    let tab = Crontab::parse(expr)?;
    for translated in tab.crate_exprs() {
        if let Err(err) = translated.parse::<cron::Schedule>() {
            return Err(ScheduleError::Translation { expr: translated, reason: err.to_string() });
        }
    }
    Ok(tab)
}

/// A stored instant, cut to the store's precision as it is read.
fn stored_time<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<DateTime<Utc>, D::Error> {
    DateTime::<Utc>::deserialize(deserializer).map(to_store_precision)
}

fn parse_zone(tz: &str) -> Result<Tz, ScheduleError> {
    Ok(tz.trim().parse::<Tz>()?)
}

/// Closed form: k = floor((after - anchor) / every) + 1, no loop over k.
fn every_next_after(every_secs: u64, anchor: DateTime<Utc>, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let every = i64::try_from(every_secs).ok().filter(|e| *e > 0)?;
    // Whole seconds elapsed, floored: firings are whole seconds after the anchor, so a
    // fractional part of `after` cannot move the answer past a firing.
    let k = if after < anchor { 1 } else { (after - anchor).num_seconds() / every + 1 };
    let offset = k.checked_mul(every)?;
    anchor.checked_add_signed(chrono::Duration::try_seconds(offset)?)
}

fn relative(text: &str) -> Option<&str> {
    if let Some(rest) = text.strip_prefix('+') {
        return Some(rest.trim());
    }
    let word = text.get(..3)?;
    word.eq_ignore_ascii_case("in ").then(|| text[3..].trim())
}

fn chrono_duration(text: &str) -> Result<chrono::Duration, ScheduleError> {
    let duration = parse_duration(text)?;
    chrono::Duration::from_std(duration)
        .map_err(|_| ScheduleError::BadDuration { text: text.to_owned(), reason: "too long" })
}

fn absolute(text: &str, tz: &str) -> Result<DateTime<Utc>, ScheduleError> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let zone = parse_zone(tz)?;
    let local = parse_local(text).ok_or_else(|| ScheduleError::BadTime(text.to_owned()))?;
    match zone.from_local_datetime(&local) {
        chrono::LocalResult::Single(at) | chrono::LocalResult::Ambiguous(at, _) => Ok(at.with_timezone(&Utc)),
        chrono::LocalResult::None => Err(ScheduleError::NonexistentLocalTime {
            local: local.format("%Y-%m-%d %H:%M").to_string(),
            tz: zone.name().to_owned(),
        }),
    }
}

/// "2026-12-01 09:00", "2026-12-01T09:00", optionally with seconds.
fn parse_local(text: &str) -> Option<NaiveDateTime> {
    let (date, time) = text.split_once([' ', 'T', 't'])?;
    let date = NaiveDate::parse_from_str(date.trim(), "%Y-%m-%d").ok()?;
    let time = time.trim();
    let time =
        NaiveTime::parse_from_str(time, "%H:%M:%S").or_else(|_| NaiveTime::parse_from_str(time, "%H:%M")).ok()?;
    Some(date.and_time(time))
}

/// "90s", "15m", "2h", "1d", "1h30m", "1w"; units may repeat in any order but not be omitted.
fn parse_duration(text: &str) -> Result<Duration, ScheduleError> {
    let bad = |reason| ScheduleError::BadDuration { text: text.to_owned(), reason };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(bad("empty"));
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in trimmed.chars().filter(|c| !c.is_whitespace()) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c.to_ascii_lowercase() {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(bad("unknown unit; use s, m, h, d or w")),
        };
        if digits.is_empty() {
            return Err(bad("a unit without a number before it"));
        }
        let n: u64 = digits.parse().map_err(|_| bad("number too large"))?;
        digits.clear();
        let secs = n.checked_mul(unit).ok_or_else(|| bad("too long"))?;
        total = total.checked_add(secs).ok_or_else(|| bad("too long"))?;
    }
    if !digits.is_empty() {
        return Err(bad("a number without a unit (s, m, h, d or w)"));
    }
    if total == 0 {
        return Err(bad("zero length"));
    }
    Ok(Duration::from_secs(total))
}

/// "1h30m", "90s" → "1m30s", "1d"; sub-second parts are shown in milliseconds.
fn format_duration_exact(d: Duration) -> String {
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, label) in [(86_400, "d"), (3600, "h"), (60, "m"), (1, "s")] {
        if secs >= unit {
            out.push_str(&format!("{}{label}", secs / unit));
            secs %= unit;
        }
    }
    let millis = d.subsec_millis();
    if millis > 0 || out.is_empty() {
        out.push_str(&format!("{millis}ms"));
    }
    out
}
