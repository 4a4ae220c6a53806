//! What the channel has learnt about Discord channels: which are DMs, which are threads and
//! their parents. Filled by the inbound side (from messages and channel lookups), read by the
//! outbound side (a DM reply does not quote). Bounded: the oldest entries are dropped first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

/// Channels remembered at most.
const CAPACITY: usize = 10_000;

/// The kind of a Discord channel, as far as routing cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChannelKind {
    /// A direct-message channel.
    Direct,
    /// A text channel of a guild.
    Guild { guild_id: u64 },
    /// A thread of a guild channel.
    Thread { guild_id: u64, parent_id: u64 },
}

/// Channel id → kind, shared by the inbound and outbound sides.
#[derive(Debug, Default)]
pub(crate) struct Directory {
    inner: Mutex<(HashMap<u64, ChannelKind>, VecDeque<u64>)>,
}

impl Directory {
    pub fn get(&self, channel_id: u64) -> Option<ChannelKind> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).0.get(&channel_id).copied()
    }

    pub fn insert(&self, channel_id: u64, kind: ChannelKind) {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (kinds, order) = &mut *guard;
        if kinds.insert(channel_id, kind).is_none() {
            order.push_back(channel_id);
            if order.len() > CAPACITY
                && let Some(oldest) = order.pop_front()
            {
                kinds.remove(&oldest);
            }
        }
    }

    /// True only for channels known to be DMs; an unknown channel is treated as a guild one.
    pub fn is_direct(&self, channel_id: u64) -> bool {
        self.get(channel_id) == Some(ChannelKind::Direct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_kinds_and_forgets_the_oldest_beyond_capacity() {
        let directory = Directory::default();
        directory.insert(1, ChannelKind::Direct);
        directory.insert(2, ChannelKind::Thread { guild_id: 9, parent_id: 3 });
        assert!(directory.is_direct(1));
        assert!(!directory.is_direct(2));
        assert!(!directory.is_direct(77), "unknown channels are not DMs");
        for id in 10..(10 + CAPACITY as u64) {
            directory.insert(id, ChannelKind::Guild { guild_id: 9 });
        }
        assert_eq!(directory.get(1), None);
        assert_eq!(directory.get(10), Some(ChannelKind::Guild { guild_id: 9 }));
    }
}
