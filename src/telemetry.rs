//! Logging set-up: `tracing` to stderr, filtered by `RUST_LOG` or the config's `log`.

use tracing_subscriber::EnvFilter;

use crate::config::Config;

/// Installs the global subscriber. An invalid filter falls back to `info` with a warning.
pub fn init(config: &Config) {
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    let wanted = config.log_filter(&env);
    let (filter, bad) = match EnvFilter::try_new(wanted) {
        Ok(filter) => (filter, None),
        Err(err) => (EnvFilter::new("info"), Some(err)),
    };
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    if let Some(err) = bad {
        tracing::warn!(%err, filter = wanted, "invalid log filter; using `info`");
    }
}
