//! The context window of each agent's model: as configured (`agent.context_window`), or smaller
//! when the model server says so. A server that refuses a request as too long often names its
//! window ("maximum context length is 2048 tokens"); budgets then use that number, so a local
//! model with the default configuration still gets answers, and the log says what to set.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Per agent: the window its budgets use.
#[derive(Debug)]
pub struct Windows {
    configured: u64,
    /// Windows servers named, smaller than the configured one.
    learned: Mutex<HashMap<String, u64>>,
    /// Per agent, the tools its degraded prompt was last logged at warn level without (logged
    /// again only when they change: a new MCP server, a learned window).
    degraded_noted: Mutex<HashMap<String, Vec<String>>>,
}

impl Windows {
    pub fn new(configured: u64) -> Self {
        Self { configured, learned: Mutex::default(), degraded_noted: Mutex::default() }
    }

    /// The window `agent`'s budgets use.
    pub fn of(&self, agent: &str) -> u64 {
        let learned = self.learned.lock().unwrap_or_else(PoisonError::into_inner);
        learned.get(agent).copied().unwrap_or(self.configured)
    }

    /// Takes the window a server named for `agent`'s model when it is smaller than the one in
    /// use. True when it is (the budgets shrank).
    pub fn learn(&self, agent: &str, named: u64) -> bool {
        let mut learned = self.learned.lock().unwrap_or_else(PoisonError::into_inner);
        let current = learned.get(agent).copied().unwrap_or(self.configured);
        if named >= current {
            return false;
        }
        learned.insert(agent.to_owned(), named);
        tracing::warn!(
            agent,
            configured = self.configured,
            server = named,
            "the model server's context window is smaller than agent.context_window; using the server's. \
             Set agent.context_window = {named} (see docs/local-models.md)"
        );
        true
    }

    /// Says (at warn level when the dropped tools differ from the last warning's, else at
    /// debug: it holds for every turn after) that a turn of `agent` runs with the minimal
    /// prompt and without the `dropped` tools, and whether even that fits.
    pub fn note_degraded(&self, agent: &str, dropped: &[String], fits: bool) {
        let window = self.of(agent);
        let first = {
            let mut noted = self.degraded_noted.lock().unwrap_or_else(PoisonError::into_inner);
            let mut sorted = dropped.to_vec();
            sorted.sort_unstable();
            noted.insert(agent.to_owned(), sorted.clone()).is_none_or(|before| before != sorted)
        };
        let without = if dropped.is_empty() {
            "with every tool".to_owned()
        } else {
            format!("without the tools {}", dropped.join(", "))
        };
        if !first {
            tracing::debug!(agent, window, %without, fits, "minimal prompt for a small context window");
        } else if !fits {
            tracing::warn!(
                agent,
                window,
                "the context window leaves little room beside even the minimal system prompt without tools: \
                 raise agent.context_window (and the model server's window) or shorten the workspace files"
            );
        } else {
            tracing::warn!(
                agent,
                window,
                "the context window is too small for the full system prompt and every tool: turns use the \
                 minimal prompt, {without} (see docs/local-models.md)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_smaller_window_named_by_the_server_is_used() {
        let windows = Windows::new(128_000);
        assert_eq!(windows.of("main"), 128_000);
        assert!(windows.learn("main", 2048));
        assert_eq!((windows.of("main"), windows.of("other")), (2048, 128_000));
        assert!(!windows.learn("main", 4096), "a larger number never grows the window back");
        assert!(!windows.learn("main", 2048));
    }
}
