use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::load::{load_with, schema_sample};
use super::*;

mod providers;

const EXAMPLE: &str = include_str!("../../config.example.toml");

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A config file in a fresh temporary directory (kept alive by the returned guard).
fn write_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// Loads `text` as the config file, never looking at the user's real config dir.
pub(super) fn load_text(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let (_dir, path) = write_file(text);
    load_with(Some(&path), &env(vars), None)
}

pub(super) fn load_env(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    load_with(None, &env(vars), None)
}

fn err_text(result: Result<Config, ConfigError>) -> String {
    result.expect_err("load should fail").to_string()
}

#[test]
fn defaults_without_file() {
    let config = load_env(&[]).unwrap();
    let defaults = Config::default();
    assert_eq!(config.bus, "memory");
    assert_eq!(config.bus_kind(), BusKind::InProcess);
    assert_eq!(config.model, "");
    assert_eq!(config.log, "info");
    assert_eq!(config.channels.api, defaults.channels.api);
    let media_dir = config.data_dir.join("workspace").join("media").join("telegram");
    assert_eq!(config.channels.telegram, TelegramChannelConfig { media_dir, ..defaults.channels.telegram });
    let media_dir = config.data_dir.join("workspace").join("media").join("discord");
    assert_eq!(config.channels.discord, DiscordChannelConfig { media_dir, ..defaults.channels.discord });
    assert_eq!(config.worker, defaults.worker);
    assert_eq!(config.agent, AgentConfig { workspace: config.data_dir.join("workspace"), ..defaults.agent });
    assert_eq!(config.tools, defaults.tools);
    assert_eq!(config.bus_options, defaults.bus_options);
    assert_eq!(config.channels.api.listen, "127.0.0.1:8787".parse::<SocketAddr>().unwrap());
    assert_eq!(config.provider.base_url, OPENAI_DEFAULT_BASE_URL);
    assert!(config.provider.api_key.is_empty());
    assert!(config.data_dir().ends_with("switchboard"));
    assert_eq!(config.store_path(), config.data_dir().join("switchboard.db"));
    assert_eq!(config.worker.max_message_age(), std::time::Duration::from_secs(3600));
}

#[test]
fn fallback_file_is_used_only_when_it_exists() {
    let (dir, path) = write_file("model = \"from-fallback\"\n");
    let config = load_with(None, &env(&[]), Some(path)).unwrap();
    assert_eq!(config.model, "from-fallback");
    let absent = dir.path().join("absent.toml");
    assert_eq!(load_with(None, &env(&[]), Some(absent)).unwrap().model, "");
}

#[test]
fn switchboard_config_names_the_file() {
    let (_dir, path) = write_file("model = \"from-var\"\n");
    let vars = [("SWITCHBOARD_CONFIG", path.to_str().unwrap())];
    assert_eq!(load_with(None, &env(&vars), None).unwrap().model, "from-var");

    let missing = [("SWITCHBOARD_CONFIG", "/nonexistent/switchboard.toml")];
    let message = err_text(load_with(None, &env(&missing), None));
    assert_eq!(message, "config file /nonexistent/switchboard.toml does not exist");
}

#[test]
fn explicit_missing_path_is_an_error_naming_it() {
    let path = Path::new("/nonexistent/dir/config.toml");
    let error = load_with(Some(path), &env(&[]), None).unwrap_err();
    assert!(matches!(&error, ConfigError::NotFound { path: p } if p == path));
    assert!(error.to_string().contains("/nonexistent/dir/config.toml"));
}

#[test]
fn file_overrides_defaults() {
    let text = r#"
        data_dir = "/srv/sb"
        bus = "nats://127.0.0.1:4222"
        model = "gpt-4o-mini"
        [worker]
        max_concurrent_runs = 4
        [agent]
        temperature = 0.5
        [store]
        path = "state/db.sqlite"
        [channels.api]
        listen = "0.0.0.0:9000"
        enabled = false
    "#;
    let config = load_text(text, &[]).unwrap();
    assert_eq!(config.data_dir(), Path::new("/srv/sb"));
    assert_eq!(config.bus_kind(), BusKind::Nats("nats://127.0.0.1:4222"));
    assert_eq!(config.model, "gpt-4o-mini");
    assert_eq!(config.worker.max_concurrent_runs, 4);
    assert_eq!(config.agent.temperature, Some(0.5));
    // A relative store path lives under the data dir.
    assert_eq!(config.store_path(), Path::new("/srv/sb/state/db.sqlite"));
    assert_eq!(config.channels.api.listen, "0.0.0.0:9000".parse::<SocketAddr>().unwrap());
    assert!(!config.channels.api.enabled);
    // Keys the file leaves out keep their defaults, in the same section too.
    assert_eq!(config.worker.shutdown_grace_secs, 30);
    assert_eq!(config.channels.api.max_body_bytes, 65536);
}

