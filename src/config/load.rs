//! Loading: defaults < file < environment, then conventions, then validation.
//!
//! Everything is merged as a `toml::Value` tree before one typed deserialization, so an env
//! override can be typed by the key it replaces and unknown keys are found in one place.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::error::{ConfigError, Origin, Origins};
use super::{
    AgentConfig, BindingConfig, Config, ModelPrice, NamedAgentConfig, ProviderConfig, env, providers, validate,
};

/// Names the config file when no path is given.
const CONFIG_PATH_VAR: &str = "SWITCHBOARD_CONFIG";

impl Config {
    /// Loads the configuration from defaults, a TOML file and `env` (the process environment,
    /// passed in so that tests need not mutate it).
    ///
    /// The file is `path` when given, else `$SWITCHBOARD_CONFIG`, else
    /// `<user config dir>/switchboard/config.toml` when that exists, else none. A file that was
    /// named (by `path` or the variable) but does not exist is an error.
    pub fn load(path: Option<&Path>, env: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let fallback = dirs::config_dir().map(|dir| dir.join("switchboard").join("config.toml"));
        load_with(path, env, fallback)
    }

    /// [`Config::load`] with the process environment.
    pub fn load_from_process_env(path: Option<&Path>) -> Result<Self, ConfigError> {
        // Variables that are not valid UTF-8 cannot be config values; skip them rather than
        // panic as `std::env::vars` would.
        let env: HashMap<String, String> = std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect();
        Self::load(path, &env)
    }

    /// Loading with `text` as the file's content (named `path` in errors) and no environment:
    /// the fuzz targets' entry point. Not part of the API.
    #[cfg(feature = "fuzzing")]
    #[doc(hidden)]
    pub fn load_text_for_fuzzing(path: &Path, text: &str) -> Result<Self, ConfigError> {
        load_text(Some((path.to_path_buf(), text.to_owned())), &HashMap::new())
    }
}

/// [`Config::load`] with the fallback file location as a parameter, for tests.
pub(super) fn load_with(
    path: Option<&Path>,
    env: &HashMap<String, String>,
    fallback: Option<PathBuf>,
) -> Result<Config, ConfigError> {
    let file = read_source(path, env, fallback)?;
    load_text(file, env)
}

/// Loading once the file (its path and text), if any, has been read.
pub(super) fn load_text(file: Option<(PathBuf, String)>, env: &HashMap<String, String>) -> Result<Config, ConfigError> {
    let mut origins = Origins::new();
    let mut tree = to_table(&Config::default())?;
    if let Some((path, text)) = &file {
        let table = parse_file(path, text)?;
        record_origins(&table, "", &Origin::File(path.clone()), &mut origins);
        merge(&mut tree, table);
    }
    env::apply_overrides(&mut tree, &to_table(&schema_sample())?, env, &mut origins)?;
    let file_path = file.map(|(path, _)| path);
    let mut config = deserialize(tree, file_path.as_deref(), &origins)?;
    apply_conventions(&mut config, env, &mut origins)?;
    validate::validate(&config, &origins)?;
    Ok(config)
}

/// Defaults plus a value for every `Option` field (which serializes to nothing when `None`):
/// the full set of keys with their types, for resolving env overrides. A new `Option` field
/// must be given a value here to be settable from the environment. Maps with names the user
/// chooses (`providers`, `prices`, `users.groups`, `channels.api.tokens`, `mcp.servers` and
/// their `env` and `headers`) get one entry named
/// [`env::ANY_NAME`], which stands for any name.
pub(super) fn schema_sample() -> Config {
    let any = || env::ANY_NAME.to_owned();
    Config {
        agent: AgentConfig { temperature: Some(0.0), ..AgentConfig::default() },
        providers: [(any(), ProviderConfig::default())].into(),
        prices: [(any(), ModelPrice::default())].into(),
        agents: [(
            any(),
            NamedAgentConfig {
                max_tokens: Some(0),
                system_prompt: Some(String::new()),
                skills: Some(Vec::new()),
                heartbeat: Some(super::HeartbeatConfig::default()),
                ..Default::default()
            },
        )]
        .into(),
        bindings: vec![BindingConfig::default()],
        mcp: super::McpConfig {
            servers: [(
                any(),
                super::McpServerConfig {
                    env: [(any(), super::Secret::default())].into(),
                    headers: [(any(), super::Secret::default())].into(),
                    ..super::McpServerConfig::default()
                },
            )]
            .into(),
            ..super::McpConfig::default()
        },
        users: super::UsersConfig {
            groups: [(any(), super::GroupAccessConfig::default())].into(),
            ..super::UsersConfig::default()
        },
        channels: super::ChannelsConfig {
            api: super::ApiChannelConfig {
                tokens: [(any(), super::ApiTokenConfig::default())].into(),
                ..super::ApiChannelConfig::default()
            },
            ..super::ChannelsConfig::default()
        },
        ..Config::default()
    }
}

