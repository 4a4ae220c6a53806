//! `[history]` and `[compaction]`: what of a session's past the model sees, and when the past
//! is folded into a summary.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The history pipeline run before every model call (`crate::context::pipeline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryConfig {
    /// The last N user turns are kept, with their assistant and tool messages.
    pub keep_user_turns: usize,
    /// Past this share of the input budget, long tool results are cut to head and tail.
    pub soft_trim_ratio: f64,
    /// Tool results longer than this (characters) are soft-trimmed to this length.
    pub soft_trim_chars: usize,
    /// Past this share of the input budget, old tool results are replaced by a marker.
    pub hard_clear_ratio: f64,
    /// The most recent assistant messages (and the tool results after them) never pruned.
    pub protect_recent_turns: usize,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            keep_user_turns: 20,
            soft_trim_ratio: 0.5,
            soft_trim_chars: 4000,
            hard_clear_ratio: 0.75,
            protect_recent_turns: 2,
        }
    }
}

/// Compaction: summarising old history once a session grows long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactionConfig {
    /// Compact when a session has more messages than this since its last compaction.
    pub max_messages: usize,
    /// … or when its history's estimated tokens pass this share of the input budget.
    pub context_share: f64,
    /// Messages left out of the summary, verbatim, at the end of the history.
    pub keep_recent_messages: usize,
    /// Seconds the memory flush turn (writing lasting facts to MEMORY.md) may take.
    pub flush_timeout_secs: u64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self { max_messages: 120, context_share: 0.8, keep_recent_messages: 20, flush_timeout_secs: 60 }
    }
}

impl CompactionConfig {
    pub fn flush_timeout(&self) -> Duration {
        Duration::from_secs(self.flush_timeout_secs)
    }
}

/// The first inconsistency of `[history]`, `[compaction]` and the history limit they work on.
pub(super) fn problem(config: &super::Config) -> Option<(&'static str, String)> {
    let (history, compaction) = (&config.history, &config.compaction);
    let share = |value: f64| value > 0.0 && value <= 1.0;
    for (key, value) in [
        ("history.soft_trim_ratio", history.soft_trim_ratio),
        ("history.hard_clear_ratio", history.hard_clear_ratio),
        ("compaction.context_share", compaction.context_share),
    ] {
        if !share(value) {
            return Some((key, format!("{value} is not a share of the budget (above 0, at most 1)")));
        }
    }
    if history.hard_clear_ratio < history.soft_trim_ratio {
        let reason =
            format!("{} is below history.soft_trim_ratio ({})", history.hard_clear_ratio, history.soft_trim_ratio);
        return Some(("history.hard_clear_ratio", reason));
    }
    if compaction.keep_recent_messages >= compaction.max_messages {
        let reason = format!(
            "{} leaves nothing to summarise: keep it below compaction.max_messages ({})",
            compaction.keep_recent_messages, compaction.max_messages
        );
        return Some(("compaction.keep_recent_messages", reason));
    }
    // History is read up to this limit; compaction would never see max_messages otherwise.
    if config.agent.history_limit <= compaction.max_messages {
        let reason = format!(
            "{} must be above compaction.max_messages ({})",
            config.agent.history_limit, compaction.max_messages
        );
        return Some(("agent.history_limit", reason));
    }
    None
}
