//! What a config reload (SIGHUP) replaces while the worker runs: a value that turns read once
//! at their start and keep, so a new one takes effect from the next turn and a running turn
//! finishes with what it started with.

use std::sync::{Arc, PoisonError, RwLock};

pub(crate) struct Reloadable<T>(RwLock<Arc<T>>);

impl<T> Reloadable<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(RwLock::new(Arc::new(value)))
    }

    /// The current value; it stays valid for its holder after a replacement.
    pub(crate) fn get(&self) -> Arc<T> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn replace(&self, value: T) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(value);
    }
}
