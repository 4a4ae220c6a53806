//! Identities an operator names: only those a sender can have are taken.

use crate::config::Identity;

/// The channels people write from. An identity on another one can never match a sender, so
/// naming it is a typo that would otherwise pass in silence.
const PEOPLE_CHANNELS: [&str; 3] = ["api", "telegram", "discord"];

/// Why no sender can have `identity`: an unknown channel, or a Telegram or Discord id that is
/// not a number (both platforms number their users).
pub fn unusable_identity(identity: &Identity) -> Option<String> {
    let channel = identity.channel.as_str();
    if !PEOPLE_CHANNELS.contains(&channel) {
        return Some(format!(
            "{identity}: switchboard has no channel {channel:?}; identities are {}, then the sender's id \
             (for example telegram:123456789)",
            PEOPLE_CHANNELS.map(|name| format!("{name}:")).join(", ")
        ));
    }
    let numeric = identity.sender_id.bytes().all(|byte| byte.is_ascii_digit());
    (channel != "api" && !numeric).then(|| {
        format!(
            "{identity}: {channel} user ids are numbers (for example {channel}:123456789); the id is in the \
             daemon's log for each message and in `switchboard users list` once they wrote"
        )
    })
}
