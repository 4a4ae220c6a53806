//! A heartbeat's settings in checked form: interval, active hours in a zone, and target.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::{ActiveHours, BadTarget, HeartbeatConfig, HeartbeatTarget};
use crate::zone::{Tz, UnknownZone};

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
        let timezone = zone_name.parse().map_err(|unknown: UnknownZone| bad("timezone", unknown.to_string()))?;
        let target = config.target.parse().map_err(|err: BadTarget| bad("target", err.to_string()))?;
        let every = Duration::from_secs(config.every_minutes.saturating_mul(60));
        Ok(Self { every, active_hours, timezone, target, prompt: config.prompt.clone() })
    }

    /// Whether `at` is inside the active hours (always, when none are set).
    pub fn is_active_at(&self, at: DateTime<Utc>) -> bool {
        self.active_hours.is_none_or(|hours| hours.contains(at, &self.timezone))
    }
}
