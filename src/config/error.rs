//! [`ConfigError`]: every way loading a config can fail, each naming what to fix.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use thiserror::Error;

/// Where a config value came from, so an error can point at the place to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default (an invalid default is a bug in switchboard).
    Default,
    /// A config file.
    File(PathBuf),
    /// An environment variable, by name.
    Env(String),
}

/// Where each key path (`channels.api.listen`) that did not keep its default came from:
/// written while loading, read by the steps after it (env overrides, conventions, validation).
pub(super) type Origins = HashMap<String, Origin>;

impl fmt::Display for Origin {
    /// Renders as a parenthesised suffix (empty for defaults), ready to follow a key path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => Ok(()),
            Origin::File(path) => write!(f, " (in {})", path.display()),
            Origin::Env(var) => write!(f, " (from {var})"),
        }
    }
}

/// A config that cannot be used. Messages are single lines that name the key, file or
/// environment variable at fault; they never contain secret values.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("config file {} does not exist", path.display())]
    NotFound { path: PathBuf },

    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{}:{line}:{column}: TOML syntax error: {message}", path.display())]
    Syntax { path: PathBuf, line: usize, column: usize, message: String },

    #[error("unknown key{} {} in {}", plural(keys), keys.join(", "), path.display())]
    UnknownKeys { keys: Vec<String>, path: PathBuf },

    #[error(
        "environment variable {var} names no config key (keys are SWITCHBOARD_<SECTION>__<KEY>, e.g. SWITCHBOARD_CHANNELS__API__LISTEN)"
    )]
    UnknownEnv { var: String },

    #[error("{var}: {reason} (for {key})")]
    EnvValue { var: String, key: String, reason: String },

    #[error("{key}{origin}: {reason}")]
    Invalid { key: String, origin: Origin, reason: String },

    #[error("cannot determine the user data directory; set data_dir (or SWITCHBOARD_DATA_DIR)")]
    NoDataDir,

    #[error(
        "no model provider configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for a local server such as Ollama) or ANTHROPIC_API_KEY, or [provider] in the config file"
    )]
    NoProvider,

    #[error("provider `{name}` in agent.models has no API key: set providers.{name}.api_key (or {var})")]
    ProviderKey { name: String, var: &'static str },

    #[error("no model configured: set SWITCHBOARD_MODEL or `model` in the config file")]
    NoModel,

    /// The built-in defaults could not be turned into TOML: a bug, not a user error.
    #[error("internal config error: {0}")]
    Internal(String),
}

fn plural(keys: &[String]) -> &'static str {
    if keys.len() == 1 { "" } else { "s" }
}
