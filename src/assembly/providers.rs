//! The model chain of an agent: one provider per name, each entry with its retry policy.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{ChainEntry, Config, EmbeddingsConfig, PromptCache, ProviderKind};
use crate::provider::anthropic::{AnthropicConfig, AnthropicProvider};
use crate::provider::embeddings::{Embedder, EmbeddingsSettings, OpenAiEmbeddings};
use crate::provider::failover::{FailoverEntry, FailoverProvider, Fitting};
use crate::provider::limit::ProviderLimits;
use crate::provider::openai::{OpenAiConfig, OpenAiHints, OpenAiProvider};
use crate::provider::{Provider, ProviderError, RetryPolicy};

use super::AssemblyError;

/// One provider per name (entries of one provider share its HTTP client), each entry with
/// its provider's retry policy and its model's context window; `fitting` refits requests for
/// the entries tried after the first (see [`FailoverProvider`]).
pub fn chain(
    chain: &[ChainEntry],
    limits: &ProviderLimits,
    fitting: Option<Arc<dyn Fitting>>,
) -> Result<FailoverProvider, ProviderError> {
    let mut built: HashMap<&str, Arc<dyn Provider>> = HashMap::new();
    let mut entries = Vec::with_capacity(chain.len());
    for entry in chain {
        let provider = match built.get(entry.provider.as_str()) {
            Some(provider) => Arc::clone(provider),
            None => {
                let provider = limits.apply(&entry.provider, entry.settings.max_concurrent_requests, provider(entry)?);
                built.insert(&entry.provider, Arc::clone(&provider));
                provider
            }
        };
        let retry = RetryPolicy { max_retries: entry.settings.max_retries, ..RetryPolicy::default() };
        entries.push(FailoverEntry {
            provider,
            model: entry.model.clone(),
            retry,
            context_window: entry.context_window,
        });
    }
    let chain = FailoverProvider::new(entries)?;
    Ok(match fitting {
        Some(fitting) => chain.with_fitting(fitting),
        None => chain,
    })
}

fn provider(entry: &ChainEntry) -> Result<Arc<dyn Provider>, ProviderError> {
    let settings = &entry.settings;
    let api_key = Some(settings.api_key.expose().to_owned()).filter(|k| !k.is_empty());
    Ok(match settings.kind {
        ProviderKind::Openai => Arc::new(OpenAiProvider::new(OpenAiConfig {
            name: entry.provider.clone(),
            base_url: settings.base_url.clone(),
            api_key,
            request_timeout: settings.request_timeout(),
            stream: settings.stream,
            vision: settings.vision,
            extra_headers: Vec::new(),
            hints: OpenAiHints::for_server(&settings.base_url, settings.prompt_cache),
        })?),
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(AnthropicConfig {
            name: entry.provider.clone(),
            base_url: settings.base_url.clone(),
            api_key,
            request_timeout: settings.request_timeout(),
            stream: settings.stream,
            vision: settings.vision,
            cache: (settings.prompt_cache != PromptCache::Off).then_some(settings.prompt_cache_ttl),
        })?),
    })
}

/// The embedder `[memory.embeddings]` names: its provider's server and key, its model. The
/// provider was checked at load (known, OpenAI-compatible); a hand-built config that names
/// an unknown or Anthropic one fails here.
pub fn embedder(config: &Config, embeddings: &EmbeddingsConfig) -> Result<Arc<dyn Embedder>, AssemblyError> {
    let name = embeddings.provider.as_str();
    let invalid = |reason| AssemblyError::Config(super::settings::invalid("memory.embeddings.provider".into(), reason));
    let settings = config.provider_named(name).ok_or_else(|| invalid(format!("no provider named {name:?}")))?;
    if settings.kind != ProviderKind::Openai {
        return Err(invalid(format!("provider {name:?} has no OpenAI-compatible embeddings endpoint")));
    }
    let embedder = OpenAiEmbeddings::new(EmbeddingsSettings {
        name: name.to_owned(),
        base_url: settings.base_url.clone(),
        api_key: Some(settings.api_key.expose().to_owned()).filter(|key| !key.is_empty()),
        model: embeddings.model.clone(),
        timeout: settings.request_timeout(),
    })?;
    Ok(Arc::new(embedder))
}
