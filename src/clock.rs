//! Where switchboard reads the time. Scheduling, budgets and leases take a [`Clock`] so tests
//! can move time by hand instead of sleeping.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};

/// The current time, as a shared function; [`system`] in production.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The operating system's clock.
pub fn system() -> Clock {
    Arc::new(Utc::now)
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
}
