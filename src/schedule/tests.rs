use std::time::Duration;

use chrono::{DateTime, Datelike, Timelike, Utc, Weekday};
use serde_json::json;

use super::{Schedule, ScheduleError};

mod dst;
mod oracle;

fn utc(text: &str) -> DateTime<Utc> {
    match DateTime::parse_from_rfc3339(text) {
        Ok(t) => t.with_timezone(&Utc),
        Err(err) => panic!("bad test time {text}: {err}"),
    }
}

fn cron(expr: &str, tz: &str) -> Schedule {
    match Schedule::cron(expr, tz) {
        Ok(s) => s,
        Err(err) => panic!("{expr} in {tz} rejected: {err}"),
    }
}

/// The next `n` firings after `after`, each strictly after the previous.
fn firings(schedule: &Schedule, after: &str, n: usize) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = utc(after);
    while out.len() < n {
        let Some(next) = schedule.next_after(t) else { break };
        assert!(next > t, "{schedule:?}: {next} is not after {t}");
        out.push(next);
        t = next;
    }
    out
}

fn utcs(texts: &[&str]) -> Vec<DateTime<Utc>> {
    texts.iter().map(|t| utc(t)).collect()
}

#[test]
fn weekday_numbering_follows_crontab() {
    use Weekday::*;
    // 2026-11-22 is a Sunday; walk exactly one week, in UTC.
    let cases: &[(&str, &[Weekday])] = &[
        ("0 9 * * 0", &[Sun]),
        ("0 9 * * 7", &[Sun]),
        ("0 9 * * SUN", &[Sun]),
        ("0 9 * * sun", &[Sun]),
        ("0 9 * * 1-5", &[Mon, Tue, Wed, Thu, Fri]),
        ("0 9 * * MON-FRI", &[Mon, Tue, Wed, Thu, Fri]),
        ("0 9 * * mOn-fRi", &[Mon, Tue, Wed, Thu, Fri]),
        ("0 9 * * 5-7", &[Sun, Fri, Sat]),
        ("0 9 * * FRI-SUN", &[Sun, Fri, Sat]),
        ("* * * * 6,0", &[Sun, Sat]),
        ("0 9 * * */2", &[Sun, Tue, Thu, Sat]),
        ("0 9 * * 0-6/2", &[Sun, Tue, Thu, Sat]),
        ("0 9 * * 1,3-4", &[Mon, Wed, Thu]),
        ("0 9 * * 6", &[Sat]),
    ];
    let start = utc("2026-11-22T00:00:00Z");
    let end = utc("2026-11-29T00:00:00Z");
    for (expr, expected) in cases {
        let schedule = cron(expr, "UTC");
        let mut days: Vec<Weekday> = Vec::new();
        let mut t = start;
        while let Some(next) = schedule.next_after(t).filter(|n| *n < end) {
            days.push(next.weekday());
            // One firing per day is enough to know the day fires; jump to the day's last second.
            t = next.with_hour(23).and_then(|n| n.with_minute(59)).and_then(|n| n.with_second(59)).unwrap_or(next);
        }
        assert_eq!(days, *expected, "{expr}");
    }
}

