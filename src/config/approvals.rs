//! `[approvals]`: tools whose calls wait for an approver's yes.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Identity;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApprovalsConfig {
    /// Tools whose calls, caused by someone who is not an approver, wait for one to allow them.
    pub tools: Vec<String>,
    /// Who decides (`telegram:123`, `api:ops`); empty = everyone at owner level.
    pub approvers: Vec<String>,
    /// Seconds a call waits for a decision; then it is declined as unanswered.
    pub timeout_secs: u64,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self { tools: Vec::new(), approvers: Vec::new(), timeout_secs: 600 }
    }
}

impl ApprovalsConfig {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }
}

/// What is wrong with `[approvals]`, by key.
pub(super) fn problem(config: &ApprovalsConfig) -> Option<(&'static str, String)> {
    if let Some(bad) = config.approvers.iter().find(|approver| approver.parse::<Identity>().is_err()) {
        return Some(("approvals.approvers", format!("{bad:?} is not an identity (channel:sender_id)")));
    }
    if config.tools.iter().any(|tool| tool.trim().is_empty()) {
        return Some(("approvals.tools", "a tool name is empty".into()));
    }
    (config.timeout_secs == 0).then(|| ("approvals.timeout_secs", "must be at least 1".into()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::ConfigError;
    use crate::config::tests::{load_env, load_text};

    fn refusal(result: Result<crate::config::Config, ConfigError>) -> String {
        result.expect_err("the config should be refused").to_string()
    }

    #[test]
    fn without_the_section_nothing_waits_and_a_call_would_wait_600_s() {
        let config = load_env(&[]).unwrap();
        let approvals = &config.approvals;
        assert!(approvals.tools.is_empty() && approvals.approvers.is_empty(), "{approvals:?}");
        assert_eq!((approvals.timeout_secs, approvals.timeout()), (600, Duration::from_secs(600)));
        // Only the tools set: the timeout keeps its default.
        let config = load_text("[approvals]\ntools = [\"exec\"]\n", &[]).unwrap();
        assert_eq!(config.approvals.timeout(), Duration::from_secs(600));
    }

    #[test]
    fn approvers_and_the_timeout_are_read_from_the_file_and_the_environment() {
        let text = "[approvals]\ntools = [\"exec\"]\napprovers = [\"telegram:9\", \"api:ops\"]\ntimeout_secs = 30\n";
        let config = load_text(text, &[]).unwrap();
        assert_eq!(config.approvals.approvers, ["telegram:9", "api:ops"]);
        assert_eq!(config.approvals.timeout(), Duration::from_secs(30));
        let config = load_env(&[("SWITCHBOARD_APPROVALS__APPROVERS", r#"["discord:42"]"#)]).unwrap();
        assert_eq!(config.approvals.approvers, ["discord:42"]);
    }

    #[test]
    fn an_approver_who_is_not_an_identity_is_refused_by_key() {
        let message = refusal(load_text("[approvals]\napprovers = [\"telegram:9\", \"ops\"]\n", &[]));
        assert!(message.starts_with("approvals.approvers (in "), "{message}");
        assert!(message.ends_with("\"ops\" is not an identity (channel:sender_id)"), "{message}");
        let message = refusal(load_env(&[("SWITCHBOARD_APPROVALS__APPROVERS", r#"["telegram:"]"#)]));
        assert!(message.starts_with("approvals.approvers (from SWITCHBOARD_APPROVALS__APPROVERS): "), "{message}");
    }

    #[test]
    fn a_zero_timeout_and_an_empty_tool_name_are_refused() {
        let message = refusal(load_text("[approvals]\ntimeout_secs = 0\n", &[]));
        assert!(message.starts_with("approvals.timeout_secs (in "), "{message}");
        assert!(message.ends_with("must be at least 1"), "{message}");
        let message = refusal(load_env(&[("SWITCHBOARD_APPROVALS__TIMEOUT_SECS", "0")]));
        assert!(message.starts_with("approvals.timeout_secs (from SWITCHBOARD_APPROVALS__TIMEOUT_SECS)"), "{message}");
        let message = refusal(load_text("[approvals]\ntools = [\"exec\", \" \"]\n", &[]));
        assert!(message.starts_with("approvals.tools (in ") && message.ends_with("a tool name is empty"), "{message}");
    }
}
