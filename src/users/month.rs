//! Budget months: UTC calendar months, keyed `YYYY-MM`. Usage rows are keyed by month, so a
//! new month starts from zero without any reset job.

use chrono::{DateTime, Datelike, NaiveDate, Utc};

/// The month `at` falls in, as `YYYY-MM` (UTC).
pub fn month_key(at: DateTime<Utc>) -> String {
    at.format("%Y-%m").to_string()
}

/// The first day of the month after the one `at` falls in: when the allowance resets.
pub fn next_month_start(at: DateTime<Utc>) -> NaiveDate {
    let (year, month) = if at.month() == 12 { (at.year() + 1, 1) } else { (at.year(), at.month() + 1) };
    // Day 1 of a month from a valid date always exists; the fallback is never used.
    NaiveDate::from_ymd_opt(year, month, 1).unwrap_or(NaiveDate::MAX)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(y: i32, m: u32, d: u32, h: u32, min: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, min, s).unwrap()
    }

    #[test]
    fn months_are_utc_calendar_months() {
        assert_eq!(month_key(at(2025, 1, 31, 23, 59, 59)), "2025-01");
        assert_eq!(month_key(at(2025, 2, 1, 0, 0, 0)), "2025-02");
        assert_eq!(month_key(at(2025, 12, 31, 23, 59, 59)), "2025-12");
        assert_eq!(month_key(at(2026, 1, 1, 0, 0, 0)), "2026-01");
        // A time given in another zone counts by its UTC date.
        let late_in_new_york = chrono::FixedOffset::west_opt(5 * 3600).unwrap().with_ymd_and_hms(2025, 3, 31, 22, 0, 0);
        assert_eq!(month_key(late_in_new_york.unwrap().with_timezone(&Utc)), "2025-04");
    }

    #[test]
    fn the_allowance_resets_on_the_first_of_the_next_month() {
        assert_eq!(next_month_start(at(2025, 1, 15, 12, 0, 0)), NaiveDate::from_ymd_opt(2025, 2, 1).unwrap());
        assert_eq!(next_month_start(at(2025, 12, 31, 23, 59, 59)), NaiveDate::from_ymd_opt(2026, 1, 1).unwrap());
        assert_eq!(next_month_start(at(2024, 2, 29, 0, 0, 0)), NaiveDate::from_ymd_opt(2024, 3, 1).unwrap());
    }
}
