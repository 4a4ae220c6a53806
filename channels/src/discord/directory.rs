//! What the channel has learnt about Discord channels: which are DMs, which are threads and
//! their parents, and each person's DM channel. Filled by the inbound side (from messages and
//! channel lookups) and by opened DMs, read by the outbound side (a DM reply does not quote; a
//! message to a person goes to their DM channel). Bounded: the oldest entries are dropped first.

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

/// Channel id → kind, and user id → DM channel id, shared by the inbound and outbound sides.
#[derive(Debug, Default)]
pub(crate) struct Directory {
    kinds: Bounded<ChannelKind>,
    direct_channels: Bounded<u64>,
}

impl Directory {
    pub fn get(&self, channel_id: u64) -> Option<ChannelKind> {
        self.kinds.get(channel_id)
    }

    pub fn insert(&self, channel_id: u64, kind: ChannelKind) {
        self.kinds.insert(channel_id, kind);
    }

    /// True only for channels known to be DMs; an unknown channel is treated as a guild one.
    pub fn is_direct(&self, channel_id: u64) -> bool {
        self.get(channel_id) == Some(ChannelKind::Direct)
    }

    /// The DM channel of a person, if known (they wrote in it, or it was opened).
    pub fn direct_channel_of(&self, user_id: u64) -> Option<u64> {
        self.direct_channels.get(user_id)
    }

    /// Records a person's DM channel (and that it is a DM).
    pub fn insert_direct(&self, user_id: u64, channel_id: u64) {
        self.direct_channels.insert(user_id, channel_id);
        self.insert(channel_id, ChannelKind::Direct);
    }
}

/// A map from ids that forgets its oldest entries beyond [`CAPACITY`].
#[derive(Debug)]
struct Bounded<V> {
    inner: Mutex<(HashMap<u64, V>, VecDeque<u64>)>,
}

impl<V> Default for Bounded<V> {
    fn default() -> Self {
        Self { inner: Mutex::new((HashMap::new(), VecDeque::new())) }
    }
}

impl<V: Copy> Bounded<V> {
    fn get(&self, id: u64) -> Option<V> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).0.get(&id).copied()
    }

    fn insert(&self, id: u64, value: V) {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (values, order) = &mut *guard;
        if values.insert(id, value).is_none() {
            order.push_back(id);
            if order.len() > CAPACITY
                && let Some(oldest) = order.pop_front()
            {
                values.remove(&oldest);
            }
        }
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

    #[test]
    fn a_persons_dm_channel_is_remembered_as_a_dm() {
        let directory = Directory::default();
        assert_eq!(directory.direct_channel_of(111), None);
        directory.insert_direct(111, 300);
        assert_eq!(directory.direct_channel_of(111), Some(300));
        assert!(directory.is_direct(300));
    }
}
