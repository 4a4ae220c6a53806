//! The model chain of an agent: one provider per name, each entry with its retry policy.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{ChainEntry, ProviderKind};
use crate::provider::anthropic::{AnthropicConfig, AnthropicProvider};
use crate::provider::failover::{FailoverEntry, FailoverProvider};
use crate::provider::openai::{OpenAiConfig, OpenAiProvider};
use crate::provider::{Provider, ProviderError, RetryPolicy};

/// One provider per name (entries of one provider share its HTTP client), each entry with
/// its provider's retry policy.
pub fn chain(chain: &[ChainEntry]) -> Result<FailoverProvider, ProviderError> {
    let mut built: HashMap<&str, Arc<dyn Provider>> = HashMap::new();
    let mut entries = Vec::with_capacity(chain.len());
    for entry in chain {
        let provider = match built.get(entry.provider.as_str()) {
            Some(provider) => Arc::clone(provider),
            None => {
                let provider = provider(entry)?;
                built.insert(&entry.provider, Arc::clone(&provider));
                provider
            }
        };
        let retry = RetryPolicy { max_retries: entry.settings.max_retries, ..RetryPolicy::default() };
        entries.push(FailoverEntry { provider, model: entry.model.clone(), retry });
    }
    FailoverProvider::new(entries)
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
        })?),
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(AnthropicConfig {
            name: entry.provider.clone(),
            base_url: settings.base_url.clone(),
            api_key,
            request_timeout: settings.request_timeout(),
            stream: settings.stream,
            vision: settings.vision,
        })?),
    })
}