fn to_table(config: &Config) -> Result<Table, ConfigError> {
    Table::try_from(config).map_err(|error| ConfigError::Internal(error.to_string()))
}

/// Reads the config file to use, if any, with its path.
fn read_source(
    path: Option<&Path>,
    env: &HashMap<String, String>,
    fallback: Option<PathBuf>,
) -> Result<Option<(PathBuf, String)>, ConfigError> {
    let named =
        path.map(Path::to_path_buf).or_else(|| env.get(CONFIG_PATH_VAR).filter(|p| !p.is_empty()).map(PathBuf::from));
    let (path, required) = match (named, fallback) {
        (Some(path), _) => (path, true),
        (None, Some(path)) => (path, false),
        (None, None) => return Ok(None),
    };
    // Read directly rather than test for existence first, so the file cannot vanish between.
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some((path, text))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if required {
                Err(ConfigError::NotFound { path })
            } else {
                Ok(None)
            }
        }
        Err(source) => Err(ConfigError::Read { path, source }),
    }
}

fn parse_file(path: &Path, text: &str) -> Result<Table, ConfigError> {
    toml::from_str(text).map_err(|error: toml::de::Error| {
        let offset = error.span().map_or(0, |span| span.start.min(text.len()));
        let (line, column) = line_and_column(text, offset);
        ConfigError::Syntax {
            path: path.to_path_buf(),
            line,
            column,
            // The parser's message can span lines; an error here is one line.
            message: error.message().trim().replace('\n', "; "),
        }
    })
}

/// 1-based line and column (in characters) of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

fn record_origins(table: &Table, prefix: &str, origin: &Origin, origins: &mut Origins) {
    for (name, value) in table {
        let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
        match value {
            Value::Table(inner) => record_origins(inner, &path, origin, origins),
            _ => {
                origins.insert(path, origin.clone());
            }
        }
    }
}

/// Merges `over` into `base`: tables key by key, anything else replaced whole.
fn merge(base: &mut Table, over: Table) {
    for (name, value) in over {
        match (base.get_mut(&name), value) {
            (Some(Value::Table(base_inner)), Value::Table(over_inner)) => merge(base_inner, over_inner),
            (_, value) => {
                base.insert(name, value);
            }
        }
    }
}

/// The typed deserialization. Unknown keys can only come from the file: environment
/// variables were resolved against the schema already.
fn deserialize(tree: Table, file: Option<&Path>, origins: &Origins) -> Result<Config, ConfigError> {
    let mut unknown = Vec::new();
    // serde_ignored writes an `Option` level as `?` (`agents.ops.heartbeat.?.x`); a TOML key
    // path has no such level.
    let config: Config =
        serde_ignored::deserialize(Value::Table(tree), |path| unknown.push(path.to_string().replace(".?", "")))
            .map_err(|error| invalid_value(&error, origins))?;
    if unknown.is_empty() {
        return Ok(config);
    }
    unknown.sort();
    let path = file.map_or_else(|| PathBuf::from("the configuration"), Path::to_path_buf);
    Err(ConfigError::UnknownKeys { keys: unknown, path })
}