#[test]
fn fields_steps_names_and_macros() {
    let cases: &[(&str, &str, &[&str])] = &[
        ("0 0 1 JAN,jul *", "2026-11-22T00:00:00Z", &["2027-01-01T00:00:00Z", "2027-07-01T00:00:00Z"]),
        (
            "0 0 31 * *",
            "2026-01-01T00:00:00Z",
            &[
                "2026-01-31T00:00:00Z",
                "2026-03-31T00:00:00Z",
                "2026-05-31T00:00:00Z",
                "2026-07-31T00:00:00Z",
                "2026-08-31T00:00:00Z",
                "2026-10-31T00:00:00Z",
                "2026-12-31T00:00:00Z",
            ],
        ),
        ("0 12 29 2 *", "2026-01-01T00:00:00Z", &["2028-02-29T12:00:00Z", "2032-02-29T12:00:00Z"]),
        (
            "*/15 * * * *",
            "2026-11-22T10:07:30Z",
            &["2026-11-22T10:15:00Z", "2026-11-22T10:30:00Z", "2026-11-22T10:45:00Z", "2026-11-22T11:00:00Z"],
        ),
        (
            "5-59/20 * * * *",
            "2026-11-22T10:00:00Z",
            &["2026-11-22T10:05:00Z", "2026-11-22T10:25:00Z", "2026-11-22T10:45:00Z", "2026-11-22T11:05:00Z"],
        ),
        ("@daily", "2026-11-22T10:00:00Z", &["2026-11-23T00:00:00Z", "2026-11-24T00:00:00Z"]),
        ("@midnight", "2026-11-22T10:00:00Z", &["2026-11-23T00:00:00Z"]),
        ("@hourly", "2026-11-22T10:00:00Z", &["2026-11-22T11:00:00Z", "2026-11-22T12:00:00Z"]),
        ("@weekly", "2026-11-22T10:00:00Z", &["2026-11-29T00:00:00Z", "2026-12-06T00:00:00Z"]),
        ("@monthly", "2026-11-22T10:00:00Z", &["2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"]),
        ("@YEARLY", "2026-11-22T10:00:00Z", &["2027-01-01T00:00:00Z"]),
        ("@annually", "2026-11-22T10:00:00Z", &["2027-01-01T00:00:00Z"]),
        ("30 0 9 * * *", "2026-11-22T00:00:00Z", &["2026-11-22T09:00:30Z", "2026-11-23T09:00:30Z"]),
        ("*/20 * * * * *", "2026-11-22T00:00:05Z", &["2026-11-22T00:00:20Z", "2026-11-22T00:00:40Z"]),
        // `N/STEP` runs from N to the end of the range.
        ("10/20 * * * *", "2026-11-22T10:00:00Z", &["2026-11-22T10:10:00Z", "2026-11-22T10:30:00Z"]),
        // Day-of-month and day-of-week both restricted: either matches (Vixie cron).
        (
            "0 9 1 * MON",
            "2026-11-22T00:00:00Z",
            &["2026-11-23T09:00:00Z", "2026-11-30T09:00:00Z", "2026-12-01T09:00:00Z", "2026-12-07T09:00:00Z"],
        ),
        ("0 9 13 * FRI", "2026-11-22T00:00:00Z", &["2026-11-27T09:00:00Z", "2026-12-04T09:00:00Z"]),
        // A day-of-week field starting with `*` counts as unrestricted (Vixie cron), so the
        // day fields AND: the 1st, only when it is a Sunday, Tuesday, Thursday or Saturday.
        ("0 9 1 * */2", "2026-11-22T00:00:00Z", &["2026-12-01T09:00:00Z", "2027-04-01T09:00:00Z"]),
        // Only day of month restricted: weekdays do not matter.
        ("0 9 1 * *", "2026-11-22T00:00:00Z", &["2026-12-01T09:00:00Z", "2027-01-01T09:00:00Z"]),
    ];
    for (expr, after, expected) in cases {
        let schedule = cron(expr, "UTC");
        assert_eq!(firings(&schedule, after, expected.len()), utcs(expected), "{expr}");
    }
}

#[test]
fn nine_o_clock_in_zones() {
    let cases: &[(&str, &str, &str)] = &[
        ("Europe/Berlin", "2026-01-10T00:00:00Z", "2026-01-10T08:00:00Z"),
        ("Europe/Berlin", "2026-07-10T00:00:00Z", "2026-07-10T07:00:00Z"),
        ("Asia/Kolkata", "2026-01-10T00:00:00Z", "2026-01-10T03:30:00Z"),
        ("America/Los_Angeles", "2026-01-10T00:00:00Z", "2026-01-10T17:00:00Z"),
        ("America/Los_Angeles", "2026-07-10T00:00:00Z", "2026-07-10T16:00:00Z"),
        // +11:00 in the southern summer, +10:30 in winter.
        ("Australia/Lord_Howe", "2026-01-10T00:00:00Z", "2026-01-10T22:00:00Z"),
        ("Australia/Lord_Howe", "2026-07-10T00:00:00Z", "2026-07-10T22:30:00Z"),
        // +13:45 in the southern summer, +12:45 in winter.
        ("Pacific/Chatham", "2026-01-10T00:00:00Z", "2026-01-10T19:15:00Z"),
        ("Pacific/Chatham", "2026-07-10T00:00:00Z", "2026-07-10T20:15:00Z"),
        ("UTC", "2026-01-10T00:00:00Z", "2026-01-10T09:00:00Z"),
    ];
    for (tz, after, expected) in cases {
        let schedule = cron("0 9 * * *", tz);
        assert_eq!(schedule.next_after(utc(after)), Some(utc(expected)), "{tz}");
    }
}

