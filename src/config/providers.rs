//! Providers and the model chain.
//!
//! Provider names usable in `agent.models` (`"<provider>/<model>"`):
//! - every `[providers.<name>]`;
//! - `[provider]`, under the name of its kind (`openai` by default), unless a
//!   `[providers.<that name>]` exists;
//! - `anthropic`, when `ANTHROPIC_API_KEY` is set and nothing else has that name: it is added
//!   to `providers` at load, with `ANTHROPIC_BASE_URL` (or the hosted API) and the timeout,
//!   streaming and retry settings of `[provider]`.
//!
//! With `agent.models` empty the chain is one model, `model`, on `[provider]` when that is
//! configured (a key, or a server of its own), else on `anthropic` when that exists. So
//! today's `OPENAI_API_KEY` setups keep working, and `ANTHROPIC_API_KEY` alone is enough too;
//! with both keys set, `[provider]` (OpenAI) wins unless `agent.models` says otherwise.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, Origin, Origins};
use super::{Config, ProviderConfig, ProviderKind};

/// The Anthropic URL used when neither the config nor `ANTHROPIC_BASE_URL` names one.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// One model of the resolved chain.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainEntry {
    /// The provider's name, as `agent.models` spells it.
    pub provider: String,
    pub model: String,
    pub settings: ProviderConfig,
    /// The model's context window: its own (see [`super::ModelSpec`]), else
    /// `agent.context_window`.
    pub context_window: u64,
}

