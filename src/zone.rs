//! Time zones by IANA name (`Europe/Berlin`), as chrono time zones, with daylight saving time.
//!
//! The rules come from the IANA database compiled into the binary (jiff's bundled copy), so no
//! tzdata is needed on the host. jiff keeps the database as TZif bytes and reads a zone's when
//! it is first asked for. (chrono-tz, used before, compiled every zone into tables of pointers:
//! a megabyte the loader relocates at start, resident in every process whatever zone it uses.)

use std::fmt;
use std::str::FromStr;

use chrono::{FixedOffset, MappedLocalTime, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Timelike, Utc};
use jiff::tz::{AmbiguousOffset, TimeZone as Rules};
use thiserror::Error;

/// A zone of the IANA database, or UTC.
#[derive(Clone, PartialEq, Eq)]
pub struct Tz(Rules);

/// A name that is not a zone of the IANA database.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{0:?} is not an IANA time zone name (e.g. \"UTC\", \"Europe/Berlin\")")]
pub struct UnknownZone(String);

impl Tz {
    pub const UTC: Tz = Tz(Rules::UTC);

    /// The zone's IANA name (`UTC` for UTC); its canonical spelling, whatever case it was
    /// configured in.
    pub fn name(&self) -> &str {
        self.0.iana_name().unwrap_or("UTC")
    }

    fn offset_at(&self, at: jiff::Timestamp, offset: jiff::tz::Offset) -> ZoneOffset {
        ZoneOffset { zone: self.clone(), fixed: fixed(offset), at }
    }
}

impl FromStr for Tz {
    type Err = UnknownZone;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        // jiff also knows fixed offsets and POSIX rules, but only by other constructors: a
        // name is looked up in the database and nothing else.
        Rules::get(name).map(Tz).map_err(|_| UnknownZone(name.to_owned()))
    }
}

impl fmt::Display for Tz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Debug for Tz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The offset in effect in a zone at an instant. `%Z` shows the zone's abbreviation then
/// (`CET`, `CEST`, or `-03` where the database has none).
#[derive(Clone)]
pub struct ZoneOffset {
    zone: Tz,
    fixed: FixedOffset,
    at: jiff::Timestamp,
}

impl Offset for ZoneOffset {
    fn fix(&self) -> FixedOffset {
        self.fixed
    }
}

impl fmt::Display for ZoneOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.zone.0.to_offset_info(self.at).abbreviation())
    }
}

impl fmt::Debug for ZoneOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({self})", self.fixed)
    }
}

impl TimeZone for Tz {
    type Offset = ZoneOffset;

