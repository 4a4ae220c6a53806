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
    /// … or when its history's estimated tokens pass this share of the room a turn has for
    /// its history (the input budget less the system prompt and the tools).
    pub context_share: f64,
    /// The newest messages are left out of the summary, verbatim, up to this share of that
    /// room: well below `context_share`, so each compaction frees real room.
    pub keep_recent_share: f64,
    /// … and at most this many messages.
    pub keep_recent_messages: usize,
    /// Seconds the memory flush turn (writing lasting facts to MEMORY.md) may take.
    pub flush_timeout_secs: u64,
    /// Longest summary, in tokens: the summary call asks for at most this much (and at most
    /// the agent's output reserve), and a longer answer is cut. Every later turn carries the
    /// summary, so this bounds what a turn costs however long the conversation grows.
    pub summary_max_tokens: u32,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            max_messages: 120,
            context_share: 0.8,
            keep_recent_share: 0.25,
            keep_recent_messages: 20,
            flush_timeout_secs: 60,
            summary_max_tokens: 2000,
        }
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
        ("compaction.keep_recent_share", compaction.keep_recent_share),
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
    if compaction.keep_recent_share > compaction.context_share / 2.0 {
        let reason = format!(
            "{} would leave little to summarise: keep it at most half of compaction.context_share ({}), or a \
             conversation compacts again a few turns later",
            compaction.keep_recent_share, compaction.context_share
        );
        return Some(("compaction.keep_recent_share", reason));
    }
    if compaction.keep_recent_messages > compaction.max_messages / 2 {
        let reason = format!(
            "{} would leave little to summarise: keep it at most half of compaction.max_messages ({}), or a \
             conversation compacts again a few turns later",
            compaction.keep_recent_messages, compaction.max_messages
        );
        return Some(("compaction.keep_recent_messages", reason));
    }
    if let Some(problem) = window_problem(config) {
        return Some(problem);
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

/// Output tokens reserved when `agent.max_tokens` is 0 (the provider's default), at most: a
/// quarter of a smaller window instead, so a local model's 2k–8k window keeps room for input.
pub const DEFAULT_OUTPUT_RESERVE: u64 = 4096;

/// Output tokens reserved in a window of `window` tokens: `max_tokens` when set, else an eighth
/// of the window up to [`DEFAULT_OUTPUT_RESERVE`] (reached at 32k), and at least
/// [`MIN_OUTPUT_RESERVE`] where that is at most a quarter of the window. A quarter let a small
/// local model that answers at its limit fill two thirds of a 4,096-token window's history with
/// one exchange: each turn then dropped the one before, and the server re-read its prompt.
pub fn output_reserve(window: u64, max_tokens: Option<u32>) -> u64 {
    let default = || (window / 8).max(MIN_OUTPUT_RESERVE.min(window / 4)).min(DEFAULT_OUTPUT_RESERVE);
    max_tokens.map_or_else(default, u64::from)
}

/// An answer limit below this cuts ordinary answers short (about 380 English words).
const MIN_OUTPUT_RESERVE: u64 = 512;

/// Input tokens a context window must keep beside the completion reserve: less cannot hold
/// even the minimal system prompt and a message.
pub const MIN_INPUT_ROOM: u64 = 512;

/// A context window too small for input once the completion reserve is taken.
fn window_problem(config: &super::Config) -> Option<(&'static str, String)> {
    let key = "agent.context_window";
    room_problem(config, config.agent.context_window, key).map(|reason| (key, reason))
}

/// Why a window of `window` tokens (set at `key`) leaves no room for a prompt beside the
/// largest completion reserve an agent takes, if it does not.
pub(super) fn room_problem(config: &super::Config, window: u64, key: &str) -> Option<String> {
    let reserve_of = |max_tokens: u32| output_reserve(window, Some(max_tokens).filter(|&n| n > 0));
    let mut reserves = vec![("agent.max_tokens", reserve_of(config.agent.max_tokens))];
    reserves.extend(
        config.agents.values().filter_map(|agent| agent.max_tokens).map(|n| ("agents.*.max_tokens", reserve_of(n))),
    );
    let (reserve_key, reserve) = reserves.into_iter().max_by_key(|(_, reserve)| *reserve)?;
    if window.saturating_sub(reserve) >= MIN_INPUT_ROOM {
        return None;
    }
    Some(if reserve_key == "agent.max_tokens" && config.agent.max_tokens == 0 {
        format!(
            "{window} tokens is too small: at least {} are needed for a prompt and an answer",
            MIN_INPUT_ROOM * 4 / 3
        )
    } else {
        format!(
            "{window} tokens minus {reserve_key} = {reserve} for the answer leaves under {MIN_INPUT_ROOM} tokens for \
             the prompt; lower {reserve_key} or raise {key}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::load_text;
    use super::*;

    #[test]
    fn the_completion_reserve_scales_with_a_small_window() {
        assert_eq!(output_reserve(128_000, None), DEFAULT_OUTPUT_RESERVE);
        assert_eq!(output_reserve(32_768, None), DEFAULT_OUTPUT_RESERVE);
        assert_eq!(output_reserve(8192, None), 1024);
        assert_eq!(output_reserve(4096, None), 512);
        assert_eq!(output_reserve(2048, None), 512, "an eighth would cut ordinary answers");
        assert_eq!(output_reserve(1024, None), 256, "at most a quarter");
        assert_eq!(output_reserve(2048, Some(300)), 300);
    }

    #[test]
    fn a_window_without_room_for_a_prompt_fails_at_start() {
        // A local model's 2k window with the default max_tokens is usable.
        assert!(load_text("[agent]\ncontext_window = 2048\n", &[]).is_ok());
        let err = load_text("[agent]\ncontext_window = 2048\nmax_tokens = 1800\n", &[]).unwrap_err().to_string();
        assert!(err.contains("agent.context_window") && err.contains("lower agent.max_tokens"), "{err}");
        let err = load_text("[agent]\ncontext_window = 600\n", &[]).unwrap_err().to_string();
        assert!(err.contains("agent.context_window") && err.contains("too small"), "{err}");
        let named = "[agent]\ncontext_window = 4096\n[agents.small]\nmax_tokens = 3900\n";
        let err = load_text(named, &[]).unwrap_err().to_string();
        assert!(err.contains("agents.*.max_tokens"), "{err}");
    }
}