#[test]
fn errors_name_the_field_and_value() {
    let cases: &[(&str, &str, &str)] = &[
        ("0 9 * *", "UTC", "or 6 with a leading seconds field, found 4"),
        ("0 0 9 * * * 2026", "UTC", "found 7; a year field is not supported"),
        ("", "UTC", "found 0"),
        ("60 * * * *", "UTC", "field 1 (minute): 60 is out of range 0-59"),
        ("* 24 * * *", "UTC", "field 2 (hour): 24 is out of range 0-23"),
        ("0 0 0 * *", "UTC", "field 3 (day of month): 0 is out of range 1-31"),
        ("* * * 13 *", "UTC", "field 4 (month): 13 is out of range 1-12"),
        ("* * * * 8", "UTC", "field 5 (day of week): 8 is out of range 0-7"),
        ("* * * * 300", "UTC", "field 5 (day of week): 300 is out of range 0-7"),
        ("0 9 * * FUN", "UTC", "field 5 (day of week): `FUN` is not a number or a known name"),
        ("0 9 * JANUARY *", "UTC", "field 4 (month): `JANUARY` is not a number or a known name"),
        ("0 9 * * -1", "UTC", "field 5 (day of week): `` is not a number or a known name"),
        ("0 9 * * 5-1", "UTC", "field 5 (day of week): range 5-1 runs backwards"),
        ("*/0 * * * *", "UTC", "field 1 (minute): step 0 never advances"),
        ("*/x * * * *", "UTC", "field 1 (minute): step `x` is not a number"),
        ("0 9 1,,2 * *", "UTC", "field 3 (day of month): empty list item"),
        ("61 0 9 * * *", "UTC", "field 1 (second): 61 is out of range 0-59"),
        ("0 60 9 * * *", "UTC", "field 2 (minute): 60 is out of range 0-59"),
        ("@fortnightly", "UTC", "unknown crontab macro `@fortnightly`"),
        ("0 0 30 2 *", "UTC", "never occur in a calendar"),
        ("0 0 31 4,6,9,11 *", "UTC", "never occur in a calendar"),
        ("0 9 * * *", "Mars/Olympus", "\"Mars/Olympus\" is not an IANA time zone name"),
    ];
    for (expr, tz, message) in cases {
        match Schedule::cron(expr, tz) {
            Ok(s) => panic!("{expr:?} in {tz} accepted as {s:?}"),
            Err(err) => assert!(err.to_string().contains(message), "{expr:?}: `{err}` lacks `{message}`"),
        }
    }
}

#[test]
fn cron_normalises_spacing_and_zone_name() {
    let schedule = cron("  0   9 * *\t1-5 ", " Europe/Berlin");
    assert_eq!(schedule, Schedule::Cron { expr: "0 9 * * 1-5".into(), tz: "Europe/Berlin".into() });
    assert_eq!(schedule.describe(), "cron `0 9 * * 1-5` (Europe/Berlin)");
    assert_eq!(schedule.validate(), Ok(()));
}

