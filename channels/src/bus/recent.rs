//! The dedupe ids the in-process bus saw within its window, forgotten in the order they came.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Ids seen within the last `window`. Holds what arrived in one window and no more: at 100
/// messages a second and two minutes, 12,000 ids (about 2 MB, each id kept twice). Each call
/// first forgets the ids that have aged out, oldest first, so the work per message stays the
/// same however many ids are held.
#[derive(Debug)]
pub(super) struct RecentIds {
    window: Duration,
    seen_at: HashMap<String, Instant>,
    /// The ids of `seen_at` in the order they were recorded, which is also their time order.
    order: VecDeque<(Instant, String)>,
}

impl RecentIds {
    pub(super) fn new(window: Duration) -> Self {
        Self { window, seen_at: HashMap::new(), order: VecDeque::new() }
    }

    /// True when `id` was recorded within the window before `now`.
    pub(super) fn contains(&mut self, id: &str, now: Instant) -> bool {
        self.forget_expired(now);
        self.seen_at.contains_key(id)
    }

    /// Records `id` as seen at `now`, unless it is already held. `now` must not be earlier
    /// than at any call before.
    pub(super) fn record(&mut self, id: &str, now: Instant) {
        self.forget_expired(now);
        if !self.seen_at.contains_key(id) {
            self.seen_at.insert(id.to_owned(), now);
            self.order.push_back((now, id.to_owned()));
        }
    }

    /// How many ids are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen_at.len()
    }

    fn forget_expired(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front()
            && now.duration_since(*at) >= self.window
        {
            if let Some((_, id)) = self.order.pop_front() {
                self.seen_at.remove(&id);
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