    fn from_offset(offset: &ZoneOffset) -> Self {
        offset.zone.clone()
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> MappedLocalTime<ZoneOffset> {
        self.offset_from_local_datetime(&local.and_time(NaiveTime::MIN))
    }

    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> MappedLocalTime<ZoneOffset> {
        let Some(civil) = civil(local) else { return MappedLocalTime::None };
        let at =
            |offset: jiff::tz::Offset| offset.to_timestamp(civil).ok().map(|instant| self.offset_at(instant, offset));
        match self.0.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => {
                at(offset).map_or(MappedLocalTime::None, MappedLocalTime::Single)
            }
            AmbiguousOffset::Gap { .. } => MappedLocalTime::None,
            // Before the fold the offset is the larger one: its instant is the earlier.
            AmbiguousOffset::Fold { before, after } => match (at(before), at(after)) {
                (Some(earlier), Some(later)) => MappedLocalTime::Ambiguous(earlier, later),
                (Some(only), None) | (None, Some(only)) => MappedLocalTime::Single(only),
                (None, None) => MappedLocalTime::None,
            },
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> ZoneOffset {
        self.offset_from_utc_datetime(&utc.and_time(NaiveTime::MIN))
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> ZoneOffset {
        let seconds = utc.and_utc().timestamp();
        // jiff's calendar ends at the years ±9999, chrono's much later: beyond, the offset at
        // the end applies (no zone has rules there anyway).
        let at = jiff::Timestamp::from_second(seconds).unwrap_or(if seconds < 0 {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        });
        self.offset_at(at, self.0.to_offset(at))
    }
}

/// `local` in jiff's terms; `None` outside its calendar (the years ±9999).
fn civil(local: &NaiveDateTime) -> Option<jiff::civil::DateTime> {
    use chrono::Datelike;
    let narrow = |value: u32| i8::try_from(value).ok();
    jiff::civil::DateTime::new(
        i16::try_from(local.year()).ok()?,
        narrow(local.month())?,
        narrow(local.day())?,
        narrow(local.hour())?,
        narrow(local.minute())?,
        narrow(local.second())?,
        // chrono writes a leap second as a nanosecond count past one second.
        i32::try_from(local.nanosecond().min(999_999_999)).ok()?,
    )
    .ok()
}

/// The database's offsets are within ±15 hours, well inside chrono's ±24.
fn fixed(offset: jiff::tz::Offset) -> FixedOffset {
    FixedOffset::east_opt(offset.seconds()).unwrap_or(Utc.fix())
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, LocalResult};

    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    fn wall(text: &str) -> NaiveDateTime {
        text.parse().unwrap()
    }

    #[test]
    fn names_are_looked_up_in_the_database_only() {
        let berlin: Tz = "europe/berlin".parse().unwrap();
        assert_eq!(berlin.name(), "Europe/Berlin");
        assert_eq!(berlin.to_string(), "Europe/Berlin");
        assert_eq!("UTC".parse::<Tz>().unwrap().name(), "UTC");
        assert_eq!("Etc/UTC".parse::<Tz>().unwrap().name(), "Etc/UTC");
        assert_eq!(Tz::UTC.name(), "UTC");
        for bad in ["", "Mars/Olympus", "+02:00", "EST5EDT,M3.2.0,M11.1.0", "../etc/passwd"] {
            let err = bad.parse::<Tz>().unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn instants_show_the_offset_and_abbreviation_in_effect() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let winter = utc("2026-01-15T12:00:00.250Z").with_timezone(&berlin);
        assert_eq!(winter.format("%Y-%m-%d %H:%M:%S%.3f %Z %:z").to_string(), "2026-01-15 13:00:00.250 CET +01:00");
        let summer = utc("2026-07-15T12:00:00Z").with_timezone(&berlin);
        assert_eq!(summer.format("%H:%M %Z").to_string(), "14:00 CEST");
        let sao_paulo: Tz = "America/Sao_Paulo".parse().unwrap();
        assert_eq!(utc("2026-07-15T12:00:00Z").with_timezone(&sao_paulo).format("%H:%M %Z").to_string(), "09:00 -03");
        assert_eq!(utc("2026-07-15T12:00:00Z").with_timezone(&Tz::UTC).format("%H:%M %Z").to_string(), "12:00 UTC");
    }

    #[test]
    fn wall_times_in_gaps_and_folds_map_like_chrono_says() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST.
        assert!(matches!(berlin.from_local_datetime(&wall("2026-03-29T02:30:00")), LocalResult::None));
        let LocalResult::Single(after_gap) = berlin.from_local_datetime(&wall("2026-03-29T03:00:00")) else { panic!() };
        assert_eq!(after_gap.with_timezone(&Utc), utc("2026-03-29T01:00:00Z"));
        // 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
        let LocalResult::Ambiguous(earlier, later) = berlin.from_local_datetime(&wall("2026-10-25T02:30:00")) else {
            panic!()
        };
        assert_eq!(earlier.with_timezone(&Utc), utc("2026-10-25T00:30:00Z"));
        assert_eq!(later.with_timezone(&Utc), utc("2026-10-25T01:30:00Z"));
        assert_eq!((earlier.format("%Z").to_string(), later.format("%Z").to_string()), ("CEST".into(), "CET".into()));
    }

    #[test]
    fn the_ends_of_chronos_calendar_do_not_panic() {
        let zone: Tz = "Pacific/Apia".parse().unwrap();
        assert_eq!(DateTime::<Utc>::MAX_UTC.with_timezone(&zone).offset().fix().local_minus_utc(), 13 * 3600);
        let first = DateTime::<Utc>::MIN_UTC.with_timezone(&zone).offset().fix().local_minus_utc();
        assert!(first.abs() < 15 * 3600, "{first}");
        assert!(matches!(zone.from_local_datetime(&NaiveDateTime::MAX), LocalResult::None));
    }
}
