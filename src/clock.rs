//! Where switchboard reads the time. Scheduling, budgets and leases take a [`Clock`] so tests
//! can move time by hand instead of sleeping.
//!
//! The store keeps times as whole milliseconds. A time computed at a finer precision and
//! compared with one read back from the store differs from it by less than a millisecond, which
//! is enough to make "the next occurrence after this one" return this one again. So every time
//! that is stored, or that stored times are computed from, passes through [`to_store_precision`];
//! the system clock does it at the source.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};

/// The current time, as a shared function; [`system`] in production.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The operating system's clock, at the store's precision.
pub fn system() -> Clock {
    Arc::new(now)
}

/// The operating system's time, at the store's precision (whole milliseconds).
pub fn now() -> DateTime<Utc> {
    to_store_precision(Utc::now())
}

/// `time` cut to whole milliseconds, the precision the store keeps: a time passed through this
/// reads back from the store unchanged.
pub fn to_store_precision(time: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.timestamp_millis()).unwrap_or(time)
}

/// A clock that only moves when told to: for tests of schedules, leases and budgets.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self { now: Arc::new(Mutex::new(start)) }
    }

    /// A [`Clock`] reading this one.
    pub fn clock(&self) -> Clock {
        let now = Arc::clone(&self.now);
        Arc::new(move || *now.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = to;
    }

    pub fn advance(&self, by: std::time::Duration) {
        let by = chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX);
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now = now.checked_add_signed(by).unwrap_or(*now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let start = DateTime::parse_from_rfc3339("2026-03-08T06:00:00Z").unwrap().with_timezone(&Utc);
        let manual = ManualClock::new(start);
        let clock = manual.clock();
        assert_eq!(clock(), start);
        manual.advance(std::time::Duration::from_secs(90));
        assert_eq!(clock(), start + chrono::Duration::seconds(90));
        manual.set(start);
        assert_eq!(manual.now(), start);
    }

    #[test]
    fn store_precision_is_whole_milliseconds() {
        let fine = DateTime::parse_from_rfc3339("2026-11-25T16:38:44.123456789Z").unwrap().with_timezone(&Utc);
        let stored = to_store_precision(fine);
        assert_eq!(stored.to_rfc3339(), "2026-11-25T16:38:44.123+00:00");
        assert_eq!(DateTime::from_timestamp_millis(stored.timestamp_millis()), Some(stored));
        assert_eq!(now().timestamp_subsec_nanos() % 1_000_000, 0);
    }
}