#[test]
fn env_overrides_file() {
    let text = r#"
        model = "from-file"
        [worker]
        max_concurrent_runs = 4
        [provider]
        stream = true
        [channels.api]
        listen = "0.0.0.0:9000"
    "#;
    let vars = [
        ("SWITCHBOARD_MODEL", "from-env"),
        ("SWITCHBOARD_WORKER__MAX_CONCURRENT_RUNS", "8"),
        ("SWITCHBOARD_PROVIDER__STREAM", "false"),
        ("SWITCHBOARD_CHANNELS__API__LISTEN", "127.0.0.1:9001"),
        ("SWITCHBOARD_AGENT__TEMPERATURE", "0.25"),
        ("SWITCHBOARD_DATA_DIR", "/var/lib/switchboard"),
        ("SWITCHBOARD_CHANNELS__API__TOKEN", "tok"),
    ];
    let config = load_text(text, &vars).unwrap();
    assert_eq!(config.model, "from-env");
    assert_eq!(config.worker.max_concurrent_runs, 8);
    assert!(!config.provider.stream);
    assert_eq!(config.channels.api.listen, "127.0.0.1:9001".parse::<SocketAddr>().unwrap());
    assert_eq!(config.agent.temperature, Some(0.25));
    assert_eq!(config.data_dir(), Path::new("/var/lib/switchboard"));
    assert_eq!(config.store_path(), Path::new("/var/lib/switchboard/switchboard.db"));
    assert_eq!(config.channels.api.token.expose(), "tok");
}

#[test]
fn env_key_names_are_case_insensitive() {
    let vars = [("SWITCHBOARD_channels__Api__LISTEN", "127.0.0.1:9002")];
    let config = load_env(&vars).unwrap();
    assert_eq!(config.channels.api.listen.port(), 9002);
}

#[test]
fn numeric_looking_string_stays_a_string() {
    let vars = [("SWITCHBOARD_MODEL", "4"), ("SWITCHBOARD_PROVIDER__API_KEY", "12345")];
    let config = load_env(&vars).unwrap();
    assert_eq!(config.model, "4");
    assert_eq!(config.provider.api_key.expose(), "12345");
}

#[test]
fn unknown_key_in_file_names_full_path_and_file() {
    let (_dir, path) = write_file("[channels.api]\nlisen = \"127.0.0.1:1\"\n");
    let message = err_text(load_with(Some(&path), &env(&[]), None));
    assert_eq!(message, format!("unknown key channels.api.lisen in {}", path.display()));
}

#[test]
fn several_unknown_keys_are_all_named() {
    let message = err_text(load_text("modle = \"x\"\n[worker]\nthreads = 2\n", &[]));
    assert!(message.starts_with("unknown keys modle, worker.threads in "), "{message}");
}

#[test]
fn unknown_env_var_is_an_error_naming_it() {
    for var in ["SWITCHBOARD_FOO__BAR", "SWITCHBOARD_CHANNELS", "SWITCHBOARD_MODEL__X"] {
        let message = err_text(load_env(&[(var, "1")]));
        assert!(message.starts_with(&format!("environment variable {var} ")), "{message}");
    }
    // Variables without the prefix and the exempt ones are not config keys.
    assert!(load_env(&[("SWITCHBOARD", "x"), ("OTHER_FOO", "1")]).is_ok());
}

#[test]
fn bad_env_value_names_the_variable_and_key() {
    let vars = [("SWITCHBOARD_WORKER__MAX_CONCURRENT_RUNS", "many")];
    assert_eq!(
        err_text(load_env(&vars)),
        "SWITCHBOARD_WORKER__MAX_CONCURRENT_RUNS: \"many\" is not an integer \
         (for worker.max_concurrent_runs)"
    );
    let vars = [("SWITCHBOARD_PROVIDER__STREAM", "maybe")];
    assert!(err_text(load_env(&vars)).contains("is not a boolean"));
}

