//! `active_hours` of a heartbeat in checked form: a daily window on a zone's wall clock.

use chrono::{DateTime, Timelike, Utc};

use crate::zone::Tz;

/// Minutes in a day: the exclusive upper bound of a time of day.
const DAY_MINUTES: u32 = 24 * 60;

/// A daily window, as minutes after local midnight. `end` before `start` spans midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveHours {
    start: u32,
    end: u32,
}

impl ActiveHours {
    /// The window `start`–`end` (`HH:MM`; `end` may be `24:00`); both empty = always (`None`).
    /// Errors name the key under the heartbeat section.
    pub fn parse(start: &str, end: &str) -> Result<Option<Self>, (&'static str, String)> {
        match (start.trim(), end.trim()) {
            ("", "") => return Ok(None),
            ("", _) => return Err(("active_hours.start", "is empty but end is set; set both or neither".into())),
            (_, "") => return Err(("active_hours.end", "is empty but start is set; set both or neither".into())),
            _ => {}
        }
        let start_minutes = parse_time(start).filter(|&m| m < DAY_MINUTES);
        let Some(start_minutes) = start_minutes else {
            return Err(("active_hours.start", format!("{start:?} is not a time of day as HH:MM (00:00 to 23:59)")));
        };
        let Some(end_minutes) = parse_time(end) else {
            return Err(("active_hours.end", format!("{end:?} is not a time of day as HH:MM (00:00 to 24:00)")));
        };
        if start_minutes == end_minutes % DAY_MINUTES {
            let reason = "equals start: an empty window would never fire; leave both empty for always".into();
            return Err(("active_hours.end", reason));
        }
        Ok(Some(Self { start: start_minutes, end: end_minutes }))
    }

    /// Whether `at` falls in the window, on the wall clock of `zone` (so daylight saving time
    /// moves the window with the clock).
    pub fn contains(&self, at: DateTime<Utc>, zone: &Tz) -> bool {
        let local = at.with_timezone(zone);
        let minute = local.hour() * 60 + local.minute();
        if self.start < self.end {
            self.start <= minute && minute < self.end
        } else {
            minute >= self.start || minute < self.end
        }
    }
}

/// `HH:MM` as minutes after midnight; `24:00` is allowed (the end of the day).
fn parse_time(text: &str) -> Option<u32> {
    let (hours, minutes) = text.trim().split_once(':')?;
    if hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let (hours, minutes): (u32, u32) = (hours.parse().ok()?, minutes.parse().ok()?);
    let total = hours * 60 + minutes;
    (minutes < 60 && total <= DAY_MINUTES).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn active_hours_follow_the_zone_and_its_summer_time() {
        let hours = ActiveHours::parse("08:00", "22:00").unwrap().unwrap();
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        // Winter: UTC+1.
        assert!(!hours.contains(utc("2026-01-15T21:30:00Z"), &berlin));
        assert!(!hours.contains(utc("2026-01-15T06:30:00Z"), &berlin));
        assert!(hours.contains(utc("2026-01-15T07:30:00Z"), &berlin));
        assert!(hours.contains(utc("2026-01-15T20:59:00Z"), &berlin));
        // Summer: UTC+2, so 06:30 UTC is 08:30 in Berlin.
        assert!(hours.contains(utc("2026-07-15T06:30:00Z"), &berlin));
        assert!(!hours.contains(utc("2026-07-15T20:30:00Z"), &berlin));
    }

    #[test]
    fn a_window_may_span_midnight_and_end_at_24() {
        let night = ActiveHours::parse("22:00", "06:00").unwrap().unwrap();
        assert!(night.contains(utc("2026-01-15T23:00:00Z"), &Tz::UTC));
        assert!(night.contains(utc("2026-01-15T05:59:00Z"), &Tz::UTC));
        assert!(!night.contains(utc("2026-01-15T06:00:00Z"), &Tz::UTC));
        assert!(!night.contains(utc("2026-01-15T12:00:00Z"), &Tz::UTC));
        let evening = ActiveHours::parse("18:00", "24:00").unwrap().unwrap();
        assert!(evening.contains(utc("2026-01-15T23:59:00Z"), &Tz::UTC));
        assert!(!evening.contains(utc("2026-01-15T00:00:00Z"), &Tz::UTC));
    }

    #[test]
    fn bad_windows_name_their_key() {
        assert_eq!(ActiveHours::parse("", ""), Ok(None));
        assert_eq!(ActiveHours::parse("8:00", "22:00").unwrap_err().0, "active_hours.start");
        assert_eq!(ActiveHours::parse("08:00", "25:00").unwrap_err().0, "active_hours.end");
        assert_eq!(ActiveHours::parse("08:00", "").unwrap_err().0, "active_hours.end");
        assert_eq!(ActiveHours::parse("24:00", "08:00").unwrap_err().0, "active_hours.start");
        assert_eq!(ActiveHours::parse("08:00", "08:00").unwrap_err().0, "active_hours.end");
        assert_eq!(ActiveHours::parse("08:60", "09:00").unwrap_err().0, "active_hours.start");
    }
}
