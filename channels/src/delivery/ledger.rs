//! Bookkeeping of deliveries: which outbound messages
//! were delivered, and how far a partly sent one got, so that a redelivery from the bus
//! neither repeats nor skips anything. In memory, per process.

use std::collections::{HashSet, VecDeque};

/// A set of recently seen ids that forgets the oldest beyond its capacity.
#[derive(Debug)]
pub struct RecentIds {
    ids: HashSet<String>,
    order: VecDeque<String>,
    capacity: usize,
}

impl RecentIds {
    pub fn new(capacity: usize) -> Self {
        Self { ids: HashSet::new(), order: VecDeque::new(), capacity: capacity.max(1) }
    }

    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    pub fn insert(&mut self, id: &str) {
        if !self.ids.insert(id.to_owned()) {
            return;
        }
        self.order.push_back(id.to_owned());
        if self.order.len() > self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
    }
}

/// Delivered outbound ids, and the number of steps (parts, files) already sent of those that
/// are partly delivered.
#[derive(Debug)]
pub struct Ledger {
    delivered: RecentIds,
    progress: VecDeque<(String, usize)>,
    progress_kept: usize,
}

impl Ledger {
    /// Remembers up to `delivered_kept` delivered ids and `progress_kept` partly sent ones.
    pub fn new(delivered_kept: usize, progress_kept: usize) -> Self {
        Self {
            delivered: RecentIds::new(delivered_kept),
            progress: VecDeque::new(),
            progress_kept: progress_kept.max(1),
        }
    }

    pub fn is_delivered(&self, id: &str) -> bool {
        self.delivered.contains(id)
    }

    /// How many steps of `id` went out already (0 when none or unknown).
    pub fn progress_of(&self, id: &str) -> usize {
        self.progress.iter().find(|(seen, _)| seen == id).map_or(0, |(_, done)| *done)
    }

    pub fn record_progress(&mut self, id: &str, done: usize) {
        self.progress.retain(|(seen, _)| seen != id);
        if self.progress.len() == self.progress_kept {
            self.progress.pop_front();
        }
        self.progress.push_back((id.to_owned(), done));
    }

    pub fn record_delivered(&mut self, id: &str) {
        self.progress.retain(|(seen, _)| seen != id);
        self.delivered.insert(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_ids_forget_the_oldest() {
        let mut ids = RecentIds::new(2);
        ids.insert("a");
        ids.insert("b");
        ids.insert("b");
        assert!(ids.contains("a"));
        ids.insert("c");
        assert!(!ids.contains("a"));
        assert!(ids.contains("b") && ids.contains("c"));
    }

    #[test]
    fn the_ledger_keeps_progress_until_delivered() {
        let mut ledger = Ledger::new(4, 2);
        ledger.record_progress("m1", 1);
        ledger.record_progress("m1", 2);
        assert_eq!(ledger.progress_of("m1"), 2);
        ledger.record_progress("m2", 1);
        ledger.record_progress("m3", 1);
        assert_eq!(ledger.progress_of("m1"), 0, "the oldest partial delivery is forgotten");
        ledger.record_delivered("m2");
        assert!(ledger.is_delivered("m2"));
        assert_eq!(ledger.progress_of("m2"), 0);
        assert!(!ledger.is_delivered("m3"));
    }
}
