//! `[heartbeat]`: periodic wake-ups that let the agent work through `HEARTBEAT.md`, for the
//! main agent and, through `[agents.<name>.heartbeat]`, for each named agent.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use switchboard_channels::contract::ChatAddress;

use super::Config;
use super::active_hours::ActiveHours;

/// The shortest interval: heartbeats are for periodic checks, not polling.
pub const MIN_HEARTBEAT_MINUTES: u64 = 5;

/// The message a heartbeat sends when `prompt` is left at its default.
pub const DEFAULT_HEARTBEAT_PROMPT: &str = "Heartbeat: read HEARTBEAT.md in your workspace and do \
     what is due now. Do not repeat tasks already done. If nothing needs attention, reply \
     HEARTBEAT_OK.";

/// One agent's heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HeartbeatConfig {
    /// Costs nothing while HEARTBEAT.md has no active tasks or there is no target.
    pub enabled: bool,
    /// Minutes between heartbeats; at least 5. The first comes one interval after start.
    pub every_minutes: u64,
    /// When heartbeats may fire; both empty = always.
    pub active_hours: ActiveHoursConfig,
    /// IANA zone of `active_hours`; empty = `agent.timezone`.
    pub timezone: String,
    /// `owner` (the owner's most recent direct chat) or a session key like
    /// `telegram:-100123:topic:7`.
    pub target: String,
    /// The text of the heartbeat message.
    pub prompt: String,
    /// A reply of HEARTBEAT_OK with at most this many other characters is not delivered.
    pub ack_max_chars: usize,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            every_minutes: 30,
            active_hours: ActiveHoursConfig::default(),
            timezone: String::new(),
            target: "owner".into(),
            prompt: DEFAULT_HEARTBEAT_PROMPT.into(),
            ack_max_chars: 300,
        }
    }
}

/// `start` and `end` as `HH:MM`; an end before the start spans midnight.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ActiveHoursConfig {
    pub start: String,
    pub end: String,
}

impl Config {
    /// The heartbeat of agent `name`: its own `[agents.<name>.heartbeat]` section, else
    /// `[heartbeat]` (taken whole, not key by key).
    pub fn heartbeat_for(&self, name: &str) -> &HeartbeatConfig {
        self.agents.get(name).and_then(|agent| agent.heartbeat.as_ref()).unwrap_or(&self.heartbeat)
    }
}

/// The first problem of `[heartbeat]` or any `[agents.<name>.heartbeat]`, as `(key, reason)`.
pub(super) fn problem(config: &Config) -> Option<(String, String)> {
    let own = config
        .agents
        .iter()
        .filter_map(|(name, agent)| Some((format!("agents.{name}.heartbeat"), agent.heartbeat.as_ref()?)));
    for (section, heartbeat) in std::iter::once(("heartbeat".to_owned(), &config.heartbeat)).chain(own) {
        if let Some((key, reason)) = section_problem(heartbeat) {
            return Some((format!("{section}.{key}"), reason));
        }
    }
    None
}

fn section_problem(heartbeat: &HeartbeatConfig) -> Option<(&'static str, String)> {
    if heartbeat.every_minutes < MIN_HEARTBEAT_MINUTES {
        let reason = format!("{} is below the minimum of {MIN_HEARTBEAT_MINUTES} minutes", heartbeat.every_minutes);
        return Some(("every_minutes", reason));
    }
    if let Err((key, reason)) = ActiveHours::parse(&heartbeat.active_hours.start, &heartbeat.active_hours.end) {
        return Some((key, reason));
    }
    if !heartbeat.timezone.is_empty()
        && let Err(unknown) = heartbeat.timezone.parse::<crate::zone::Tz>()
    {
        return Some(("timezone", unknown.to_string()));
    }
    if let Err(reason) = heartbeat.target.parse::<HeartbeatTarget>() {
        return Some(("target", reason.to_string()));
    }
    if heartbeat.prompt.trim().is_empty() {
        return Some(("prompt", "must not be empty".into()));
    }
    None
}

/// Where a heartbeat goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatTarget {
    /// The most recent direct chat an owner wrote in to this agent; never a group.
    Owner,
    /// A configured chat: `telegram:123`, `telegram:-100123:topic:7`, `discord:55:thread:9`.
    Chat(ChatAddress),
}

/// A `target` that is neither `owner` nor a session key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a heartbeat target: use \"owner\" or a chat as a session key (\"telegram:123\", \
     \"telegram:-100123:topic:7\", \"discord:55:thread:9\")"
)]
pub struct BadTarget(pub String);

