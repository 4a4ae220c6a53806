//! The entries of a model chain (`agent.models`, `[agents.<name>] models`): a
//! `"<provider>/<model>"` string, or an inline table that gives the model a context window of
//! its own, `{ model = "local/qwen", context_window = 8192 }`. Both forms mix in one list,
//! as Cargo's dependencies mix a version string with a table: the plain string stays the
//! short way for a model with the usual window.
//!
//! A model has one window wherever it is listed: the window of its server. A chain entry
//! without one takes the window another chain gives the same model, else
//! `agent.context_window`; two different windows for one model are refused.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor, value::MapAccessDeserializer};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Config;

/// One model of a chain, as the config writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelSpec {
    /// `<provider>/<model>`, as the chain names it (and `/model` offers it).
    pub model: String,
    /// Its context window in tokens; `None`: see the module docs.
    pub context_window: Option<u64>,
}

impl From<&str> for ModelSpec {
    fn from(model: &str) -> Self {
        Self { model: model.to_owned(), context_window: None }
    }
}

/// The table form's keys; unknown ones are reported with their path like any other key.
#[derive(Default, Deserialize)]
#[serde(default)]
struct ModelTable {
    model: String,
    context_window: Option<u64>,
}

impl<'de> Deserialize<'de> for ModelSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SpecVisitor;

        impl<'de> Visitor<'de> for SpecVisitor {
            type Value = ModelSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"<provider>/<model>\" or a table { model = \"<provider>/<model>\", context_window = N }")
            }

            fn visit_str<E: de::Error>(self, model: &str) -> Result<ModelSpec, E> {
                Ok(ModelSpec::from(model))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ModelSpec, A::Error> {
                // Through the map as given, so the config loader still sees the keys it does not know.
                let table = ModelTable::deserialize(MapAccessDeserializer::new(map))?;
                Ok(ModelSpec { model: table.model, context_window: table.context_window })
            }
        }

        deserializer.deserialize_any(SpecVisitor)
    }
}

impl Serialize for ModelSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Some(window) = self.context_window else { return serializer.serialize_str(&self.model) };
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("model", &self.model)?;
        map.serialize_entry("context_window", &window)?;
        map.end()
    }
}

impl Config {
    /// Every chain's entries with the key each is written under (`agent.models[1]`).
    fn listed_models(&self) -> impl Iterator<Item = (String, &ModelSpec)> {
        let main = self.agent.models.iter().enumerate().map(|(i, spec)| (format!("agent.models[{i}]"), spec));
        let named = self.agents.iter().flat_map(|(name, agent)| {
            agent.models.iter().enumerate().map(move |(i, spec)| (format!("agents.{name}.models[{i}]"), spec))
        });
        main.chain(named)
    }

    /// The windows given in the chains, by model (`provider/model`).
    pub fn listed_windows(&self) -> BTreeMap<&str, u64> {
        self.listed_models().filter_map(|(_, spec)| Some((spec.model.as_str(), spec.context_window?))).collect()
    }

    /// The context window of `model` (`provider/model`): the one a chain gives it, else
    /// `agent.context_window`.
    pub fn context_window_of(&self, model: &str) -> u64 {
        self.listed_windows().get(model).copied().unwrap_or(self.agent.context_window)
    }
}

/// The first model window that cannot be used, as `(key, reason)`: one that leaves no room for
/// a prompt beside the answer, or a second, different window for a model.
pub(super) fn problem(config: &Config) -> Option<(String, String)> {
    let mut seen: BTreeMap<&str, (String, u64)> = BTreeMap::new();
    for (at, spec) in config.listed_models() {
        let Some(window) = spec.context_window else { continue };
        let key = format!("{at}.context_window");
        if let Some(reason) = super::context::room_problem(config, window, &key) {
            return Some((key, reason));
        }
        match seen.get(spec.model.as_str()) {
            Some((first, other)) if *other != window => {
                let reason = format!(
                    "{window} differs from the {other} that {first} gives {:?}: a model has one window, its \
                     server's (give it once, or the same number everywhere)",
                    spec.model
                );
                return Some((key, reason));
            }
            Some(_) => {}
            None => {
                seen.insert(&spec.model, (key, window));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::tests::load_text;

    #[test]
    fn strings_and_tables_mix_in_a_chain() {
        let text = r#"
            [agent]
            context_window = 32000
            models = ["openai/gpt-4o", { model = "local/qwen", context_window = 8192 }]
            [providers.local]
            base_url = "http://127.0.0.1:8080/v1"
            [agents.small]
            models = ["local/qwen"]
        "#;
        let config = load_text(text, &[("OPENAI_API_KEY", "sk")]).unwrap();
        let windows: Vec<(String, u64)> =
            config.model_chain().unwrap().into_iter().map(|entry| (entry.label(), entry.context_window)).collect();
        let expected = [("openai/gpt-4o".to_owned(), 32000), ("local/qwen".to_owned(), 8192)];
        assert_eq!(windows, expected);
        // Listed without a window in another chain: the model's window all the same.
        assert_eq!(config.agent_model_chain("small").unwrap()[0].context_window, 8192);
        // Written back as it was read: a table only where a window is given.
        let written = toml::to_string(&config.agent).unwrap();
        assert!(written.contains(r#"models = ["openai/gpt-4o", { model = "local/qwen", context_window = 8192 }]"#));
    }

    #[test]
    fn a_model_window_is_checked_like_agent_context_window_and_unknown_keys_are_named() {
        let chain = |entry: &str| format!("[agent]\nmodels = [\"openai/gpt\", {entry}]\n");
        let vars = [("OPENAI_API_KEY", "sk")];
        let err = load_text(&chain(r#"{ model = "openai/mini", context_window = 600 }"#), &vars).unwrap_err();
        let err = err.to_string();
        assert!(err.starts_with("agent.models[1].context_window (in ") && err.contains("too small"), "{err}");
        let err = load_text(&chain(r#"{ model = "openai/mini", contxt_window = 8192 }"#), &vars).unwrap_err();
        assert!(err.to_string().contains("agent.models.1.contxt_window"), "{err}");
        let err = load_text(&chain(r#"{ model = "openai/mini", context_window = "big" }"#), &vars).unwrap_err();
        assert!(err.to_string().contains("agent.models"), "{err}");
        let twice = "[agent]\nmodels = [{ model = \"openai/gpt\", context_window = 8192 }]\n\
                     [agents.b]\nmodels = [{ model = \"openai/gpt\", context_window = 4096 }]\n";
        let err = load_text(twice, &vars).unwrap_err().to_string();
        assert!(err.starts_with("agents.b.models[0].context_window") && err.contains("one window"), "{err}");
        // From the environment, written as TOML.
        let env = [
            ("OPENAI_API_KEY", "sk"),
            ("SWITCHBOARD_AGENT__MODELS", r#"["openai/a", { model = "openai/b", context_window = 4096 }]"#),
        ];
        let config = super::super::tests::load_env(&env).unwrap();
        assert_eq!(config.context_window_of("openai/b"), 4096);
        assert_eq!(config.context_window_of("openai/a"), 128_000);
    }
}
