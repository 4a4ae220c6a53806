//! What the store keeps of the models' context windows: the window a model's server named when
//! it refused a request as too long (`migrations/sqlite/0025_model_windows.sql`), loaded when
//! the worker starts so a restart does not send one too-long request per model again.

use async_trait::async_trait;

use super::StoreError;

/// A window a model's server named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnedWindow {
    /// `provider/model`, as the chain names it.
    pub model: String,
    /// The window the server named, in tokens.
    pub window: u64,
    /// The window the config gave the model then: with another one configured, `window` is
    /// void (the server's window was changed, and the config with it).
    pub configured: u64,
}

#[async_trait]
pub trait WindowStore: Send + Sync {
    /// Every window learned, by model name.
    async fn learned_windows(&self) -> Result<Vec<LearnedWindow>, StoreError>;

    /// Keeps `learned` for its model. A window stored under the same configured one is only
    /// ever lowered (two processes learning at once keep the smaller); one stored under another
    /// configured window is replaced.
    async fn save_learned_window(&self, learned: &LearnedWindow) -> Result<(), StoreError>;

    /// Forgets what was learned for `model` (its configured window changed).
    async fn forget_learned_window(&self, model: &str) -> Result<(), StoreError>;
}