#[test]
fn every_fires_on_the_anchor_grid() {
    let now = utc("2026-01-01T00:00:00Z");
    let schedule = match Schedule::every(Duration::from_secs(900), now, Duration::from_secs(60)) {
        Ok(s) => s,
        Err(err) => panic!("{err}"),
    };
    let cases: &[(&str, &str)] = &[
        ("2025-12-31T12:00:00Z", "2026-01-01T00:15:00Z"),
        ("2026-01-01T00:00:00Z", "2026-01-01T00:15:00Z"),
        ("2026-01-01T00:14:59.500Z", "2026-01-01T00:15:00Z"),
        // Exactly at a firing: the following one.
        ("2026-01-01T00:15:00Z", "2026-01-01T00:30:00Z"),
        ("2026-01-01T00:15:00.001Z", "2026-01-01T00:30:00Z"),
        // A century later, computed directly; DST plays no part.
        ("2126-01-01T00:07:00Z", "2126-01-01T00:15:00Z"),
    ];
    for (after, expected) in cases {
        assert_eq!(schedule.next_after(utc(after)), Some(utc(expected)), "after {after}");
    }
    assert_eq!(schedule.describe(), "every 15m");
}

#[test]
fn every_rejects_an_interval_that_would_never_fire() {
    // Found by fuzzing: "1M1m301118m…" parsed to an interval past the end of the calendar, and
    // the job was created but could never fire.
    let now = utc("2026-01-01T00:00:00Z");
    let huge = Schedule::parse_duration("9999999999999w").unwrap();
    let err = Schedule::every(huge, now, Duration::from_secs(60)).err().map(|e| e.to_string());
    assert_eq!(err.as_deref(), Some("duration `69999999999993d`: too long"));
    let long = Schedule::every(Duration::from_secs(100 * 365 * 86_400), now, Duration::from_secs(60)).unwrap();
    assert!(long.next_after(now).is_some_and(|next| next > now));
}

#[test]
fn every_rejects_short_intervals() {
    let now = utc("2026-01-01T00:00:00Z");
    let min = Duration::from_secs(60);
    let err = Schedule::every(Duration::from_secs(30), now, min).err();
    assert_eq!(err.map(|e| e.to_string()), Some("interval 30s is below the minimum of 1m".to_owned()));
    assert!(Schedule::every(Duration::ZERO, now, Duration::ZERO).is_err());
    assert!(Schedule::every(Duration::from_secs(60), now, min).is_ok());
    // Stored as whole seconds: 1.5s would be kept as 1s, below a 1.2s minimum.
    assert!(Schedule::every(Duration::from_millis(1500), now, Duration::from_millis(1200)).is_err());
    let stored_zero = Schedule::Every { every_secs: 0, anchor: now };
    assert!(stored_zero.validate().is_err());
    assert_eq!(stored_zero.next_after(now), None);
}

