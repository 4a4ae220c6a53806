//! `[subagents]`: background sub-agents started by the `spawn` tool.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubagentsConfig {
    /// Offer the `spawn` tool (to senders whose level allows it, see `[permissions.tools]`).
    pub enabled: bool,
    /// Model calls one sub-agent may make before it must answer.
    pub max_iterations: u32,
    /// Queued or running sub-agents one session may have at once.
    pub max_children_per_session: usize,
    /// Sub-agents running at once in one worker process; more wait in a queue. Separate from
    /// `worker.max_concurrent_runs`, so sub-agents never hold up people's turns.
    pub max_concurrent: usize,
    /// Seconds a sub-agent may run before it is stopped and reported as timed out.
    pub timeout_secs: u64,
    /// Seconds a worker's claim on a sub-agent lasts without renewal (renewed every third of
    /// it); after that a sub-agent whose worker died is reported as failed.
    pub lease_secs: u64,
    /// Characters of a sub-agent's result put into the announcement (cut in the middle).
    pub max_result_chars: usize,
}

impl Default for SubagentsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_iterations: 15,
            max_children_per_session: 5,
            max_concurrent: 4,
            timeout_secs: 600,
            lease_secs: 60,
            max_result_chars: 4000,
        }
    }
}

impl SubagentsConfig {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_secs)
    }
}

/// The first bad `[subagents]` value, with its key.
pub(super) fn problem(config: &SubagentsConfig) -> Option<(&'static str, String)> {
    let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let counts = [
        ("subagents.max_iterations", u64::from(config.max_iterations)),
        ("subagents.max_children_per_session", as_u64(config.max_children_per_session)),
        ("subagents.max_concurrent", as_u64(config.max_concurrent)),
        ("subagents.timeout_secs", config.timeout_secs),
        ("subagents.max_result_chars", as_u64(config.max_result_chars)),
    ];
    if let Some((key, value)) = counts.into_iter().find(|&(_, value)| value == 0) {
        return Some((key, format!("must be at least 1, not {value}")));
    }
    // Renewed every third of the lease: below 2 s a renewal would be due every few hundred ms.
    if config.lease_secs < 2 {
        return Some(("subagents.lease_secs", format!("must be at least 2 (seconds), not {}", config.lease_secs)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::load_text;

    #[test]
    fn defaults_pass_and_zeroes_name_their_key() {
        assert_eq!(problem(&SubagentsConfig::default()), None);
        let zero = SubagentsConfig { max_concurrent: 0, ..SubagentsConfig::default() };
        assert_eq!(problem(&zero).map(|(key, _)| key), Some("subagents.max_concurrent"));
        let short = SubagentsConfig { lease_secs: 1, ..SubagentsConfig::default() };
        let (key, reason) = problem(&short).unwrap();
        assert_eq!(key, "subagents.lease_secs");
        assert!(reason.contains("at least 2"), "{reason}");
    }

    #[test]
    fn the_section_loads_from_file_and_environment_and_bad_values_name_their_source() {
        let text = "[subagents]\nmax_concurrent = 2\n";
        let config = load_text(text, &[("SWITCHBOARD_SUBAGENTS__LEASE_SECS", "5")]).unwrap();
        assert_eq!((config.subagents.max_concurrent, config.subagents.lease_secs), (2, 5));
        assert_eq!(config.subagents.max_iterations, 15);
        let message = load_text("", &[("SWITCHBOARD_SUBAGENTS__LEASE_SECS", "1")]).unwrap_err().to_string();
        assert!(message.contains("subagents.lease_secs"), "{message}");
        assert!(message.contains("SWITCHBOARD_SUBAGENTS__LEASE_SECS"), "{message}");
        let message = load_text("[subagents]\nmax_childs = 3\n", &[]).unwrap_err().to_string();
        assert!(message.contains("unknown key subagents.max_childs"), "{message}");
    }
}
