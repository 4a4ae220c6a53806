//! Crontab parsing and evaluation, plus the `every` durations and `at` times of scheduled jobs.
//! An accepted crontab is one the `cron` crate takes as translated, re-reads to itself in its
//! normal form, survives the store's JSON, and fires: the next firing is strictly later, at a
//! whole second (minute for five fields), and found again from just before it.

#![no_main]

use chrono::{DateTime, Duration, TimeZone, Timelike, Utc};
use libfuzzer_sys::fuzz_target;
use switchboard::schedule::{Schedule, ScheduleError};

const ZONES: [&str; 5] = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"];

fn check_cron(expr: &str, tz: &str, now: DateTime<Utc>) {
    let schedule = match Schedule::cron(expr, tz) {
        Ok(schedule) => schedule,
        Err(ScheduleError::Translation { expr: translated, reason }) => {
            panic!("{expr:?} was accepted but translated to {translated:?}, which the cron crate rejects: {reason}")
        }
        Err(_) => return,
    };
    let Schedule::Cron { expr: normal, .. } = &schedule else { panic!("cron gave {schedule:?}") };
    assert_eq!(Schedule::cron(normal, tz).as_ref(), Ok(&schedule), "normal form {normal:?} reads differently");
    assert_eq!(schedule.validate(), Ok(()));
    let json = serde_json::to_string(&schedule).expect("a schedule serializes");
    assert_eq!(serde_json::from_str::<Schedule>(&json).ok().as_ref(), Some(&schedule), "store round trip");
    let with_seconds = normal.split_whitespace().count() == 6;
    let mut after = now;
    for _ in 0..3 {
        let next = schedule.next_after(after).unwrap_or_else(|| panic!("{expr:?} in {tz} never fires after {after}"));
        assert!(next > after, "{expr:?}: {next} is not after {after}");
        assert_eq!(next.nanosecond(), 0, "{expr:?}: {next} is not a whole second");
        if !with_seconds {
            assert_eq!(next.second(), 0, "{expr:?}: {next} is not a whole minute");
        }
        assert_eq!(schedule.next_after(next - Duration::seconds(1)), Some(next), "{expr:?}: {next} not found again");
        after = next;
    }
}

fn check_every_and_at(text: &str, tz: &str, now: DateTime<Utc>) {
    if let Ok(every) = Schedule::parse_duration(text) {
        assert!(every.as_secs() > 0, "{text:?} parsed to zero");
        if let Ok(schedule) = Schedule::every(every, now, std::time::Duration::from_secs(1)) {
            let next = schedule.next_after(now).expect("an interval fires");
            assert_eq!(
                (next - now).num_seconds() as u64,
                every.as_secs(),
                "{text:?}: first firing not one interval on"
            );
        }
    }
    if let Ok(schedule) = Schedule::at(text, tz, now) {
        let next = schedule.next_after(now).expect("an accepted time is in the future");
        assert!(next > now);
        assert_eq!(schedule.next_after(next), None, "a one-off fires once");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&zone, text)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(text) else { return };
    let tz = ZONES[usize::from(zone) % ZONES.len()];
    let now = Utc.with_ymd_and_hms(2026, 3, 29, 0, 30, 0).single().expect("a valid instant");
    check_cron(text, tz, now);
    check_every_and_at(text, tz, now);
});
