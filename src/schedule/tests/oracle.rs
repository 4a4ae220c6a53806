//! Random crontab expressions, zones and instants, checked against a minute-by-minute walk
//! over real instants that applies the documented rules directly. No proptest in this crate,
//! so a fixed-seed generator keeps failures reproducible.

use chrono::{DateTime, Datelike, Duration, NaiveDateTime, Offset, TimeZone, Timelike, Utc};

use super::super::crontab::Crontab;
use super::{cron, utc};
use crate::zone::Tz;

const ZONES: [&str; 7] = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "America/Santiago",
];

/// 2026's transitions in some of those zones, so the walk crosses gaps and repeats often.
const NEAR: [(&str, &str); 8] = [
    ("America/New_York", "2026-03-08T07:00:00Z"),
    ("America/New_York", "2026-11-01T06:00:00Z"),
    ("Europe/Berlin", "2026-03-29T01:00:00Z"),
    ("Europe/Berlin", "2026-10-25T01:00:00Z"),
    ("Australia/Lord_Howe", "2026-04-04T15:00:00Z"),
    ("Australia/Lord_Howe", "2026-10-03T15:30:00Z"),
    ("Pacific/Chatham", "2026-04-04T14:00:00Z"),
    ("America/Santiago", "2026-09-06T04:00:00Z"),
];

/// How far the walk looks; later results are only checked to lie beyond it.
const HORIZON_MINUTES: i64 = 4 * 24 * 60;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn field(&mut self, min: u64, max: u64, star_weight: u64) -> String {
        if self.below(10) < star_weight {
            return "*".to_owned();
        }
        let span = max - min + 1;
        let a = min + self.below(span);
        let b = a + self.below(max - a + 1);
        let step = 1 + self.below(4);
        match self.below(5) {
            0 => a.to_string(),
            1 => format!("{a}-{b}"),
            2 => format!("*/{step}"),
            3 => format!("{a}-{b}/{step}"),
            _ => format!("{a},{}", min + self.below(span)),
        }
    }
}

fn offset(tz: &Tz, t: DateTime<Utc>) -> i64 {
    i64::from(tz.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc())
}

fn matches(tab: &Crontab, wall: NaiveDateTime) -> bool {
    let dom = tab.day_of_month.contains(wall.day());
    let dow = tab.day_of_week.contains(wall.weekday().num_days_from_sunday());
    let day = if tab.days_or() { dom || dow } else { dom && dow };
    day && tab.minute.contains(wall.minute()) && tab.hour.contains(wall.hour()) && tab.month.contains(wall.month())
}

/// Whether the job fires at instant `t` (a whole minute), by the documented rules.
fn fires_at(tab: &Crontab, tz: &Tz, t: DateTime<Utc>) -> bool {
    let wall = t.with_timezone(tz).naive_local();
    let before = offset(tz, t - Duration::minutes(1));
    let now = offset(tz, t);
    if now > before {
        // `t` ends a gap: it also carries every skipped wall minute.
        let mut skipped = t.naive_utc() + Duration::seconds(before);
        while skipped < wall {
            if matches(tab, skipped) {
                return true;
            }
            skipped += Duration::minutes(1);
        }
    }
    if !matches(tab, wall) {
        return false;
    }
    let earlier_pass = tz.from_local_datetime(&wall).earliest().map(|e| e.with_timezone(&Utc)) == Some(t);
    earlier_pass || tab.every_hour()
}

#[test]
fn next_after_agrees_with_a_minute_walk() {
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let (mut checked, mut found, mut in_repeat_or_gap) = (0, 0, 0);
    for case in 0..300 {
        // Two cases in three sit within an hour and a half of a transition in their zone.
        let at_transition = rng.below(3) > 0;
        let (tz_name, near) = if at_transition {
            NEAR[rng.below(NEAR.len() as u64) as usize]
        } else {
            (ZONES[rng.below(ZONES.len() as u64) as usize], "2026-06-15T00:00:00Z")
        };
        // Near a transition, mostly unrestricted days, so the first firing is often inside it.
        let day_star = if at_transition { 9 } else { 6 };
        let Ok(tz) = tz_name.parse::<Tz>() else { panic!("{tz_name}") };
        let near = utc(near);
        let after = near + Duration::seconds(rng.below(3 * 3600) as i64 - 3600 * 3 / 2);
        // Half the hour fields aim at the wall-clock hours around the transition.
        let local_hour = u64::from(near.with_timezone(&tz).hour());
        let hour = match rng.below(4) {
            0 => format!("{}", (local_hour + 23) % 24),
            1 => format!("{}-{}", local_hour.saturating_sub(2), (local_hour + 1).min(23)),
            _ => rng.field(0, 23, 4),
        };
        let expr = format!(
            "{} {hour} {} {} {}",
            rng.field(0, 59, 3),
            rng.field(1, 31, day_star + 1),
            rng.field(1, 12, day_star + 1),
            rng.field(0, 7, day_star),
        );
        let Ok(tab) = Crontab::parse(&expr) else { continue };
        let got = cron(&expr, tz_name).next_after(after);

        let first_minute = after.with_second(0).unwrap_or(after) + Duration::minutes(1);
        let first_minute = first_minute.with_nanosecond(0).unwrap_or(first_minute);
        let walked =
            (0..HORIZON_MINUTES).map(|m| first_minute + Duration::minutes(m)).find(|t| fires_at(&tab, &tz, *t));
        let context = format!("case {case}: `{expr}` in {tz_name} after {after}");
        checked += 1;
        if let Some(t) = walked {
            found += 1;
            let wall = t.with_timezone(&tz).naive_local();
            in_repeat_or_gap += usize::from(
                tz.from_local_datetime(&wall).single().is_none()
                    || offset(&tz, t) != offset(&tz, t - Duration::minutes(1)),
            );
        }
        match walked {
            Some(expected) => assert_eq!(got, Some(expected), "{context}"),
            None => assert!(
                got.is_none_or(|g| g >= first_minute + Duration::minutes(HORIZON_MINUTES)),
                "{context}: {got:?}"
            ),
        }
    }
    // Guards the generator: most cases must fire within the horizon, many at a transition.
    assert!(checked == 300 && found >= 200 && in_repeat_or_gap >= 20, "{checked} {found} {in_repeat_or_gap}");
}
