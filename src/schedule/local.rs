//! Cron firing times in a zone's wall-clock time, with daylight-saving rules.
//!
//! Candidates come from the `cron` crate evaluated over naive local time (dressed as UTC so the
//! crate sees no offsets), then each candidate is mapped to a real instant:
//! - a wall time that exists once → that instant;
//! - a repeated wall time (fall-back) → the earlier instant; jobs that select every hour also
//!   fire at the later one, so they keep running every real hour;
//! - a skipped wall time (spring-forward gap) → the first instant after the gap, as Vixie cron
//!   does; several skipped times collapse into that one firing.

use chrono::{DateTime, Datelike, Duration, NaiveDateTime, Offset, TimeZone, Timelike, Utc};

use super::crontab::Crontab;
use crate::zone::Tz;

/// 1900-01-01T00:00:00Z: earlier than any firing the crate can produce (it starts in 1970).
const CALENDAR_START: i64 = -2_208_988_800;

/// Which instant a repeated wall time maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Earlier,
    Later,
}

/// The first firing strictly after `after`, or `None` if the expression never fires again
/// (within the crate's calendar, which ends in 2100).
pub(super) fn next_after(tab: &Crontab, tz: &Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    // Outside the crate's calendar there is nothing to find, and near chrono's limits a zone
    // offset would overflow the wall-clock conversion.
    if after.year() > 2100 {
        return None;
    }
    let after = after.max(DateTime::from_timestamp(CALENDAR_START, 0)?);
    let schedules: Vec<cron::Schedule> = tab.crate_exprs().iter().filter_map(|e| e.parse().ok()).collect();
    let wall = naive_whole_seconds(after.with_timezone(tz).naive_local());
    let mut best = first_mapped(&schedules, tz, wall, after, Pass::Earlier);
    if tab.every_hour() {
        // The second pass of a repeated hour has wall times earlier than `after`'s own wall
        // time, so start from the lowest offset in effect around `after`.
        let tomorrow = after.checked_add_signed(Duration::days(1)).unwrap_or(after);
        let lowest = offset_secs(tz, after).min(offset_secs(tz, tomorrow));
        let start = after.naive_utc().checked_add_signed(Duration::seconds(lowest - 1))?;
        let start = naive_whole_seconds(start);
        let later = first_mapped(&schedules, tz, start, after, Pass::Later);
        best = earliest(best, later);
    }
    best
}

/// Walks candidates from `start` (exclusive) and returns the first whose mapped instant is
/// strictly after `after`. The mapping is monotone, so the first hit is the earliest.
fn first_mapped(
    schedules: &[cron::Schedule],
    tz: &Tz,
    start: NaiveDateTime,
    after: DateTime<Utc>,
    pass: Pass,
) -> Option<DateTime<Utc>> {
    let start = Utc.from_utc_datetime(&start);
    let mut found = None;
    for schedule in schedules {
        let hit = schedule
            .after(&start)
            .map(|candidate| to_instant(tz, candidate.naive_utc(), pass))
            .find(|instant| *instant > after);
        found = earliest(found, hit);
    }
    found
}

/// Maps a wall-clock time in `tz` to an instant (see the module comment).
fn to_instant(tz: &Tz, wall: NaiveDateTime, pass: Pass) -> DateTime<Utc> {
    match tz.from_local_datetime(&wall) {
        chrono::LocalResult::Single(t) => t.with_timezone(&Utc),
        chrono::LocalResult::Ambiguous(early, late) => match pass {
            Pass::Earlier => early.with_timezone(&Utc),
            Pass::Later => late.with_timezone(&Utc),
        },
        chrono::LocalResult::None => gap_end(tz, wall),
    }
}

/// The first instant whose wall time is at or past `wall`, which lies in a gap: that is the
/// transition itself. Binary search over a window wide enough for any real offset (−12h to
/// +14h) and any gap (Samoa skipped a whole day); wall time only rises across a gap.
pub(super) fn gap_end(tz: &Tz, wall: NaiveDateTime) -> DateTime<Utc> {
    let base = wall.and_utc().timestamp();
    let wall_at = |secs: i64| DateTime::from_timestamp(secs, 0).map(|t| t.with_timezone(tz).naive_local());
    // Whole seconds: transitions fall on whole seconds, and so do our candidates.
    let (mut lo, mut hi) = (base - 40 * 3600, base + 14 * 3600);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if wall_at(mid).is_none_or(|w| w >= wall) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    DateTime::from_timestamp(hi, 0).unwrap_or_else(|| wall.and_utc())
}

fn offset_secs(tz: &Tz, at: DateTime<Utc>) -> i64 {
    i64::from(tz.offset_from_utc_datetime(&at.naive_utc()).fix().local_minus_utc())
}

/// The crate counts in whole seconds; a fractional `after` would otherwise be rounded by it.
fn naive_whole_seconds(t: NaiveDateTime) -> NaiveDateTime {
    t.with_nanosecond(0).unwrap_or(t)
}

fn earliest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
