//! The dedupe ids the in-process bus saw within its window, forgotten in the order they came.

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

/// Ids seen within the last `window`. Holds what arrived in one window and no more: at 100
/// messages a second and two minutes, 12,000 ids. Each id is kept as a 128-bit fingerprint
/// (two independently keyed hashes), not as its text: 48 bytes an id in two flat tables
/// instead of two small allocations scattered through the heap, and the odds that two ids of
/// one window share a fingerprint are below 10^-29. Each call first forgets the ids that have
/// aged out, oldest first, so the work per message stays the same however many are held.
#[derive(Debug)]
pub(super) struct RecentIds {
    window: Duration,
    keys: (RandomState, RandomState),
    seen: HashSet<u128>,
    /// The fingerprints of `seen` in the order they were recorded, which is also their time order.
    order: VecDeque<(Instant, u128)>,
}

impl RecentIds {
    pub(super) fn new(window: Duration) -> Self {
        Self { window, keys: (RandomState::new(), RandomState::new()), seen: HashSet::new(), order: VecDeque::new() }
    }

    /// True when `id` was recorded within the window before `now`.
    pub(super) fn contains(&mut self, id: &str, now: Instant) -> bool {
        self.forget_expired(now);
        self.seen.contains(&self.fingerprint(id))
    }

    /// Records `id` as seen at `now`, unless it is already held. `now` must not be earlier
    /// than at any call before.
    pub(super) fn record(&mut self, id: &str, now: Instant) {
        self.forget_expired(now);
        let print = self.fingerprint(id);
        if self.seen.insert(print) {
            self.order.push_back((now, print));
        }
    }

    /// How many ids are held.
    pub(super) fn len(&self) -> usize {
        self.seen.len()
    }

    fn fingerprint(&self, id: &str) -> u128 {
        (u128::from(self.keys.0.hash_one(id)) << 64) | u128::from(self.keys.1.hash_one(id))
    }

    fn forget_expired(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front()
            && now.duration_since(*at) >= self.window
        {
            if let Some((_, print)) = self.order.pop_front() {
                self.seen.remove(&print);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(120);

    #[test]
    fn an_id_is_held_for_the_window_and_then_forgotten() {
        let start = Instant::now();
        let mut recent = RecentIds::new(WINDOW);
        recent.record("a", start);
        assert!(recent.contains("a", start + Duration::from_secs(119)));
        assert!(!recent.contains("b", start + Duration::from_secs(119)));
        assert!(!recent.contains("a", start + WINDOW));
        assert_eq!(recent.len(), 0);
    }

    #[test]
    fn recording_again_within_the_window_keeps_the_first_time() {
        let start = Instant::now();
        let mut recent = RecentIds::new(WINDOW);
        recent.record("a", start);
        recent.record("a", start + Duration::from_secs(60));
        assert!(!recent.contains("a", start + WINDOW));
    }

    #[test]
    fn a_steady_stream_holds_one_window_of_ids() {
        let start = Instant::now();
        let mut recent = RecentIds::new(WINDOW);
        // Ten ids a second for ten minutes: never more than one window's worth held.
        for n in 0..6_000u64 {
            let now = start + Duration::from_millis(100 * n);
            recent.record(&format!("id-{n}"), now);
            assert!(recent.len() <= 1_200, "{} ids held after {n}", recent.len());
        }
        assert_eq!(recent.len(), 1_200);
        assert_eq!(recent.order.len(), recent.len());
    }
}