#[test]
fn out_of_range_env_value_names_key_and_variable() {
    let vars = [("SWITCHBOARD_WORKER__MAX_CONCURRENT_RUNS", "-1")];
    let message = err_text(load_env(&vars));
    assert!(
        message.starts_with("worker.max_concurrent_runs (from SWITCHBOARD_WORKER__MAX_CONCURRENT_RUNS): "),
        "{message}"
    );
}

#[test]
fn bad_value_in_file_names_key_and_reason() {
    let (_dir, path) = write_file("[channels.api]\nlisten = \"nope\"\n");
    let message = err_text(load_with(Some(&path), &env(&[]), None));
    assert_eq!(
        message,
        format!(
            "channels.api.listen (in {}): \"nope\" is not a socket address \
             (expected ip:port, e.g. 127.0.0.1:8787)",
            path.display()
        )
    );

    let message = err_text(load_text("[worker]\nmax_concurrent_runs = \"x\"\n", &[]));
    assert!(message.starts_with("worker.max_concurrent_runs (in "), "{message}");
    assert!(message.contains("invalid type"), "{message}");

    let message = err_text(load_text("[provider]\nkind = \"gemini\"\n", &[]));
    assert!(message.starts_with("provider.kind (in "), "{message}");
    assert!(message.contains("unknown variant `gemini`"), "{message}");
}

#[test]
fn validation_names_the_key() {
    let cases = [
        ("[agent]\nmax_iterations = 0\n", "agent.max_iterations"),
        ("[worker]\nmax_concurrent_runs = 0\n", "worker.max_concurrent_runs"),
        ("bus = \"redis://localhost\"\n", "bus"),
        ("bus = \"nats://\"\n", "bus"),
        ("[store]\ndatabase_url = \"mysql://db/sb\"\n", "store.database_url"),
        ("[store]\ndatabase_url = \"postgres://\"\n", "store.database_url"),
        ("log = \"info,[[[\"\n", "log"),
        ("[bus_options]\nprefix = \"a.*\"\n", "bus_options.prefix"),
        ("[bus_options]\noutbound_max_age_secs = 60\n", "bus_options.outbound_max_age_secs"),
        ("[provider]\nbase_url = \"localhost:11434\"\n", "provider.base_url"),
        ("[agent]\ntemperature = 3.0\n", "agent.temperature"),
        ("[tools.fs]\nmax_read_bytes = 0\n", "tools.fs.max_read_bytes"),
        ("[tools.exec]\ntimeout_secs = 400\n", "tools.exec.timeout_secs"),
        ("[tools.memory]\nmax_results = 0\n", "tools.memory.max_results"),
        ("[tools.memory]\ndefault_results = 30\n", "tools.memory.default_results"),
        ("[tools.exec]\ndeny_patterns = ['rm (']\n", "tools.exec.deny_patterns"),
    ];
    for (text, key) in cases {
        let message = err_text(load_text(text, &[]));
        assert!(message.starts_with(&format!("{key} (in ")), "{text:?}: {message}");
    }
    let vars = [("SWITCHBOARD_BUS", "amqp://x")];
    assert!(err_text(load_env(&vars)).starts_with("bus (from SWITCHBOARD_BUS): "));
    let long_prefix = format!("[bus_options]\nprefix = \"{}\"\n", "p".repeat(129));
    let message = err_text(load_text(&long_prefix, &[]));
    assert!(message.starts_with("bus_options.prefix (in ") && message.contains("limit is 128 bytes"), "{message}");
}

#[test]
fn bus_url_is_not_quoted_in_errors() {
    let message = err_text(load_env(&[("SWITCHBOARD_BUS", "redis://user:hunter2@host")]));
    assert!(!message.contains("hunter2"), "{message}");
}

#[test]
fn bad_toml_names_file_and_line() {
    let (_dir, path) = write_file("model = \"a\"\n\n[worker\nmax_concurrent_runs = 2\n");
    let error = load_with(Some(&path), &env(&[]), None).unwrap_err();
    let ConfigError::Syntax { line, .. } = &error else {
        panic!("expected a syntax error, got {error}");
    };
    assert_eq!(*line, 3);
    let message = error.to_string();
    assert!(message.starts_with(&format!("{}:3:", path.display())), "{message}");
    assert!(!message.contains('\n'), "{message}");
}

