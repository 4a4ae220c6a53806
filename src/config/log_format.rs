//! `log_format`: how log lines are written. A key of its own beside `log` (the filter), so
//! configs and `SWITCHBOARD_LOG` overrides written for the filter alone keep working.

use serde::{Deserialize, Serialize};

/// How each log line is written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line, the fields of the current spans in front of the message.
    #[default]
    Text,
    /// One JSON object a line, for a log collector.
    Json,
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::LogFormat;
    use crate::config::load::{load_text, load_with};

    fn load(text: &str, vars: &[(&str, &str)]) -> Result<crate::config::Config, crate::config::ConfigError> {
        let env: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        load_text(Some(("config.toml".into(), text.to_owned())), &env)
    }

    #[test]
    fn text_by_default_and_json_from_the_file_or_the_environment() {
        assert_eq!(load_with(None, &HashMap::new(), None).unwrap().log_format, LogFormat::Text);
        assert_eq!(load("log_format = \"json\"\n", &[]).unwrap().log_format, LogFormat::Json);
        let config = load("log = \"debug\"\n", &[("SWITCHBOARD_LOG_FORMAT", "json")]).unwrap();
        assert_eq!((config.log.as_str(), config.log_format), ("debug", LogFormat::Json));
    }

    #[test]
    fn the_filter_alone_still_loads_from_the_file_and_the_environment() {
        let config = load("log = \"warn,switchboard=debug\"\n", &[("SWITCHBOARD_LOG", "error")]).unwrap();
        assert_eq!((config.log.as_str(), config.log_format), ("error", LogFormat::Text));
    }

    #[test]
    fn an_unknown_format_names_the_key() {
        let err = load("log_format = \"yaml\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("log_format"), "{err}");
    }
}