impl ChainEntry {
    /// `<provider>/<model>`, as the chain names it.
    pub fn label(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

impl Config {
    /// The provider a name in `agent.models` refers to.
    pub fn provider_named(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.get(name).or_else(|| (name == self.provider.kind.as_str()).then_some(&self.provider))
    }

    /// The models to try, in order, with their providers' settings. Fails with one line that
    /// says what to set when no model can be called.
    pub fn model_chain(&self) -> Result<Vec<ChainEntry>, ConfigError> {
        if self.models_are_listed() {
            return self.agent.models.iter().map(|spec| self.chain_entry(&spec.model)).collect();
        }
        let legacy = self.provider.kind.as_str();
        let provider = if is_configured(&self.provider) {
            legacy
        } else if self.providers.get("anthropic").is_some_and(is_configured) {
            "anthropic"
        } else {
            return Err(ConfigError::NoProvider);
        };
        if self.model.trim().is_empty() {
            return Err(ConfigError::NoModel);
        }
        let settings = self.provider_named(provider).cloned().unwrap_or_default();
        let context_window = self.agent.context_window;
        Ok(vec![ChainEntry { provider: provider.to_owned(), model: self.model.clone(), settings, context_window }])
    }

    fn models_are_listed(&self) -> bool {
        !self.agent.models.is_empty()
    }

    pub(super) fn chain_entry(&self, spec: &str) -> Result<ChainEntry, ConfigError> {
        let (name, model) = parse_model_spec(spec).map_err(|reason| invalid("agent.models", reason))?;
        let settings = self.provider_named(name).ok_or_else(|| invalid("agent.models", self.unknown_provider(name)))?;
        if !is_configured(settings) {
            let (key_var, _) = settings.kind.env_vars();
            return Err(ConfigError::ProviderKey { name: name.to_owned(), var: key_var });
        }
        let context_window = self.context_window_of(spec);
        Ok(ChainEntry {
            provider: name.to_owned(),
            model: model.to_owned(),
            settings: settings.clone(),
            context_window,
        })
    }

    pub(super) fn unknown_provider(&self, name: &str) -> String {
        let mut known: Vec<&str> = self.providers.keys().map(String::as_str).collect();
        if !self.providers.contains_key(self.provider.kind.as_str()) {
            known.push(self.provider.kind.as_str());
        }
        known.sort_unstable();
        format!("no provider named {name:?} (known: {})", known.join(", "))
    }
}

/// `"<provider>/<model>"`; the model may contain `/` itself (`openrouter/meta-llama/llama-3`).
pub(super) fn parse_model_spec(spec: &str) -> Result<(&str, &str), String> {
    match spec.split_once('/') {
        Some((provider, model)) if !provider.trim().is_empty() && !model.trim().is_empty() => Ok((provider, model)),
        _ => Err(format!("{spec:?} is not \"<provider>/<model>\", e.g. \"openai/gpt-4o-mini\"")),
    }
}

/// A key, or a server other than the hosted API (a local server may need no key).
pub(super) fn is_configured(provider: &ProviderConfig) -> bool {
    let base_url = provider.base_url.trim_end_matches('/');
    let default = provider.kind.default_base_url().trim_end_matches('/');
    !provider.api_key.is_empty() || (!base_url.is_empty() && base_url != default)
}

fn invalid(key: &str, reason: String) -> ConfigError {
    ConfigError::Invalid { key: key.to_owned(), origin: Origin::Default, reason }
}

/// Fills what the provider sections leave empty from the conventional variables, and adds the
/// implicit `anthropic` entry (see the module docs).
pub(super) fn apply_conventions(config: &mut Config, env: &HashMap<String, String>, origins: &mut Origins) {
    let from_env = |name: &str| env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()).map(str::to_owned);
    // `[provider]`: as before, the key comes from the environment even with a base URL set.
    let (key_var, url_var) = config.provider.kind.env_vars();
    if config.provider.api_key.is_empty()
        && let Some(key) = from_env(key_var)
    {
        config.provider.api_key = key.into();
        origins.insert("provider.api_key".into(), Origin::Env(key_var.into()));
    }
    if config.provider.base_url.is_empty() {
        config.provider.base_url = match from_env(url_var) {
            Some(url) => {
                origins.insert("provider.base_url".into(), Origin::Env(url_var.into()));
                url
            }
            None => config.provider.kind.default_base_url().to_owned(),
        };
    }
    // `[providers.*]`: the variables apply only to entries that name no server of their own.
    for (name, entry) in &mut config.providers {
        if !entry.base_url.is_empty() {
            continue;
        }
        let (key_var, url_var) = entry.kind.env_vars();
        entry.base_url = match from_env(url_var) {
            Some(url) => {
                origins.insert(format!("providers.{name}.base_url"), Origin::Env(url_var.into()));
                url
            }
            None => entry.kind.default_base_url().to_owned(),
        };
        if entry.api_key.is_empty()
            && let Some(key) = from_env(key_var)
        {
            entry.api_key = key.into();
            origins.insert(format!("providers.{name}.api_key"), Origin::Env(key_var.into()));
        }
    }
    add_implicit_anthropic(config, &from_env, origins);
}

fn add_implicit_anthropic(config: &mut Config, from_env: &dyn Fn(&str) -> Option<String>, origins: &mut Origins) {
    let Some(key) = from_env("ANTHROPIC_API_KEY") else { return };
    if config.provider_named("anthropic").is_some() {
        return;
    }
    let base_url = from_env("ANTHROPIC_BASE_URL").unwrap_or_else(|| ANTHROPIC_DEFAULT_BASE_URL.to_owned());
    origins.insert("providers.anthropic.api_key".into(), Origin::Env("ANTHROPIC_API_KEY".into()));
    // `[provider]`'s cache hints may be for an OpenAI-compatible server; Anthropic's own apply.
    let prompt_cache = match config.provider.prompt_cache {
        PromptCache::Off => PromptCache::Off,
        _ => PromptCache::Auto,
    };
    let entry = ProviderConfig {
        kind: ProviderKind::Anthropic,
        base_url,
        api_key: key.into(),
        prompt_cache,
        ..config.provider.clone()
    };
    config.providers.insert("anthropic".into(), entry);
}

/// Which prompt-cache hints a provider's requests carry (`prompt_cache`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PromptCache {
    /// Anthropic: `cache_control` breakpoints. api.openai.com: `prompt_cache_key` per
    /// conversation. Other OpenAI-compatible servers: none (they may refuse unknown fields).
    #[default]
    #[serde(rename = "auto")]
    Auto,
    #[serde(rename = "off")]
    Off,
    /// `prompt_cache_key`, for a server other than api.openai.com that accepts it.
    #[serde(rename = "openai")]
    Openai,
    /// `cache_prompt: true`, for llama.cpp's `llama-server`.
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
}

/// How long Anthropic keeps a cache entry (`prompt_cache_ttl`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheTtl {
    /// Five minutes, refreshed by each hit; writes cost 1.25 times the input price.
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    /// An hour, for conversations with longer pauses; writes cost twice the input price.
    #[serde(rename = "1h")]
    OneHour,
}
