//! `[transcription]`: voice notes turned into text through the OpenAI-compatible
//! `/audio/transcriptions` endpoint of a configured provider entry; off by default.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Config, ProviderConfig, ProviderKind};

/// The largest recording sent by default: 25 MiB, the OpenAI API's limit.
pub const DEFAULT_TRANSCRIPTION_MAX_BYTES: u64 = 25 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TranscriptionConfig {
    /// The provider entry whose `base_url` and `api_key` are used, named as in `agent.models`
    /// (`openai` is `[provider]`); empty = voice notes are not transcribed.
    pub provider: String,
    /// The transcription model (`whisper-1`, or what a local server serves).
    pub model: String,
    /// The language spoken, as an ISO-639-1 code (`de`); empty = detected by the service.
    pub language: String,
    /// Larger recordings are not sent; the model is told why.
    pub max_bytes: u64,
    /// Seconds one transcription may take.
    pub timeout_secs: u64,
}

impl Default for TranscriptionConfig {
    fn default() -> Self {
        Self {
            provider: String::new(),
            model: "whisper-1".into(),
            language: String::new(),
            max_bytes: DEFAULT_TRANSCRIPTION_MAX_BYTES,
            timeout_secs: 60,
        }
    }
}

impl TranscriptionConfig {
    pub fn is_enabled(&self) -> bool {
        !self.provider.trim().is_empty()
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }
}

impl Config {
    /// The provider entry voice notes are sent to; `None` when transcription is off (or, on a
    /// config that was not validated, names no entry).
    pub fn transcription_provider(&self) -> Option<&ProviderConfig> {
        let name = self.transcription.provider.trim();
        if name.is_empty() { None } else { self.provider_named(name) }
    }
}

/// The first bad `[transcription]` value, with its key.
pub(super) fn problem(config: &Config) -> Option<(&'static str, String)> {
    let transcription = &config.transcription;
    if transcription.max_bytes == 0 {
        return Some(("transcription.max_bytes", "must be at least 1, not 0".into()));
    }
    if transcription.timeout_secs == 0 {
        return Some(("transcription.timeout_secs", "must be at least 1, not 0".into()));
    }
    let name = transcription.provider.trim();
    if name.is_empty() {
        return None;
    }
    if transcription.model.trim().is_empty() {
        return Some(("transcription.model", "must name a model, e.g. \"whisper-1\"".into()));
    }
    provider_problem(config, name).map(|reason| ("transcription.provider", reason))
}

/// Why the provider entry `name` cannot transcribe, if it cannot.
fn provider_problem(config: &Config, name: &str) -> Option<String> {
    let Some(provider) = config.provider_named(name) else {
        return Some(config.unknown_provider(name));
    };
    if provider.kind == ProviderKind::Anthropic {
        return Some(format!(
            "{name:?} is an Anthropic provider, and the Anthropic API has no transcription endpoint: \
             name an OpenAI-compatible provider entry"
        ));
    }
    if !super::providers::is_configured(provider) {
        let (key_var, _) = provider.kind.env_vars();
        return Some(format!("provider {name:?} has no API key (set its api_key, or {key_var})"));
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::config::tests::load_text;

    #[test]
    fn off_by_default_and_a_named_provider_lends_its_server_and_key() {
        let config = load_text("", &[]).unwrap();
        assert!(!config.transcription.is_enabled());
        assert_eq!(config.transcription_provider(), None);
        let text = "[providers.local]\nbase_url = \"http://127.0.0.1:9000/v1\"\n\
                    [transcription]\nprovider = \"local\"\nlanguage = \"de\"\n";
        let config = load_text(text, &[]).unwrap();
        assert_eq!(config.transcription_provider().unwrap().base_url, "http://127.0.0.1:9000/v1");
        assert_eq!((config.transcription.model.as_str(), config.transcription.language.as_str()), ("whisper-1", "de"));
        assert_eq!(config.transcription.max_bytes, 25 * 1024 * 1024);
        // `openai` is [provider], with the key from the environment.
        let config = load_text("[transcription]\nprovider = \"openai\"\n", &[("OPENAI_API_KEY", "sk-1")]).unwrap();
        assert_eq!(config.transcription_provider().unwrap().api_key.expose(), "sk-1");
    }

    #[test]
    fn an_unknown_or_anthropic_provider_is_refused_at_start() {
        let message = load_text("[transcription]\nprovider = \"whisper\"\n", &[]).unwrap_err().to_string();
        assert!(message.starts_with("transcription.provider (in "), "{message}");
        assert!(message.contains("no provider named \"whisper\" (known: openai)"), "{message}");
        let text =
            "[providers.claude]\nkind = \"anthropic\"\napi_key = \"ak\"\n[transcription]\nprovider = \"claude\"\n";
        let message = load_text(text, &[]).unwrap_err().to_string();
        assert!(message.contains("Anthropic API has no transcription endpoint"), "{message}");
        // The `anthropic` entry ANTHROPIC_API_KEY adds is refused the same way.
        let message =
            load_text("", &[("ANTHROPIC_API_KEY", "ak"), ("SWITCHBOARD_TRANSCRIPTION__PROVIDER", "anthropic")])
                .unwrap_err()
                .to_string();
        assert!(message.contains("(from SWITCHBOARD_TRANSCRIPTION__PROVIDER)"), "{message}");
        assert!(message.contains("no transcription endpoint"), "{message}");
    }

    #[test]
    fn a_provider_without_a_key_and_zero_limits_are_refused() {
        let message = load_text("[transcription]\nprovider = \"openai\"\n", &[]).unwrap_err().to_string();
        assert!(message.contains("provider \"openai\" has no API key"), "{message}");
        assert!(message.contains("OPENAI_API_KEY"), "{message}");
        let message = load_text("[transcription]\nmax_bytes = 0\n", &[]).unwrap_err().to_string();
        assert!(message.contains("transcription.max_bytes"), "{message}");
        let text = "[transcription]\nprovider = \"openai\"\nmodel = \" \"\n";
        let message = load_text(text, &[("OPENAI_API_KEY", "sk")]).unwrap_err().to_string();
        assert!(message.contains("transcription.model"), "{message}");
        let message = load_text("[transcription]\nvoice = true\n", &[]).unwrap_err().to_string();
        assert!(message.contains("unknown key transcription.voice"), "{message}");
    }
}
