//! The model chain: `[provider]`, named `[providers.*]`, `agent.models` and the environment
//! conventions that fill their keys.

use super::{err_text, load_env, load_text};
use crate::config::*;

fn chain(config: &Config) -> Vec<(String, String, String)> {
    let entries = config.model_chain().unwrap();
    entries.into_iter().map(|e| (e.provider, e.model, e.settings.base_url)).collect()
}

fn owned(provider: &str, model: &str, url: &str) -> (String, String, String) {
    (provider.into(), model.into(), url.into())
}

#[test]
fn legacy_chain_is_provider_with_model() {
    let config = load_env(&[("OPENAI_API_KEY", "sk"), ("SWITCHBOARD_MODEL", "gpt")]).unwrap();
    assert_eq!(chain(&config), [owned("openai", "gpt", OPENAI_DEFAULT_BASE_URL)]);
    // With both keys, [provider] (OpenAI) still answers; `anthropic` is there for agent.models.
    let both =
        load_env(&[("OPENAI_API_KEY", "sk"), ("ANTHROPIC_API_KEY", "ak"), ("SWITCHBOARD_MODEL", "gpt")]).unwrap();
    assert_eq!(chain(&both)[0].0, "openai");
    assert!(both.provider_named("anthropic").is_some());
}

#[test]
fn anthropic_key_alone_is_enough() {
    let vars = [("ANTHROPIC_API_KEY", "ak-1"), ("SWITCHBOARD_MODEL", "claude-x")];
    let config = load_env(&vars).unwrap();
    assert_eq!(chain(&config), [owned("anthropic", "claude-x", ANTHROPIC_DEFAULT_BASE_URL)]);
    let entry = &config.model_chain().unwrap()[0].settings;
    assert_eq!((entry.kind, entry.api_key.expose()), (ProviderKind::Anthropic, "ak-1"));
    let vars = [("ANTHROPIC_API_KEY", "ak"), ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"), ("SWITCHBOARD_MODEL", "c")];
    assert_eq!(chain(&load_env(&vars).unwrap())[0].2, "http://127.0.0.1:9/");
    // [provider] of kind anthropic takes the ANTHROPIC_* variables instead of the OPENAI_* ones.
    let text = "model = \"c\"\n[provider]\nkind = \"anthropic\"\n";
    let config = load_text(text, &[("ANTHROPIC_API_KEY", "ak"), ("OPENAI_API_KEY", "sk")]).unwrap();
    assert_eq!(config.provider.api_key.expose(), "ak");
    assert_eq!(chain(&config), [owned("anthropic", "c", ANTHROPIC_DEFAULT_BASE_URL)]);
}

#[test]
fn named_providers_and_models() {
    let text = r#"
        [agent]
        models = ["local/llama3.2", "claude/claude-x", "openai/gpt-4o", "router/meta/llama-3"]
        [providers.local]
        base_url = "http://127.0.0.1:11434/v1"
        max_retries = 0
        [providers.claude]
        kind = "anthropic"
        [providers.router]
        base_url = "https://router.example/v1"
        api_key = "rk"
    "#;
    let vars = [("ANTHROPIC_API_KEY", "ak"), ("OPENAI_API_KEY", "sk")];
    let config = load_text(text, &vars).unwrap();
    let entries = config.model_chain().unwrap();
    let names: Vec<(&str, &str)> = entries.iter().map(|e| (e.provider.as_str(), e.model.as_str())).collect();
    assert_eq!(
        names,
        [("local", "llama3.2"), ("claude", "claude-x"), ("openai", "gpt-4o"), ("router", "meta/llama-3")]
    );
    // A provider with its own server gets no key from the environment; one without gets both.
    assert!(entries[0].settings.api_key.is_empty());
    assert_eq!(entries[0].settings.max_retries, 0);
    assert_eq!(entries[1].settings.api_key.expose(), "ak");
    assert_eq!(entries[1].settings.base_url, ANTHROPIC_DEFAULT_BASE_URL);
    assert_eq!(entries[3].settings.api_key.expose(), "rk");
    // An explicit [providers.claude] of kind anthropic does not stop the implicit `anthropic`.
    assert!(config.providers.contains_key("anthropic"));
}

#[test]
fn chain_errors_are_one_line_naming_the_fix() {
    let message = err_text(load_text("[agent]\nmodels = [\"nope/x\"]\n", &[]));
    assert!(message.starts_with("agent.models (in ") && message.contains("no provider named \"nope\""), "{message}");
    let message = err_text(load_text("[agent]\nmodels = [\"just-a-model\"]\n", &[]));
    assert!(message.contains("is not \"<provider>/<model>\""), "{message}");
    let config =
        load_text("[agent]\nmodels = [\"claude/c\"]\n[providers.claude]\nkind = \"anthropic\"\n", &[]).unwrap();
    let message = config.require_provider().unwrap_err().to_string();
    assert_eq!(
        message,
        "provider `claude` in agent.models has no API key: set providers.claude.api_key (or ANTHROPIC_API_KEY)"
    );
    let message = err_text(load_text("[providers.x]\nbase_url = \"localhost\"\n", &[]));
    assert!(message.starts_with("providers.x.base_url (in "), "{message}");
    let message = err_text(load_text("[prices.\"m\"]\ninput_per_mtok = -1.0\n", &[]));
    assert!(message.starts_with("prices.m.input_per_mtok (in "), "{message}");
}

#[test]
fn env_reaches_into_named_maps() {
    let text = "[providers.Claude]\nkind = \"anthropic\"\n";
    let vars = [
        ("SWITCHBOARD_PROVIDERS__CLAUDE__API_KEY", "ak-env"),
        ("SWITCHBOARD_PROVIDERS__LOCAL__BASE_URL", "http://127.0.0.1:8080/v1"),
        ("SWITCHBOARD_PRICES", r#"{"gpt-4o-mini" = {input_per_mtok = 0.15, output_per_mtok = 0.6}}"#),
        ("SWITCHBOARD_AGENT__MODELS", r#"["Claude/c", "local/l"]"#),
    ];
    let config = load_text(text, &vars).unwrap();
    assert_eq!(config.providers["Claude"].api_key.expose(), "ak-env");
    assert_eq!(config.providers["local"].base_url, "http://127.0.0.1:8080/v1");
    assert_eq!(
        config.prices["gpt-4o-mini"],
        ModelPrice { input_per_mtok: 0.15, output_per_mtok: 0.6, ..ModelPrice::default() }
    );
    assert_eq!(config.model_chain().unwrap().len(), 2);
    let message = err_text(load_env(&[("SWITCHBOARD_PROVIDERS__X__NOPE", "1")]));
    assert!(message.starts_with("environment variable SWITCHBOARD_PROVIDERS__X__NOPE "), "{message}");
    let message = err_text(load_env(&[("SWITCHBOARD_PROVIDERS__X__MAX_RETRIES", "many")]));
    assert!(message.contains("(for providers.x.max_retries)"), "{message}");
}
