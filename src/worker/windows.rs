//! The windows models' servers named, kept in the store (see [`crate::context::Windows`]):
//! loaded when the worker starts, written after each turn that learned or forgot one (the
//! chain learns them during the turn, where no store is at hand).

use std::collections::HashSet;

use super::agents::Agents;
use crate::context::{ContextEngine, Target, WindowChange};
use crate::store::Store;

/// Loads what earlier runs learned, says which windows are in force, and forgets those whose
/// model has another configured window now.
pub(super) async fn restore(store: &dyn Store, context: &ContextEngine, agents: &Agents) {
    let stored = match store.learned_windows().await {
        Ok(stored) => stored,
        Err(err) => {
            tracing::warn!(%err, "cannot read the context windows learned before; they are learned again");
            return;
        }
    };
    if stored.is_empty() {
        return;
    }
    context.windows().restore(stored);
    let mut said = HashSet::new();
    for agent in agents.all() {
        for model in &agent.settings().models {
            let configured = context.configured_window(agent, model);
            let window = context.window(Target { agent, model });
            if window < configured && said.insert(model) {
                tracing::info!(
                    model = %model,
                    window,
                    configured,
                    "using the context window the model's server named before the restart"
                );
            }
        }
    }
    save(store, context).await;
}

/// Writes what was learned or forgotten since the last call.
pub(super) async fn save(store: &dyn Store, context: &ContextEngine) {
    for change in context.windows().take_changes() {
        let written = match &change {
            WindowChange::Learned(learned) => store.save_learned_window(learned).await,
            WindowChange::Forgotten(model) => store.forget_learned_window(model).await,
        };
        if let Err(err) = written {
            tracing::warn!(%err, ?change, "cannot store a model's context window; a restart learns it again");
        }
    }
}
