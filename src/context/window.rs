//! The context window of each model: as configured (its own `context_window` in the chain, else
//! `agent.context_window`), or smaller when its server says so. A server that refuses a request
//! as too long often names its window ("maximum context length is 2048 tokens"); budgets of
//! that model then use that number, so a local model with the default configuration still gets
//! answers, and the log says what to set.
//!
//! A window is learned per model (`provider/model`, as the chain names it), never per agent: a
//! smaller fallback model's refusal must not shrink the primary's budgets. What is learned is
//! kept with the window configured at the time; when the configuration gives the model another
//! window (the server's window was raised, and the config with it), the learned one is void and
//! forgotten. The worker writes what changed to the store ([`Windows::take_changes`]) and loads
//! it at start ([`Windows::restore`]), so a restart does not pay for the lesson again.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::store::windows::LearnedWindow;

/// What changed since the worker last wrote the learned windows to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowChange {
    Learned(LearnedWindow),
    /// The model's configured window changed: what was learned for it is void.
    Forgotten(String),
}

/// The windows servers named, by model.
#[derive(Debug, Default)]
pub struct Windows {
    learned: Mutex<HashMap<String, LearnedWindow>>,
    unsaved: Mutex<Vec<WindowChange>>,
    /// Per agent and model, the tools its degraded prompt was last logged at warn level without
    /// (logged again only when they change: a new MCP server, a learned window).
    degraded_noted: Mutex<HashMap<String, Vec<String>>>,
}

impl Windows {
    /// The window budgets of `model` use, configured as `configured`.
    pub fn of(&self, model: &str, configured: u64) -> u64 {
        let mut learned = self.learned.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(known) = learned.get(model) else { return configured };
        if known.configured == configured {
            return known.window.min(configured);
        }
        tracing::info!(
            model,
            was = known.configured,
            now = configured,
            learned = known.window,
            "the configured context window of the model changed; the smaller one its server named is forgotten"
        );
        learned.remove(model);
        self.note(WindowChange::Forgotten(model.to_owned()));
        configured
    }

    /// Takes the window `model`'s server `named` when it is smaller than the one in use. True
    /// when it is (the model's budgets shrank).
    pub fn learn(&self, model: &str, configured: u64, named: u64) -> bool {
        if named >= self.of(model, configured) {
            return false;
        }
        let window = LearnedWindow { model: model.to_owned(), window: named, configured };
        self.learned.lock().unwrap_or_else(PoisonError::into_inner).insert(model.to_owned(), window.clone());
        self.note(WindowChange::Learned(window));
        tracing::warn!(
            model,
            configured,
            server = named,
            "the model server's context window is smaller than the configured one; using the server's. \
             Set agent.context_window = {named} (or, in a chain of models, {{ model = \"{model}\", \
             context_window = {named} }} in agent.models; see docs/local-models.md)"
        );
        true
    }

    /// Takes the windows stored by an earlier run. Those whose configured window has changed
    /// since are forgotten when their model's window is first asked for.
    pub fn restore(&self, stored: Vec<LearnedWindow>) {
        let mut learned = self.learned.lock().unwrap_or_else(PoisonError::into_inner);
        for window in stored {
            learned.entry(window.model.clone()).or_insert(window);
        }
    }

    /// What was learned or forgotten since the last call, oldest first, for the store.
    pub fn take_changes(&self) -> Vec<WindowChange> {
        std::mem::take(&mut *self.unsaved.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn note(&self, change: WindowChange) {
        self.unsaved.lock().unwrap_or_else(PoisonError::into_inner).push(change);
    }

    /// Says (at warn level when the dropped tools differ from the last warning's, else at
    /// debug: it holds for every turn after) that a turn of `agent` on `model`, whose window is
    /// `window`, runs with the minimal prompt and without the `dropped` tools, and whether even
    /// that fits.
    pub fn note_degraded(&self, agent: &str, model: &str, window: u64, dropped: &[String], fits: bool) {
        let first = {
            let mut noted = self.degraded_noted.lock().unwrap_or_else(PoisonError::into_inner);
            let mut sorted = dropped.to_vec();
            sorted.sort_unstable();
            noted.insert(format!("{agent} {model}"), sorted.clone()).is_none_or(|before| before != sorted)
        };
        let without = if dropped.is_empty() {
            "with every tool".to_owned()
        } else {
            format!("without the tools {}", dropped.join(", "))
        };
        if !first {
            tracing::debug!(agent, model, window, %without, fits, "minimal prompt for a small context window");
        } else if !fits {
            tracing::warn!(
                agent,
                model,
                window,
                "the context window leaves little room beside even the minimal system prompt without tools: \
                 raise the model's context_window (and the model server's window) or shorten the workspace files"
            );
        } else {
            tracing::warn!(
                agent,
                model,
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
    fn a_window_a_server_names_is_its_models_alone_and_never_grows_back() {
        let windows = Windows::default();
        assert_eq!(windows.of("local/qwen", 8192), 8192);
        assert!(windows.learn("local/qwen", 8192, 2048));
        assert_eq!((windows.of("local/qwen", 8192), windows.of("openai/gpt-4o", 128_000)), (2048, 128_000));
        assert!(!windows.learn("local/qwen", 8192, 4096), "a larger number never grows the window back");
        assert!(!windows.learn("local/qwen", 8192, 2048));
        let learned = LearnedWindow { model: "local/qwen".into(), window: 2048, configured: 8192 };
        assert_eq!(windows.take_changes(), [WindowChange::Learned(learned)]);
        assert!(windows.take_changes().is_empty(), "each change is handed over once");
    }

    #[test]
    fn a_changed_configured_window_voids_what_was_learned() {
        let windows = Windows::default();
        let stored = |window, configured| LearnedWindow { model: "local/qwen".into(), window, configured };
        windows.restore(vec![stored(2048, 8192)]);
        assert_eq!(windows.of("local/qwen", 8192), 2048, "kept across a restart");
        assert!(windows.take_changes().is_empty());
        // The operator raised the server's window and the config with it.
        assert_eq!(windows.of("local/qwen", 16_384), 16_384);
        assert_eq!(windows.take_changes(), [WindowChange::Forgotten("local/qwen".into())]);
        // Set back, the old lesson does not come back.
        assert_eq!(windows.of("local/qwen", 8192), 8192);
    }
}