#[test]
fn openai_conventions_fill_empty_provider_keys() {
    let vars = [("OPENAI_API_KEY", "sk-env"), ("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")];
    let config = load_env(&vars).unwrap();
    assert_eq!(config.provider.api_key.expose(), "sk-env");
    assert_eq!(config.provider.base_url, "http://127.0.0.1:11434/v1");

    // The config file wins over the conventions, and so does SWITCHBOARD_PROVIDER__*.
    let text = "[provider]\napi_key = \"sk-file\"\nbase_url = \"https://example.com/v1\"\n";
    let config = load_text(text, &vars).unwrap();
    assert_eq!(config.provider.api_key.expose(), "sk-file");
    assert_eq!(config.provider.base_url, "https://example.com/v1");
    let mut vars = vars.to_vec();
    vars.push(("SWITCHBOARD_PROVIDER__API_KEY", "sk-switchboard"));
    assert_eq!(load_env(&vars).unwrap().provider.api_key.expose(), "sk-switchboard");
}

#[test]
fn web_tools_settings_from_env_and_conventions() {
    let vars =
        [("BRAVE_API_KEY", " brave-env "), ("SWITCHBOARD_TOOLS__WEB__ALLOW_PRIVATE", r#"["127.0.0.1", "10.0.0.0/8"]"#)];
    let config = load_env(&vars).unwrap();
    assert_eq!(config.tools.web.brave_api_key.expose(), "brave-env");
    assert_eq!(config.tools.web.allow_private, ["127.0.0.1", "10.0.0.0/8"]);
    // The config wins over the convention.
    let config = load_text("[tools.web]\nbrave_api_key = \"from-file\"\n", &vars).unwrap();
    assert_eq!(config.tools.web.brave_api_key.expose(), "from-file");
}

#[test]
fn web_tools_settings_are_validated() {
    let cases = [
        ("[tools.web]\nallow_private = [\"10.0.0.0/40\"]\n", "tools.web.allow_private"),
        ("[tools.web]\nsearch_base_url = \"api.search.brave.com\"\n", "tools.web.search_base_url"),
        ("[tools.web]\nmax_results = 21\n", "tools.web.max_results"),
        ("[tools.web]\nmax_results = 0\n", "tools.web.max_results"),
        ("[tools.web]\nfetch_timeout_secs = 0\n", "tools.web.fetch_timeout_secs"),
        ("[tools.web]\nmax_fetch_bytes = 0\n", "tools.web.max_fetch_bytes"),
    ];
    for (text, key) in cases {
        let message = err_text(load_text(text, &[]));
        assert!(message.starts_with(&format!("{key} (in ")), "{text:?}: {message}");
    }
}

#[test]
fn require_provider_explains_what_to_set() {
    let config = load_env(&[("SWITCHBOARD_MODEL", "m")]).unwrap();
    assert_eq!(
        config.require_provider().unwrap_err().to_string(),
        "no model provider configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for a local \
         server such as Ollama) or ANTHROPIC_API_KEY, or [provider] in the config file"
    );
    // A local server needs no key.
    let local = [("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"), ("SWITCHBOARD_MODEL", "m")];
    assert!(load_env(&local).unwrap().require_provider().is_ok());
    assert!(load_env(&[("OPENAI_API_KEY", "sk"), ("SWITCHBOARD_MODEL", "m")]).unwrap().require_provider().is_ok());

    let no_model = load_env(&[("OPENAI_API_KEY", "sk")]).unwrap();
    let message = no_model.require_provider().unwrap_err().to_string();
    assert!(message.contains("SWITCHBOARD_MODEL") && message.contains("`model`"), "{message}");
}

#[test]
fn secrets_never_appear_in_debug_or_serialized_output() {
    let text = "[provider]\napi_key = \"sk-supersecret\"\n[channels.api]\ntoken = \"tok-hidden\"\n\
                [tools.web]\nbrave_api_key = \"brave-hidden\"\n";
    let config = load_text(text, &[]).unwrap();
    for rendered in [
        format!("{config:?}"),
        format!("{config:#?}"),
        toml::to_string(&config).unwrap(),
        format!("{}", config.provider.api_key),
    ] {
        assert!(!rendered.contains("supersecret"), "{rendered}");
        assert!(!rendered.contains("tok-hidden"), "{rendered}");
        assert!(!rendered.contains("brave-hidden"), "{rendered}");
    }
    assert_eq!(format!("{:?}", config.provider.api_key), "\"***\"");
    assert_eq!(config.provider.api_key.to_string(), "***");
    assert_eq!(format!("{:?}", Secret::default()), "\"\"");
}

#[test]
fn a_secret_of_the_wrong_type_is_not_echoed() {
    let message = err_text(load_text("[provider]\napi_key = 987654321\n", &[]));
    assert!(message.starts_with("provider.api_key (in "), "{message}");
    assert!(!message.contains("987654321"), "{message}");
}

#[test]
fn example_file_equals_the_defaults() {
    // Raw: every key in the example parses, and its value is the default.
    let raw: Config = toml::from_str(EXAMPLE).unwrap();
    assert_eq!(raw, Config::default());
    // Through the loader (unknown keys, validation, conventions) too.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let loaded = load_with(Some(&path), &env(&[]), None).unwrap();
    assert_eq!(loaded, load_env(&[]).unwrap());
    assert_eq!(Config::load(Some(&path), &env(&[])).unwrap(), loaded);
}

#[test]
fn example_file_documents_every_key() {
    let documented = example_keys();
    let missing: Vec<String> = schema_keys().into_iter().filter(|key| !documented.contains(key)).collect();
    assert!(missing.is_empty(), "config.example.toml lacks {missing:?}");
}

/// `section.key` for every line `key = …` or `# key = …` of the example; a commented
/// `# [providers.NAME]` section counts too, as the schema's `providers.*` (and a commented
/// `# [users.groups."<group>"]` as `users.groups.*`, a `# [channels.api.tokens.NAME]` as
/// `channels.api.tokens.*`, a `# [mcp.servers.NAME]` as `mcp.servers.*`, its `env = { … }`
/// as `mcp.servers.*.env.*`), and a commented
/// `# [[bindings]]` as the keys of the schema's one sample binding.
fn example_keys() -> BTreeSet<String> {
    let mut section = String::new();
    let mut keys = BTreeSet::new();
    for line in EXAMPLE.lines().map(str::trim) {
        // `[[bindings]]` (an array of tables) is read like a table.
        let header = line
            .trim_start_matches("# ")
            .strip_prefix('[')
            .map(|l| l.trim_start_matches('['))
            .and_then(|l| l.strip_suffix(']'));
        if let Some(name) = header.map(|name| name.trim_end_matches(']')) {
            section = match name.split_once('.') {
                // `agents.NAME.heartbeat`: the name stands for any, the rest stays.
                Some((map @ ("providers" | "prices" | "agents"), rest)) => match rest.split_once('.') {
                    Some((_, inner)) => format!("{map}.*.{inner}."),
                    None => format!("{map}.*."),
                },
                // `users.groups."telegram:-100…"`: the quoted group name stands for any.
                Some(("users", rest)) if rest.starts_with("groups.") => "users.groups.*.".to_owned(),
                // `channels.api.tokens.NAME`: the token's name stands for any.
                Some(("channels", rest)) if rest.starts_with("api.tokens.") => "channels.api.tokens.*.".to_owned(),
                // `mcp.servers.NAME`: the server's name stands for any.
                Some(("mcp", rest)) if rest.starts_with("servers.") => "mcp.servers.*.".to_owned(),
                _ => format!("{name}."),
            };
        } else if let Some((key, value)) = line.trim_start_matches("# ").split_once(" = ")
            && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            // A map of names the user picks (`env = { … }`) stands for its schema's `env.*`.
            let any = if value.starts_with('{') && section.starts_with("mcp.servers.") { ".*" } else { "" };
            keys.insert(format!("{section}{key}{any}"));
        }
    }
    keys
}

fn schema_keys() -> Vec<String> {
    fn walk(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
        for (name, value) in table {
            match value {
                toml::Value::Table(inner) => walk(inner, &format!("{prefix}{name}."), out),
                toml::Value::Array(items) if items.iter().all(toml::Value::is_table) && !items.is_empty() => {
                    for item in items.iter().filter_map(toml::Value::as_table) {
                        walk(item, &format!("{prefix}{name}."), out);
                    }
                }
                _ => out.push(format!("{prefix}{name}")),
            }
        }
    }
    let mut keys = Vec::new();
    walk(&toml::Table::try_from(schema_sample()).unwrap(), "", &mut keys);
    keys
}

#[test]
fn log_filter_prefers_rust_log() {
    let config = Config::default();
    assert_eq!(config.log_filter(&env(&[])), "info");
    assert_eq!(config.log_filter(&env(&[("RUST_LOG", "debug")])), "debug");
}

#[test]
fn users_permissions_and_budgets_from_file_and_env() {
    let text = r#"
        [users]
        owners = ["telegram:1"]
        [permissions]
        unlisted_tools = "admin"
        [permissions.tools]
        exec = "owner"
        spawn = "user"
        [budgets]
        guest = 5
    "#;
    let vars = [
        ("SWITCHBOARD_USERS__DEFAULT_LEVEL", "user"),
        ("SWITCHBOARD_PERMISSIONS__TOOLS__WEB_FETCH", "guest"),
        ("SWITCHBOARD_BUDGETS__USER", "0"),
    ];
    let config = load_text(text, &vars).unwrap();
    assert_eq!(config.users.owners, ["telegram:1"]);
    assert_eq!(config.users.default_level, Level::User);
    assert_eq!(config.permissions.unlisted_tools, Level::Admin);
    let tools = &config.permissions.tools;
    assert_eq!(tools["exec"], Level::Owner);
    assert_eq!(tools["spawn"], Level::User);
    assert_eq!(tools["web_fetch"], Level::Guest);
    // The file adds to the default map rather than replacing it.
    assert_eq!(tools["write_file"], Level::User);
    assert_eq!(config.budgets, BudgetsConfig { guest: 5, user: 0, ..BudgetsConfig::default() });

    let owners = [("SWITCHBOARD_USERS__OWNERS", r#"["api:me", "discord:2"]"#)];
    assert_eq!(load_env(&owners).unwrap().users.owners, ["api:me", "discord:2"]);
    // Only tools in the default map can be named from the environment.
    let message = err_text(load_env(&[("SWITCHBOARD_PERMISSIONS__TOOLS__BROWSER", "user")]));
    assert!(message.starts_with("environment variable SWITCHBOARD_PERMISSIONS__TOOLS__BROWSER "), "{message}");
}

#[test]
fn bad_levels_and_owners_name_the_key() {
    let message = err_text(load_text("[permissions.tools]\nexec = \"root\"\n", &[]));
    assert!(message.starts_with("permissions.tools.exec (in "), "{message}");
    assert!(message.contains("unknown variant `root`"), "{message}");
    let message = err_text(load_env(&[("SWITCHBOARD_USERS__DEFAULT_LEVEL", "Admin")]));
    assert!(message.starts_with("users.default_level (from SWITCHBOARD_USERS__DEFAULT_LEVEL): "), "{message}");
    let message = err_text(load_text("[users]\nowners = [\"telegram\"]\n", &[]));
    assert!(message.starts_with("users.owners (in "), "{message}");
    assert!(message.ends_with("\"telegram\" is not an identity (expected channel:sender_id, e.g. telegram:123456)"));
}

#[test]
fn timezone_must_be_an_iana_name() {
    let message = err_text(load_text("[agent]\ntimezone = \"Mars/Olympus\"\n", &[]));
    assert!(message.starts_with("agent.timezone (in "), "{message}");
    assert!(message.contains("not an IANA time zone name"), "{message}");
    let config = load_env(&[("SWITCHBOARD_AGENT__TIMEZONE", "Europe/Berlin")]).unwrap();
    assert_eq!(config.agent.time_zone(), Ok("Europe/Berlin".parse().unwrap()));
}

#[test]
fn guard_keys_are_checked() {
    let config = load_text("[guard]\nmode = \"block\"\nmax_message_chars = 4096\n", &[]).unwrap();
    assert_eq!((config.guard.mode, config.guard.max_message_chars), (GuardMode::Block, 4096));
    let config = load_env(&[("SWITCHBOARD_GUARD__MODE", "off")]).unwrap();
    assert_eq!(config.guard.mode, GuardMode::Off);
    let message = err_text(load_text("[guard]\nmode = \"loud\"\n", &[]));
    assert!(message.starts_with("guard.mode"), "{message}");
    let message = err_text(load_text("[guard]\nmax_message_chars = 0\n", &[]));
    assert!(message.starts_with("guard.max_message_chars") && message.contains("at least 1"), "{message}");
}

#[test]
fn inconsistent_history_and_compaction_settings_are_refused() {
    let message = err_text(load_text("[history]\nsoft_trim_ratio = 0.8\nhard_clear_ratio = 0.6\n", &[]));
    assert!(message.starts_with("history.hard_clear_ratio (in "), "{message}");
    let message = err_text(load_env(&[("SWITCHBOARD_COMPACTION__CONTEXT_SHARE", "1.5")]));
    assert!(message.contains("compaction.context_share") && message.contains("1.5"), "{message}");
    let message = err_text(load_text("[compaction]\nsummary_max_tokens = 0\n", &[]));
    assert!(message.starts_with("compaction.summary_max_tokens") && message.contains("at least 1"), "{message}");
    let message = err_text(load_text("[compaction]\nkeep_recent_messages = 120\n", &[]));
    assert!(message.starts_with("compaction.keep_recent_messages"), "{message}");
    let message = err_text(load_text("[agent]\nhistory_limit = 100\n", &[]));
    assert!(message.starts_with("agent.history_limit") && message.contains("120"), "{message}");
}

#[test]
fn the_metrics_endpoint_is_off_until_given_an_address() {
    assert_eq!(load_env(&[]).unwrap().metrics.listen, None);
    let config = load_env(&[("SWITCHBOARD_METRICS__LISTEN", "127.0.0.1:9464")]).unwrap();
    assert_eq!(config.metrics.listen, Some("127.0.0.1:9464".parse().unwrap()));
    let message = err_text(load_text("[metrics]\nlisten = \"localhost\"\n", &[]));
    assert!(message.starts_with("metrics.listen") && message.contains("ip:port"), "{message}");
}

#[test]
fn group_settings_load_and_bad_ones_name_their_key() {
    let text = r#"
        [users.groups."telegram:-1001234567890"]
        level = "user"
        budget = 500000
        [users.groups."discord:guild:100"]
        level = "admin"
    "#;
    let groups = load_text(text, &[]).unwrap().users.groups;
    assert_eq!(groups["telegram:-1001234567890"], GroupAccessConfig { level: Level::User, budget: 500_000 });
    assert_eq!(groups["discord:guild:100"], GroupAccessConfig { level: Level::Admin, budget: 0 });
    let whole = [("SWITCHBOARD_USERS__GROUPS", r#"{"discord:200" = {level = "user"}}"#)];
    assert_eq!(load_env(&whole).unwrap().users.groups["discord:200"].level, Level::User);

    let message = err_text(load_text("[users.groups.\"telegram:-100\"]\nlevel = \"owner\"\n", &[]));
    assert!(message.starts_with("users.groups.telegram:-100.level (in "), "{message}");
    assert!(message.contains("cannot make its members owners"), "{message}");
    let message = err_text(load_env(&[("SWITCHBOARD_USERS__GROUPS", r#"{"discord:1" = {level = "owner"}}"#)]));
    assert!(message.starts_with("users.groups.discord:1.level (from SWITCHBOARD_USERS__GROUPS): "), "{message}");
    let message = err_text(load_text("[users.groups.\"telegram:-100\"]\nlevle = \"user\"\n", &[]));
    assert!(message.starts_with("unknown key users.groups.telegram:-100.levle in "), "{message}");
    let message = err_text(load_text("[users.groups.\"telegram:-100\"]\nlevel = \"root\"\n", &[]));
    assert!(message.starts_with("users.groups.telegram:-100.level (in "), "{message}");
    for (key, problem) in [
        ("telegram:123", "not a Telegram group"),
        ("telegram:family", "not a Telegram group"),
        ("discord:guild:abc", "not a Discord channel or server"),
        ("matrix:!room", "is not a group"),
    ] {
        let message = err_text(load_text(&format!("[users.groups.\"{key}\"]\nlevel = \"user\"\n"), &[]));
        assert!(message.starts_with(&format!("users.groups.{key} (in ")), "{message}");
        assert!(message.contains(problem), "{message}");
    }
}
