//! Environment overrides: `SWITCHBOARD_<SECTION>__<KEY>=value`.
//!
//! The variable name is resolved against the schema (case-insensitively) and the value is
//! parsed as the type the key has there, so `SWITCHBOARD_MODEL=4` stays the string `"4"`
//! while `SWITCHBOARD_WORKER__MAX_CONCURRENT_RUNS=4` becomes the integer 4.
//!
//! Maps whose keys the user names (`[providers.<name>]`, `[prices."<model>"]`) have one
//! [`ANY_NAME`] entry in the schema. A variable reaches into them by name
//! (`SWITCHBOARD_PROVIDERS__CLAUDE__API_KEY`): the name matches an entry the file already has,
//! case-insensitively, or else becomes a new entry in lower case. A whole map can also be set
//! as an inline TOML table (`SWITCHBOARD_PRICES='{"gpt-4o-mini" = {input_per_mtok = 0.15}}'`),
//! which is the only way for names that cannot appear in a variable name (dots, dashes).

use std::collections::HashMap;

use toml::{Table, Value};

use super::error::{ConfigError, Origin, Origins};

/// Prefix of every variable that overrides a config key.
pub const ENV_PREFIX: &str = "SWITCHBOARD_";

/// Variables with [`ENV_PREFIX`] that are not config keys (and so are not rejected as unknown).
pub const NON_KEY_VARS: &[&str] = &["SWITCHBOARD_CONFIG"];

/// The schema's stand-in for any entry name of a user-named map.
pub(super) const ANY_NAME: &str = "*";

/// Separator between levels in a variable name (a single `_` occurs inside key names).
const LEVEL_SEPARATOR: &str = "__";

/// Applies every `SWITCHBOARD_*` variable in `env` to `tree`, using `schema` (a serialized
/// config with every key present) for key names and types. Any such variable that names no
/// key is an error: a misspelt override must not be silently ignored.
pub(super) fn apply_overrides(
    tree: &mut Table,
    schema: &Table,
    env: &HashMap<String, String>,
    origins: &mut Origins,
) -> Result<(), ConfigError> {
    // Sorted so that, with several bad variables, the same one is reported every time.
    let mut vars: Vec<(&String, &String)> =
        env.iter().filter(|(name, _)| name.starts_with(ENV_PREFIX) && !NON_KEY_VARS.contains(&name.as_str())).collect();
    vars.sort();
    for (var, raw) in vars {
        let (path, kind) = resolve(var, schema, tree)?;
        let key = path.join(".");
        let value = parse_as(raw, kind).map_err(|reason| ConfigError::EnvValue {
            var: var.clone(),
            key: key.clone(),
            reason,
        })?;
        set(tree, &path, value);
        origins.insert(key, Origin::Env(var.clone()));
    }
    Ok(())
}

/// Maps a variable name to the canonical key path and the schema value found there (which
/// gives the type). Fails unless the name leads to a leaf key, or to a whole user-named map.
fn resolve<'a>(var: &str, schema: &'a Table, tree: &Table) -> Result<(Vec<String>, &'a Value), ConfigError> {
    let unknown = || ConfigError::UnknownEnv { var: var.to_owned() };
    let rest = var.strip_prefix(ENV_PREFIX).ok_or_else(unknown)?;
    let mut table = schema;
    let mut existing = Some(tree);
    let mut path = Vec::new();
    let mut segments = rest.split(LEVEL_SEPARATOR).peekable();
    while let Some(segment) = segments.next() {
        let (name, value) = match table.iter().find(|(name, _)| name.eq_ignore_ascii_case(segment)) {
            Some((name, value)) => (name.clone(), value),
            None => (entry_name(existing, segment), table.get(ANY_NAME).ok_or_else(unknown)?),
        };
        existing = existing.and_then(|t| t.get(&name)).and_then(Value::as_table);
        path.push(name);
        match (value, segments.peek()) {
            (Value::Table(inner), Some(_)) => table = inner,
            // A user-named map set whole, as an inline table.
            (Value::Table(inner), None) if inner.contains_key(ANY_NAME) => return Ok((path, value)),
            // A section named as if it were a key, or a key named as if it were a section.
            (Value::Table(_), None) | (_, Some(_)) => return Err(unknown()),
            (leaf, None) => return Ok((path, leaf)),
        }
    }
    Err(unknown())
}

/// The name a variable's segment gives a map entry: an existing one that matches, else the
/// segment in lower case (variable names are usually upper case; config names rarely are).
fn entry_name(existing: Option<&Table>, segment: &str) -> String {
    existing
        .and_then(|t| t.keys().find(|name| name.eq_ignore_ascii_case(segment)))
        .cloned()
        .unwrap_or_else(|| segment.to_ascii_lowercase())
}

/// Parses `raw` as the type of `like`. The error is a reason, to be prefixed with the variable.
fn parse_as(raw: &str, like: &Value) -> Result<Value, String> {
    let trimmed = raw.trim();
    match like {
        // Strings are taken verbatim: no trimming, no number guessing.
        Value::String(_) => Ok(Value::String(raw.to_owned())),
        Value::Integer(_) => trimmed.parse().map(Value::Integer).map_err(|_| format!("{raw:?} is not an integer")),
        Value::Float(_) => trimmed.parse().map(Value::Float).map_err(|_| format!("{raw:?} is not a number")),
        Value::Boolean(_) => parse_bool(trimmed)
            .map(Value::Boolean)
            .ok_or_else(|| format!("{raw:?} is not a boolean (use true or false)")),
        // Arrays and the like are written as TOML, e.g. `["a", "b"]`.
        Value::Array(_) | Value::Datetime(_) | Value::Table(_) => {
            parse_toml_value(trimmed).ok_or_else(|| format!("{raw:?} is not a TOML value"))
        }
    }
}

fn parse_bool(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

fn parse_toml_value(text: &str) -> Option<Value> {
    let mut table: Table = toml::from_str(&format!("v = {text}")).ok()?;
    table.remove("v")
}

/// Sets `path` in `tree`, creating tables on the way. A non-table met on the way (a file that
/// put a plain value where a section belongs) is replaced: the environment wins.
fn set(tree: &mut Table, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut table = tree;
    for name in parents {
        let entry = table.entry(name.clone()).or_insert_with(|| Value::Table(Table::new()));
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        let Value::Table(inner) = entry else {
            return;
        };
        table = inner;
    }
    table.insert(last.clone(), value);
}
