//! `[memory]`: what the agent recalls from its memory on its own (docs/memory.md, "Recall"),
//! and `[memory.embeddings]` for memory search.

mod embeddings;

use serde::{Deserialize, Serialize};

pub use embeddings::EmbeddingsConfig;
pub(super) use embeddings::problem as embeddings_problem;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryConfig {
    /// Memory search hits (memory files and past conversations of the chat's scope) put into
    /// each turn's prompt for the new message; 0 = no recall.
    pub recall: usize,
    /// Characters of recalled text per turn at most; hits past it are left out.
    pub recall_max_chars: usize,
    /// Embeddings for memory search (off by default).
    #[serde(default)]
    pub embeddings: EmbeddingsConfig,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self { recall: 0, recall_max_chars: 2_000, embeddings: EmbeddingsConfig::default() }
    }
}
