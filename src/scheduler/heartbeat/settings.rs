//! A heartbeat's settings in checked form: interval, active hours in a zone, and target.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use chrono_tz::Tz;
use switchboard_channels::contract::ChatAddress;

use crate::config::HeartbeatConfig;

/// Minutes in a day: the exclusive upper bound of a time of day.
const DAY_MINUTES: u32 = 24 * 60;

/// A daily window, as minutes after local midnight. `end` before `start` spans midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveHours {
    start: u32,
    end: u32,
}

impl ActiveHours {
    /// The window `start`–`end` (`HH:MM`; `end` may be `24:00`); both empty = always (`None`).
    /// Errors name the key under the heartbeat section.
    pub fn parse(start: &str, end: &str) -> Result<Option<Self>, (&'static str, String)> {
        match (start.trim(), end.trim()) {
            ("", "") => return Ok(None),
            ("", _) => return Err(("active_hours.start", "is empty but end is set; set both or neither".into())),
            (_, "") => return Err(("active_hours.end", "is empty but start is set; set both or neither".into())),
            _ => {}
        }
        let start_minutes = parse_time(start).filter(|&m| m < DAY_MINUTES);
        let Some(start_minutes) = start_minutes else {
            return Err(("active_hours.start", format!("{start:?} is not a time of day as HH:MM (00:00 to 23:59)")));
        };
        let Some(end_minutes) = parse_time(end) else {
            return Err(("active_hours.end", format!("{end:?} is not a time of day as HH:MM (00:00 to 24:00)")));
        };
        if start_minutes == end_minutes % DAY_MINUTES {
            let reason = "equals start: an empty window would never fire; leave both empty for always".into();
            return Err(("active_hours.end", reason));
        }
        Ok(Some(Self { start: start_minutes, end: end_minutes }))
    }

    /// Whether `at` falls in the window, on the wall clock of `zone` (so daylight saving time
    /// moves the window with the clock).
    pub fn contains(&self, at: DateTime<Utc>, zone: Tz) -> bool {
        let local = at.with_timezone(&zone);
        let minute = local.hour() * 60 + local.minute();
        if self.start < self.end {
            self.start <= minute && minute < self.end
        } else {
            minute >= self.start || minute < self.end
        }
    }
}

/// `HH:MM` as minutes after midnight; `24:00` is allowed (the end of the day).
fn parse_time(text: &str) -> Option<u32> {
    let (hours, minutes) = text.trim().split_once(':')?;
    if hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let (hours, minutes): (u32, u32) = (hours.parse().ok()?, minutes.parse().ok()?);
    let total = hours * 60 + minutes;
    (minutes < 60 && total <= DAY_MINUTES).then_some(total)
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

/// One agent's heartbeat, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatSettings {
    pub every: Duration,
    /// `None` = at any time of day.
    pub active_hours: Option<ActiveHours>,
    /// The zone `active_hours` are read in.
    pub timezone: Tz,
    pub target: HeartbeatTarget,
    pub prompt: String,
}

/// A heartbeat section that does not check out (config validation reports it earlier, with
/// the key path; only a hand-built config gets here).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("heartbeat.{key}: {reason}")]
pub struct BadHeartbeat {
    pub key: &'static str,
    pub reason: String,
}

impl HeartbeatSettings {
    /// The settings `config` describes; `default_zone` (`agent.timezone`) applies when it
    /// names no zone.
    pub fn from_config(config: &HeartbeatConfig, default_zone: &str) -> Result<Self, BadHeartbeat> {
        let bad = |key, reason: String| BadHeartbeat { key, reason };
        let active_hours = ActiveHours::parse(&config.active_hours.start, &config.active_hours.end)
            .map_err(|(key, reason)| bad(key, reason))?;
        let zone_name = if config.timezone.is_empty() { default_zone } else { &config.timezone };
        let timezone = zone_name.parse().map_err(|_| bad("timezone", format!("{zone_name:?} is not a time zone")))?;
        let target = config.target.parse().map_err(|err: BadTarget| bad("target", err.to_string()))?;
        let every = Duration::from_secs(config.every_minutes.saturating_mul(60));
        Ok(Self { every, active_hours, timezone, target, prompt: config.prompt.clone() })
    }

    /// Whether `at` is inside the active hours (always, when none are set).
    pub fn is_active_at(&self, at: DateTime<Utc>) -> bool {
        self.active_hours.is_none_or(|hours| hours.contains(at, self.timezone))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn active_hours_follow_the_zone_and_its_summer_time() {
        let hours = ActiveHours::parse("08:00", "22:00").unwrap().unwrap();
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        // Winter: UTC+1.
        assert!(!hours.contains(utc("2026-01-15T21:30:00Z"), berlin));
        assert!(!hours.contains(utc("2026-01-15T06:30:00Z"), berlin));
        assert!(hours.contains(utc("2026-01-15T07:30:00Z"), berlin));
        assert!(hours.contains(utc("2026-01-15T20:59:00Z"), berlin));
        // Summer: UTC+2, so 06:30 UTC is 08:30 in Berlin.
        assert!(hours.contains(utc("2026-07-15T06:30:00Z"), berlin));
        assert!(!hours.contains(utc("2026-07-15T20:30:00Z"), berlin));
    }

    #[test]
    fn a_window_may_span_midnight_and_end_at_24() {
        let night = ActiveHours::parse("22:00", "06:00").unwrap().unwrap();
        assert!(night.contains(utc("2026-01-15T23:00:00Z"), Tz::UTC));
        assert!(night.contains(utc("2026-01-15T05:59:00Z"), Tz::UTC));
        assert!(!night.contains(utc("2026-01-15T06:00:00Z"), Tz::UTC));
        assert!(!night.contains(utc("2026-01-15T12:00:00Z"), Tz::UTC));
        let evening = ActiveHours::parse("18:00", "24:00").unwrap().unwrap();
        assert!(evening.contains(utc("2026-01-15T23:59:00Z"), Tz::UTC));
        assert!(!evening.contains(utc("2026-01-15T00:00:00Z"), Tz::UTC));
    }

    #[test]
    fn bad_windows_name_their_key() {
        assert_eq!(ActiveHours::parse("", ""), Ok(None));
        assert_eq!(ActiveHours::parse("8:00", "22:00").unwrap_err().0, "active_hours.start");
        assert_eq!(ActiveHours::parse("08:00", "25:00").unwrap_err().0, "active_hours.end");
        assert_eq!(ActiveHours::parse("08:00", "").unwrap_err().0, "active_hours.end");
        assert_eq!(ActiveHours::parse("24:00", "08:00").unwrap_err().0, "active_hours.start");
        assert_eq!(ActiveHours::parse("08:00", "08:00").unwrap_err().0, "active_hours.end");
        assert_eq!(ActiveHours::parse("08:60", "09:00").unwrap_err().0, "active_hours.start");
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