#[test]
fn durations() {
    let good: &[(&str, u64)] =
        &[("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86_400), ("1h30m", 5400), ("1H 30M", 5400), ("1w", 604_800)];
    for (text, secs) in good {
        assert_eq!(Schedule::parse_duration(text), Ok(Duration::from_secs(*secs)), "{text}");
    }
    let bad: &[(&str, &str)] = &[
        ("", "empty"),
        ("15", "a number without a unit"),
        ("m", "a unit without a number"),
        ("15x", "unknown unit"),
        ("0m", "zero length"),
        ("-5m", "unknown unit"),
        ("99999999999999999999s", "number too large"),
    ];
    for (text, reason) in bad {
        match Schedule::parse_duration(text) {
            Ok(d) => panic!("{text:?} read as {d:?}"),
            Err(err) => {
                let message = err.to_string();
                assert!(message.contains(reason) && message.contains(&format!("`{text}`")), "{message}");
            }
        }
    }
}

#[test]
fn at_reads_absolute_local_and_relative_times() {
    let now = utc("2026-11-22T10:00:00Z");
    let cases: &[(&str, &str, &str)] = &[
        ("2026-12-01T09:00:00+01:00", "UTC", "2026-12-01T08:00:00Z"),
        ("2026-12-01T09:00:00Z", "Asia/Kolkata", "2026-12-01T09:00:00Z"),
        ("2026-12-01 09:00", "Europe/Berlin", "2026-12-01T08:00:00Z"),
        ("2026-12-01T09:00", "Asia/Kolkata", "2026-12-01T03:30:00Z"),
        ("2026-12-01 09:00:30", "UTC", "2026-12-01T09:00:30Z"),
        // Fall-back repeats 01:30 in New York in 2027 too (Nov 7): the earlier one.
        ("2027-11-07 01:30", "America/New_York", "2027-11-07T05:30:00Z"),
        ("+20m", "UTC", "2026-11-22T10:20:00Z"),
        ("in 2h", "UTC", "2026-11-22T12:00:00Z"),
        ("In 1h30m", "UTC", "2026-11-22T11:30:00Z"),
    ];
    for (text, tz, expected) in cases {
        assert_eq!(Schedule::at(text, tz, now), Ok(Schedule::At { at: utc(expected) }), "{text} in {tz}");
    }
}

#[test]
fn at_rejects_past_missing_and_unreadable_times() {
    let now = utc("2026-11-22T10:00:00Z");
    let cases: &[(&str, &str, &str)] = &[
        ("2020-01-01T00:00:00Z", "UTC", "is not in the future"),
        ("2026-11-22 10:00", "UTC", "is not in the future"),
        // Spring forward skips 02:00-03:00 in New York on 2027-03-14.
        ("2027-03-14 02:30", "America/New_York", "2027-03-14 02:30 does not exist in America/New_York"),
        ("tomorrow", "UTC", "cannot read `tomorrow` as a time"),
        ("2026-12-01 09:00", "Mars/Olympus", "\"Mars/Olympus\" is not an IANA time zone name"),
        ("+soon", "UTC", "duration `soon`"),
        ("in 9999999999w", "UTC", "duration `9999999999w`: too long"),
    ];
    for (text, tz, message) in cases {
        match Schedule::at(text, tz, now) {
            Ok(s) => panic!("{text:?} accepted as {s:?}"),
            Err(err) => assert!(err.to_string().contains(message), "{text:?}: `{err}` lacks `{message}`"),
        }
    }
    let at = Schedule::At { at: utc("2026-12-01T08:00:00Z") };
    assert_eq!(at.next_after(utc("2026-12-01T08:00:00Z")), None);
    assert_eq!(at.next_after(now), Some(utc("2026-12-01T08:00:00Z")));
    assert_eq!(at.describe(), "at 2026-12-01 08:00 UTC");
}

#[test]
fn serde_shape_round_trips() {
    let cases = [
        (Schedule::At { at: utc("2026-12-01T08:00:00Z") }, json!({"kind": "at", "at": "2026-12-01T08:00:00Z"})),
        (
            Schedule::Every { every_secs: 900, anchor: utc("2026-01-01T00:00:00Z") },
            json!({"kind": "every", "every_secs": 900, "anchor": "2026-01-01T00:00:00Z"}),
        ),
        (cron("0 9 * * 1-5", "Europe/Berlin"), json!({"kind": "cron", "expr": "0 9 * * 1-5", "tz": "Europe/Berlin"})),
    ];
    for (schedule, shape) in cases {
        assert_eq!(serde_json::to_value(&schedule).ok(), Some(shape.clone()));
        assert_eq!(serde_json::from_value::<Schedule>(shape).ok(), Some(schedule));
    }
}

#[test]
fn validate_catches_stored_schedules_gone_bad() {
    let gone = Schedule::Cron { expr: "0 9 * * *".into(), tz: "Mars/Olympus".into() };
    assert_eq!(gone.validate(), Err(ScheduleError::from("Mars/Olympus".parse::<crate::zone::Tz>().unwrap_err())));
    assert_eq!(gone.next_after(utc("2026-01-01T00:00:00Z")), None);
    // The end of time is not a panic: the crate's calendar stops in 2100.
    assert_eq!(cron("0 * * * *", "Europe/Berlin").next_after(DateTime::<Utc>::MAX_UTC), None);
    assert_eq!(cron("0 * * * *", "Europe/Berlin").next_after(utc("2100-12-31T23:30:00Z")), None);
    let first = cron("0 0 1 1 *", "America/New_York").next_after(DateTime::<Utc>::MIN_UTC);
    assert_eq!(first, Some(utc("1970-01-01T05:00:00Z")));
    let garbled = Schedule::Cron { expr: "0 9 * * 9".into(), tz: "UTC".into() };
    assert!(garbled.validate().is_err());
}
