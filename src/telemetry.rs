//! Logging set-up: `tracing` to stderr, filtered by `RUST_LOG` or the config's `log`, written
//! as text or JSON lines (`log_format`). Either way a line carries the fields of the spans it
//! was logged in (a run's `run_id`, `session`, `agent`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

/// What the process is, which decides how much it logs by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logs {
    /// `run`, `agent`, `channel`: the config's `log` filter (default `info`).
    Daemon,
    /// The admin commands (`users`, `cron`, …): their output is the answer, so by default
    /// only warnings and errors are logged (to stderr); `RUST_LOG` still turns on more.
    Command,
}

/// The filter for commands when `RUST_LOG` does not name one.
const COMMAND_FILTER: &str = "warn";

/// Dependencies whose `info` lines are for their own developers, and the level they log at
/// unless the filter names them (`RUST_LOG=info,rmcp=debug`): rmcp logs every MCP server's whole
/// `InitializeResult` (kilobytes) and each notification; matrix-sdk a line per sync response
/// and per event sent, and its key backup (which the bot does not use) a warning per sync.
/// switchboard says what matters itself ("MCP server ready", "Matrix connected").
const QUIET_DEPENDENCIES: &[(&str, &str)] = &[
    ("rmcp", "warn"),
    ("matrix_sdk", "warn"),
    ("matrix_sdk_base", "warn"),
    ("matrix_sdk_crypto", "warn"),
    ("matrix_sdk_crypto::backups", "error"),
    ("matrix_sdk_sqlite", "warn"),
];

/// `wanted` with the quiet dependencies at their level, where it does not name them.
fn with_quiet_dependencies(wanted: &str) -> String {
    let mut filter = wanted.trim().to_owned();
    let named: Vec<String> = filter
        .split(',')
        .filter_map(|directive| directive.split('=').next())
        .map(|target| target.trim().to_owned())
        .collect();
    for (dependency, level) in QUIET_DEPENDENCIES {
        if !named.iter().any(|target| target == dependency) {
            let separator = if filter.is_empty() { "" } else { "," };
            filter.push_str(&format!("{separator}{dependency}={level}"));
        }
    }
    filter
}

/// Installs the global subscriber. An invalid filter falls back to `info` with a warning.
pub fn init(config: &Config, logs: Logs) {
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    let wanted = match logs {
        Logs::Daemon => config.log_filter(&env),
        Logs::Command => {
            env.get("RUST_LOG").map(String::as_str).filter(|f| !f.trim().is_empty()).unwrap_or(COMMAND_FILTER)
        }
    };
    let (filter, bad) = match EnvFilter::try_new(with_quiet_dependencies(wanted)) {
        Ok(filter) => (filter, None),
        Err(err) => (EnvFilter::new("info"), Some(err)),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // An error here means a subscriber is installed already (a test did it): keep that one.
    let _ = match config.log_format {
        LogFormat::Text => {
            builder.with_ansi(colours_wanted(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR"))).try_init()
        }
        // `span` is the innermost span's fields, `spans` every entered span's from the root:
        // a line logged in a tool call still has its run's id under `spans`.
        LogFormat::Json => builder.json().with_ansi(false).with_current_span(true).with_span_list(true).try_init(),
    };
    if let Some(err) = bad {
        tracing::warn!(%err, filter = wanted, "invalid log filter; using `info`");
    }
}

/// Colours only on a terminal: under systemd stderr goes to the journal, where escape codes
/// are noise; and never when `NO_COLOR` is set (<https://no-color.org>).
fn colours_wanted(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|value| value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatty_dependencies_log_warnings_unless_the_filter_names_them() {
        let matrix = "matrix_sdk=warn,matrix_sdk_base=warn,matrix_sdk_crypto=warn,matrix_sdk_crypto::backups=error,\
                      matrix_sdk_sqlite=warn";
        assert_eq!(with_quiet_dependencies("info"), format!("info,rmcp=warn,{matrix}"));
        assert_eq!(with_quiet_dependencies("debug,sqlx=warn"), format!("debug,sqlx=warn,rmcp=warn,{matrix}"));
        assert_eq!(with_quiet_dependencies("info,rmcp=debug"), format!("info,rmcp=debug,{matrix}"));
        let named = with_quiet_dependencies("info,matrix_sdk=debug");
        assert!(named.starts_with("info,matrix_sdk=debug,rmcp=warn,matrix_sdk_base=warn"), "{named}");
        assert!(!named.contains("matrix_sdk=warn"), "{named}");
        assert!(EnvFilter::try_new(with_quiet_dependencies("info")).is_ok());
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours_wanted(true, None));
        assert!(colours_wanted(true, Some("".into())));
        assert!(!colours_wanted(true, Some("1".into())));
        assert!(!colours_wanted(false, None));
    }
}
