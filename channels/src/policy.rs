//! Settings the chat adapters share: who is answered in direct messages and in groups, and
//! streaming.

use std::time::Duration;

/// Who is answered in direct messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmPolicy {
    /// Owners and allowlisted users; strangers get a pairing code the owner approves.
    Pairing,
    /// Only owners and allowlisted users.
    Allowlist,
    /// Everybody.
    Open,
    /// Nobody.
    Disabled,
}

/// What the DM policy says about a direct message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectVerdict {
    Forward,
    /// From a stranger under `Pairing`: answered if approved already, else given a code.
    CheckPairing,
    /// Dropped, for this reason (logged at debug).
    Ignore(&'static str),
}

/// What happens to a chat message, where group messages that do not address the bot are kept
/// as context (Telegram, Matrix).
#[cfg(any(feature = "matrix", feature = "telegram"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Put it on the bus for the agent.
    Forward,
    /// Not for the agent now, but kept as context for the next addressed message there.
    KeepAsContext,
    /// A direct message from someone not allowed yet: answered if approved by pairing,
    /// otherwise given a pairing code.
    CheckPairing,
    /// Drop it, for this reason (logged at debug).
    Ignore(&'static str),
}

#[cfg(any(feature = "matrix", feature = "telegram"))]
impl From<DirectVerdict> for Verdict {
    fn from(verdict: DirectVerdict) -> Self {
        match verdict {
            DirectVerdict::Forward => Verdict::Forward,
            DirectVerdict::CheckPairing => Verdict::CheckPairing,
            DirectVerdict::Ignore(reason) => Verdict::Ignore(reason),
        }
    }
}

impl DmPolicy {
    /// What happens to a direct message whose sender is `known` (an owner, or in
    /// `allow_from`): the same rules on every platform.
    pub fn judge(self, known: bool) -> DirectVerdict {
        match self {
            DmPolicy::Disabled => DirectVerdict::Ignore("direct messages are disabled"),
            DmPolicy::Open => DirectVerdict::Forward,
            _ if known => DirectVerdict::Forward,
            DmPolicy::Allowlist => DirectVerdict::Ignore("sender is not in allow_from"),
            DmPolicy::Pairing => DirectVerdict::CheckPairing,
        }
    }
}

/// Which group messages are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPolicy {
    /// Those that address the bot (a mention, a reply to it, a command); the others are kept
    /// as context for the next one that does.
    Mention,
    /// Every message.
    Open,
    /// None.
    Disabled,
}

/// Edit-in-place streaming of replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    /// In direct messages.
    pub private: bool,
    /// In groups and guild channels.
    pub groups: bool,
    /// Minimum time between two edits of one message.
    pub edit_interval: Duration,
}
