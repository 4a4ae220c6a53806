//! Identities an operator names: only those a sender can have are taken.
//!
//! Besides the built-in adapters, any program that follows docs/bus.md can publish messages
//! under a channel name of its own (`matrix`), so a channel switchboard has never heard of is
//! taken, with a warning when the config does not name it either. What is refused is what no
//! sender can have: a channel name the bus cannot carry, one that is a near miss of a built-in
//! channel (`telegarm`, a typo that would otherwise pass in silence), and a Telegram or Discord
//! id that is not a number.

use std::collections::BTreeSet;

use switchboard_channels::contract::MAX_CHANNEL_BYTES;

use crate::config::{Config, Identity};

/// The channels of the adapters built into switchboard.
const BUILT_IN_CHANNELS: [&str; 4] = ["api", "telegram", "discord", "matrix"];

/// Why no sender can have `identity`: a channel name no adapter can use or that is a typo of
/// a built-in one, or a Telegram or Discord id that is not a number (both platforms number
/// their users).
pub fn unusable_identity(identity: &Identity) -> Option<String> {
    let channel = identity.channel.as_str();
    let valid_name =
        channel.len() <= MAX_CHANNEL_BYTES && channel.chars().all(|c| !c.is_whitespace() && !c.is_control());
    if !valid_name {
        return Some(format!(
            "{identity}: {channel:?} cannot be a channel name (at most {MAX_CHANNEL_BYTES} bytes, no spaces or \
             control characters)"
        ));
    }
    if let Some(meant) = near_miss(channel) {
        return Some(format!(
            "{identity}: switchboard has no channel {channel:?}; did you mean {meant}:{}? (the built-in channels \
             are {})",
            identity.sender_id,
            BUILT_IN_CHANNELS.join(", ")
        ));
    }
    let numeric = identity.sender_id.bytes().all(|byte| byte.is_ascii_digit());
    (matches!(channel, "telegram" | "discord") && !numeric).then(|| {
        format!(
            "{identity}: {channel} user ids are numbers (for example {channel}:123456789); the id is in the \
             daemon's log for each message and in `switchboard users list` once they wrote"
        )
    })
}

/// What to tell the operator about an identity on a channel that is neither built in nor
/// named anywhere in `config`: it matches a sender only if an adapter of that name publishes.
pub fn unconfigured_channel(config: &Config, identity: &Identity) -> Option<String> {
    let channel = identity.channel.as_str();
    (!BUILT_IN_CHANNELS.contains(&channel) && !configured_channels(config).contains(channel)).then(|| {
        format!(
            "no adapter named {channel:?} is built in or named in the config; {identity} only matches a sender \
             once an adapter publishes its messages with \"channel\": {channel:?} (docs/bus.md)"
        )
    })
}

/// The channels the config names: in `users.owners`, `[users.groups]`, `approvals.approvers`
/// and `[[bindings]]`.
fn configured_channels(config: &Config) -> BTreeSet<&str> {
    let users = &config.users;
    let keys = users.owners.iter().chain(users.groups.keys()).chain(&config.approvals.approvers);
    let bindings = config.bindings.iter().flat_map(|binding| [&binding.chat, &binding.group, &binding.guild]);
    let mut named: BTreeSet<&str> = config.bindings.iter().map(|binding| binding.channel.as_str()).collect();
    for key in keys.chain(bindings) {
        if let Some((channel, _)) = key.split_once(':') {
            named.insert(channel);
        }
    }
    named
}

/// The built-in channel `channel` is probably a typo of: one edit away from `api`, two from
/// the longer names, in any case.
fn near_miss(channel: &str) -> Option<&'static str> {
    let lower = channel.to_lowercase();
    BUILT_IN_CHANNELS.into_iter().find(|name| {
        let allowed = if name.len() <= 3 { 1 } else { 2 };
        *name != channel && strsim::levenshtein(&lower, name) <= allowed
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(text: &str) -> Option<String> {
        unusable_identity(&text.parse().unwrap())
    }

    #[test]
    fn typos_of_built_in_channels_are_refused_and_other_names_taken() {
        for typo in ["telegarm:1", "Telegram:1", "discrod:1", "apo:me", "ap:me"] {
            assert!(problem(typo).is_some_and(|p| p.contains("did you mean")), "{typo}");
        }
        for fine in ["telegram:1", "discord:2", "api:me", "matrix:@a:b.org", "slack:U123", "irc:nick", "sms:+4912"] {
            assert_eq!(problem(fine), None, "{fine}");
        }
        assert!(problem("bad channel:1").is_some_and(|p| p.contains("cannot be a channel name")));
        assert!(problem(&format!("{}:1", "x".repeat(65))).is_some());
    }

    #[test]
    fn a_channel_the_config_names_needs_no_warning() {
        let mut config = Config::default();
        let zulip: Identity = "zulip:@a:b.org".parse().unwrap();
        assert!(unconfigured_channel(&config, &zulip).is_some_and(|w| w.contains("no adapter named \"zulip\"")));
        assert_eq!(unconfigured_channel(&config, &"telegram:1".parse().unwrap()), None);
        config.users.owners.push("zulip:@me:b.org".into());
        assert_eq!(unconfigured_channel(&config, &zulip), None);
        let mut config = Config::default();
        config.bindings.push(crate::config::BindingConfig { channel: "zulip".into(), ..Default::default() });
        assert_eq!(unconfigured_channel(&config, &zulip), None);
    }
}
