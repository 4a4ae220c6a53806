//! `[memory.embeddings]`: optional embeddings for memory search, from a provider's
//! OpenAI-compatible `/embeddings` endpoint (docs/memory.md, "Search", "Embeddings").

use serde::{Deserialize, Serialize};

use crate::config::{Config, ProviderKind};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EmbeddingsConfig {
    /// The provider whose `base_url` and key are used: a `[providers.<name>]`, or `openai` for
    /// `[provider]`. Empty = no embeddings (full-text search only).
    pub provider: String,
    pub model: String,
    /// Texts sent per request at most.
    pub batch: usize,
    /// Chunks a search ranks by meaning at most (the memory files' first, then the newest of
    /// the past conversations); so also the most a search embeds, the first one in a large
    /// scope included.
    pub max_chunks: usize,
    /// Cosine similarity a chunk needs to the query to be ranked by meaning at all (so that a
    /// query about nothing in memory does not return its nearest unrelated chunks).
    pub min_similarity: f32,
}

impl Default for EmbeddingsConfig {
    fn default() -> Self {
        Self {
            provider: String::new(),
            model: "text-embedding-3-small".into(),
            batch: 64,
            max_chunks: 2_000,
            min_similarity: 0.25,
        }
    }
}

impl EmbeddingsConfig {
    /// Whether embeddings are on.
    pub fn is_enabled(&self) -> bool {
        !self.provider.trim().is_empty()
    }
}

/// The first problem of `[memory.embeddings]`, with its key; none when it is off.
pub(in crate::config) fn problem(config: &Config) -> Option<(&'static str, String)> {
    let embeddings = &config.memory.embeddings;
    if !embeddings.is_enabled() {
        return None;
    }
    let name = embeddings.provider.as_str();
    let Some(provider) = config.provider_named(name) else {
        return Some(("memory.embeddings.provider", config.unknown_provider(name)));
    };
    if provider.kind == ProviderKind::Anthropic {
        let reason = format!(
            "provider {name:?} is an Anthropic provider, which has no embeddings API; name an OpenAI-compatible one"
        );
        return Some(("memory.embeddings.provider", reason));
    }
    if !crate::config::providers::is_configured(provider) {
        let (key_var, _) = provider.kind.env_vars();
        let reason = format!("provider {name:?} has no api_key (set it, or {key_var}) and no server of its own");
        return Some(("memory.embeddings.provider", reason));
    }
    if embeddings.model.trim().is_empty() {
        return Some(("memory.embeddings.model", "must name the embedding model".into()));
    }
    for (key, value) in
        [("memory.embeddings.batch", embeddings.batch), ("memory.embeddings.max_chunks", embeddings.max_chunks)]
    {
        if value == 0 {
            return Some((key, "must be at least 1, not 0".into()));
        }
    }
    if !(-1.0..=1.0).contains(&embeddings.min_similarity) {
        let reason = format!("{} is not a cosine similarity (-1 to 1)", embeddings.min_similarity);
        return Some(("memory.embeddings.min_similarity", reason));
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::config::tests::load_text;

    fn problem_with(toml: &str) -> String {
        load_text(toml, &[]).map(|_| String::new()).unwrap_or_else(|error| error.to_string())
    }

    #[test]
    fn off_by_default_and_on_with_a_known_openai_compatible_provider() {
        let config = load_text("", &[]).unwrap();
        assert!(!config.memory.embeddings.is_enabled());
        let on = "[providers.local]\nbase_url = \"http://localhost:11434/v1\"\n\
                  [memory.embeddings]\nprovider = \"local\"\nmodel = \"nomic-embed-text\"\n";
        let config = load_text(on, &[]).unwrap();
        assert_eq!(config.memory.embeddings.provider, "local");
        assert_eq!(config.memory.embeddings.batch, 64);
        // `openai` is [provider].
        let openai = load_text("[memory.embeddings]\nprovider = \"openai\"\n", &[("OPENAI_API_KEY", "sk-x")]).unwrap();
        assert!(openai.memory.embeddings.is_enabled());
    }

    #[test]
    fn an_unknown_or_anthropic_provider_is_refused() {
        let unknown = problem_with("[memory.embeddings]\nprovider = \"nope\"\n");
        assert!(
            unknown.contains("memory.embeddings.provider") && unknown.contains("no provider named \"nope\""),
            "{unknown}"
        );
        let anthropic = "[providers.claude]\nkind = \"anthropic\"\napi_key = \"k\"\n\
                         [memory.embeddings]\nprovider = \"claude\"\n";
        let message = problem_with(anthropic);
        assert!(message.contains("memory.embeddings.provider") && message.contains("no embeddings API"), "{message}");
        let keyless = problem_with("[memory.embeddings]\nprovider = \"openai\"\n");
        assert!(keyless.contains("OPENAI_API_KEY"), "{keyless}");
        let zero = "[providers.local]\nbase_url = \"http://localhost:1/v1\"\n\
                    [memory.embeddings]\nprovider = \"local\"\nbatch = 0\n";
        assert!(problem_with(zero).contains("memory.embeddings.batch"), "{}", problem_with(zero));
    }
}