/// Turns a deserialization error into one that names the key first. The TOML value
/// deserializer keeps the key path private but renders it as a last line "in `a.b`".
fn invalid_value(error: &toml::de::Error, origins: &Origins) -> ConfigError {
    let rendered = error.to_string();
    let key =
        rendered.trim_end().rsplit_once("\nin `").map_or("config", |(_, key)| key.trim_end_matches('`')).to_owned();
    let origin = origins.get(&key).cloned().unwrap_or(Origin::Default);
    ConfigError::Invalid { key, origin, reason: error.message().trim().replace('\n', "; ") }
}

/// Fills what the config leaves empty: paths under the user data dir, the providers from
/// the `OPENAI_*` / `ANTHROPIC_*` variables other tools use too, and the keys and tokens from
/// `BRAVE_API_KEY`, `TELEGRAM_BOT_TOKEN`, `DISCORD_BOT_TOKEN` and the `MATRIX_*` account.
fn apply_conventions(
    config: &mut Config,
    env: &HashMap<String, String>,
    origins: &mut Origins,
) -> Result<(), ConfigError> {
    config.data_dir = if config.data_dir.as_os_str().is_empty() {
        dirs::data_dir().ok_or(ConfigError::NoDataDir)?.join("switchboard")
    } else {
        expand_home(&config.data_dir)
    };
    config.store.path = match expand_home(&config.store.path) {
        path if path.as_os_str().is_empty() => config.data_dir.join("switchboard.db"),
        // `join` keeps an absolute path as it is.
        path => config.data_dir.join(path),
    };
    config.agent.workspace = match expand_home(&config.agent.workspace) {
        path if path.as_os_str().is_empty() => config.data_dir.join("workspace"),
        path => config.data_dir.join(path),
    };
    for (name, agent) in &mut config.agents {
        agent.workspace = match expand_home(&agent.workspace) {
            path if path.as_os_str().is_empty() => config.data_dir.join("agents").join(name),
            path => config.data_dir.join(path),
        };
    }
    providers::apply_conventions(config, env, origins);
    let secrets = [
        (&mut config.tools.web.brave_api_key, "tools.web.brave_api_key", "BRAVE_API_KEY"),
        (&mut config.channels.telegram.token, "channels.telegram.token", "TELEGRAM_BOT_TOKEN"),
        (&mut config.channels.discord.token, "channels.discord.token", "DISCORD_BOT_TOKEN"),
        (&mut config.channels.matrix.password, "channels.matrix.password", "MATRIX_PASSWORD"),
        (&mut config.channels.matrix.access_token, "channels.matrix.access_token", "MATRIX_ACCESS_TOKEN"),
        (&mut config.channels.matrix.store_passphrase, "channels.matrix.store_passphrase", "MATRIX_STORE_PASSPHRASE"),
    ];
    for (secret, key, var) in secrets {
        let value = env.get(var).map(|value| value.trim()).filter(|value| !value.is_empty());
        if secret.is_empty()
            && let Some(value) = value
        {
            *secret = value.into();
            origins.insert(key.into(), Origin::Env(var.into()));
        }
    }
    let matrix = &mut config.channels.matrix;
    let account = [
        (&mut matrix.homeserver, "channels.matrix.homeserver", "MATRIX_HOMESERVER"),
        (&mut matrix.user, "channels.matrix.user", "MATRIX_USER"),
    ];
    for (value, key, var) in account {
        if value.is_empty()
            && let Some(from_env) = env.get(var).map(|text| text.trim()).filter(|text| !text.is_empty())
        {
            from_env.clone_into(value);
            origins.insert(key.into(), Origin::Env(var.into()));
        }
    }
    let media_dir = |dir: &Path, channel: &str| match expand_home(dir) {
        path if path.as_os_str().is_empty() => config.agent.workspace.join("media").join(channel),
        path => config.data_dir.join(path),
    };
    config.channels.telegram.media_dir = media_dir(&config.channels.telegram.media_dir, "telegram");
    config.channels.discord.media_dir = media_dir(&config.channels.discord.media_dir, "discord");
    config.channels.matrix.media_dir = media_dir(&config.channels.matrix.media_dir, "matrix");
    Ok(())
}

/// Expands a leading `~` to the home directory, as a shell would have; TOML does not.
fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), dirs::home_dir()) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path.to_path_buf(),
    }
}