impl FromStr for HeartbeatTarget {
    type Err = BadTarget;

    fn from_str(text: &str) -> Result<Self, BadTarget> {
        if text.trim() == "owner" {
            return Ok(Self::Owner);
        }
        ChatAddress::parse(text).map(Self::Chat).map_err(|_| BadTarget(text.to_owned()))
    }
}

impl fmt::Display for HeartbeatTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Owner => f.write_str("owner"),
            Self::Chat(chat) => f.write_str(&chat.session_key()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::load_text;
    use super::{ChatAddress, HeartbeatTarget};

    fn error_of(text: &str) -> String {
        load_text(text, &[]).expect_err("load should fail").to_string()
    }

    #[test]
    fn defaults_and_a_per_agent_section() {
        let config =
            load_text("[agents.ops.heartbeat]\ntarget = \"telegram:-100123:topic:7\"\nevery_minutes = 5\n", &[])
                .unwrap();
        assert!(config.heartbeat.enabled);
        assert_eq!(config.heartbeat.every_minutes, 30);
        assert_eq!(config.heartbeat.target, "owner");
        assert_eq!(config.heartbeat_for("main"), &config.heartbeat);
        let ops = config.heartbeat_for("ops");
        assert_eq!((ops.every_minutes, ops.target.as_str()), (5, "telegram:-100123:topic:7"));
        // An agent without its own section takes [heartbeat].
        let config = load_text("[heartbeat]\nevery_minutes = 45\n[agents.ops]\n", &[]).unwrap();
        assert_eq!(config.heartbeat_for("ops").every_minutes, 45);
    }

    #[test]
    fn bad_values_are_reported_with_their_key() {
        for (text, key, hint) in [
            ("[heartbeat]\nevery_minutes = 4\n", "heartbeat.every_minutes", "minimum of 5"),
            ("[heartbeat.active_hours]\nstart = \"8:00\"\nend = \"22:00\"\n", "heartbeat.active_hours.start", "HH:MM"),
            ("[heartbeat.active_hours]\nstart = \"08:00\"\nend = \"22:75\"\n", "heartbeat.active_hours.end", "HH:MM"),
            ("[heartbeat]\ntimezone = \"Mars/Olympus\"\n", "heartbeat.timezone", "IANA"),
            ("[heartbeat]\ntarget = \"the boss\"\n", "heartbeat.target", "session key"),
            ("[heartbeat]\ntarget = \"telegram:-100:thread:7\"\n", "heartbeat.target", "owner"),
            ("[agents.ops.heartbeat]\nevery_minutes = 1\n", "agents.ops.heartbeat.every_minutes", "minimum"),
            ("[agents.ops.heartbeat]\ntarget = \"group\"\n", "agents.ops.heartbeat.target", "session key"),
        ] {
            let message = error_of(text);
            assert!(message.starts_with(key), "{text}: {message}");
            assert!(message.contains(hint), "{text}: {message}");
        }
    }

    #[test]
    fn unknown_keys_in_a_heartbeat_section_are_errors() {
        let message = error_of("[heartbeat]\nevery_minute = 10\n");
        assert!(message.contains("heartbeat.every_minute"), "{message}");
        let message = error_of("[agents.ops.heartbeat.active_hours]\nbegin = \"08:00\"\n");
        assert!(message.contains("agents.ops.heartbeat.active_hours.begin"), "{message}");
    }

    #[test]
    fn targets_are_owner_or_session_keys() {
        assert_eq!("owner".parse::<HeartbeatTarget>(), Ok(HeartbeatTarget::Owner));
        let topic = ChatAddress {
            channel: "telegram".into(),
            chat_id: "-100123".into(),
            thread_id: Some("7".into()),
            is_group: true,
        };
        assert_eq!("telegram:-100123:topic:7".parse::<HeartbeatTarget>(), Ok(HeartbeatTarget::Chat(topic)));
        let dm = ChatAddress { channel: "telegram".into(), chat_id: "123".into(), thread_id: None, is_group: false };
        assert_eq!("telegram:123".parse::<HeartbeatTarget>(), Ok(HeartbeatTarget::Chat(dm)));
        let Ok(HeartbeatTarget::Chat(thread)) = "discord:55:thread:9".parse::<HeartbeatTarget>() else { panic!() };
        assert_eq!(thread.session_key(), "discord:55:thread:9");
        for bad in ["", "telegram", "telegram:", "telegram:1:thread:2", "discord:5:topic:1", "tg x:1"] {
            assert!(bad.parse::<HeartbeatTarget>().is_err(), "{bad:?}");
        }
    }
}
