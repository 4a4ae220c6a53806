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
