//! Sessions' recent history kept in memory, so a turn does not read and decode up to
//! `history_limit` transcript rows again when its session's last turn ran in this process.
//!
//! Each copy carries the session's `history_version` (migration 0016), which every change to
//! what its history shows increments in the same transaction: a finished run (whose rows this
//! process then appends to its copy), a compaction, `/new`. A turn reads the version (with the
//! summary, one small row) and uses its copy only when the versions agree, so a change made by
//! another process on the same file is never missed. Memory is bounded: the least recently
//! used copies are dropped once all of them together pass [`MAX_BYTES`].

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::provider::ChatMessage;

/// What all copies together may hold, by the size of their messages' text.
const MAX_BYTES: usize = 8 * 1024 * 1024;
/// Copies are dropped down to this share of [`MAX_BYTES`], so eviction runs now and then, not
/// on every turn once the cache is full.
const EVICT_TO_PERCENT: usize = 75;
/// Bookkeeping per message besides its text.
const MESSAGE_OVERHEAD: usize = 96;

/// A message of the history, as the model is shown it.
pub(in crate::store) type Row = ChatMessage;

#[derive(Debug, Default)]
pub(in crate::store) struct HistoryCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    copies: HashMap<String, Copy>,
    bytes: usize,
    /// Increments with each use, for least-recently-used eviction.
    clock: u64,
}

#[derive(Debug)]
struct Copy {
    version: i64,
    /// The newest rows of the history, oldest first: all of them when fewer than `limit`.
    rows: Vec<Row>,
    /// How many rows it was read with (and is trimmed to).
    limit: usize,
    bytes: usize,
    used: u64,
}

impl HistoryCache {
    /// The newest `limit` rows of `key`'s history at `version`, if this process has them.
    pub(in crate::store) fn get(&self, key: &str, version: i64, limit: usize) -> Option<Vec<Row>> {
        let mut inner = self.lock();
        inner.clock += 1;
        let clock = inner.clock;
        let copy = inner.copies.get_mut(key).filter(|copy| copy.version == version)?;
        // A copy read with a smaller limit is enough only when it holds the whole history.
        if copy.limit < limit && copy.rows.len() >= copy.limit {
            return None;
        }
        copy.used = clock;
        Some(copy.rows[copy.rows.len().saturating_sub(limit)..].to_vec())
    }

    /// Keeps `rows`, the newest `limit` rows of `key`'s history at `version`.
    pub(in crate::store) fn put(&self, key: &str, version: i64, limit: usize, rows: Vec<Row>) {
        let mut inner = self.lock();
        inner.clock += 1;
        let bytes = rows_bytes(&rows);
        let copy = Copy { version, rows, limit, bytes, used: inner.clock };
        inner.replace(key, Some(copy));
    }

    /// Appends a finished run's rows to `key`'s copy, which the run's transaction moved from
    /// `version - 1` to `version`. A copy of any other version is dropped.
    pub(in crate::store) fn append(&self, key: &str, version: i64, rows: Vec<Row>) {
        let mut inner = self.lock();
        let Some(mut copy) = inner.copies.remove(key) else { return };
        inner.bytes -= copy.bytes;
        if copy.version != version - 1 {
            return;
        }
        copy.rows.extend(rows);
        let excess = copy.rows.len().saturating_sub(copy.limit);
        copy.rows.drain(..excess);
        copy.bytes = rows_bytes(&copy.rows);
        copy.version = version;
        inner.replace(key, Some(copy));
    }

    /// Drops `key`'s copy (its history changed in a way a copy cannot follow).
    pub(in crate::store) fn forget(&self, key: &str) {
        self.lock().replace(key, None);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

impl Inner {
    fn replace(&mut self, key: &str, copy: Option<Copy>) {
        if let Some(old) = self.copies.remove(key) {
            self.bytes -= old.bytes;
        }
        let Some(copy) = copy else { return };
        self.bytes += copy.bytes;
        self.copies.insert(key.to_owned(), copy);
        if self.bytes > MAX_BYTES {
            self.evict();
        }
    }

    /// Drops the least recently used copies until the rest fit [`EVICT_TO_PERCENT`].
    fn evict(&mut self) {
        let mut by_use: Vec<(u64, String, usize)> =
            self.copies.iter().map(|(key, copy)| (copy.used, key.clone(), copy.bytes)).collect();
        by_use.sort_unstable();
        let target = MAX_BYTES / 100 * EVICT_TO_PERCENT;
        for (_, key, bytes) in by_use {
            if self.bytes <= target {
                break;
            }
            self.copies.remove(&key);
            self.bytes -= bytes;
        }
    }
}

fn rows_bytes(rows: &[Row]) -> usize {
    rows.iter().map(message_bytes).sum()
}

/// About what a message holds: its text and its tool calls.
fn message_bytes(message: &ChatMessage) -> usize {
    let calls: usize =
        message.tool_calls.iter().map(|call| call.id.len() + call.name.len() + call.arguments.to_string().len()).sum();
    message.content.len() + calls + MESSAGE_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(ids: std::ops::Range<i64>) -> Vec<Row> {
        ids.map(|id| ChatMessage::user(format!("message {id}"))).collect()
    }

    fn ids(rows: &[Row]) -> Vec<i64> {
        rows.iter().map(|message| message.content["message ".len()..].parse().unwrap()).collect()
    }

    #[test]
    fn a_copy_serves_its_version_only() {
        let cache = HistoryCache::default();
        cache.put("s", 3, 200, rows(1..5));
        assert_eq!(ids(&cache.get("s", 3, 200).unwrap()), [1, 2, 3, 4]);
        assert_eq!(ids(&cache.get("s", 3, 2).unwrap()), [3, 4]);
        assert!(cache.get("s", 4, 200).is_none(), "another process changed the history");
        assert!(cache.get("other", 3, 200).is_none());
    }

    #[test]
    fn a_finished_run_is_appended_and_the_copy_stays_within_its_limit() {
        let cache = HistoryCache::default();
        cache.put("s", 1, 4, rows(1..5));
        cache.append("s", 2, rows(5..7));
        assert_eq!(ids(&cache.get("s", 2, 4).unwrap()), [3, 4, 5, 6]);
        // The copy moved past a version it did not see: dropped, not patched.
        cache.append("s", 4, rows(9..10));
        assert!(cache.get("s", 4, 4).is_none());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn a_short_read_serves_a_longer_limit_only_when_it_holds_the_whole_history() {
        let cache = HistoryCache::default();
        cache.put("whole", 1, 10, rows(1..4));
        assert_eq!(ids(&cache.get("whole", 1, 50).unwrap()), [1, 2, 3]);
        cache.put("cut", 1, 3, rows(5..8));
        assert!(cache.get("cut", 1, 50).is_none(), "older rows exist that the copy lacks");
    }

    #[test]
    fn memory_is_bounded_by_dropping_the_least_recently_used_copies() {
        let cache = HistoryCache::default();
        let big = |_| vec![ChatMessage::user("x".repeat(MAX_BYTES / 4))];
        cache.put("old", 1, 10, big(1));
        cache.put("used", 1, 10, big(2));
        cache.put("newer", 1, 10, big(3));
        assert!(cache.get("used", 1, 10).is_some());
        cache.put("newest", 1, 10, big(4));
        assert!(cache.bytes() <= MAX_BYTES);
        assert!(cache.get("old", 1, 10).is_none(), "the least recently used copy goes first");
        assert!(cache.get("used", 1, 10).is_some());
        assert!(cache.get("newest", 1, 10).is_some());
    }
}
