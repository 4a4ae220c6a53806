//! `[tools.web]`: web_search and web_fetch.

use serde::{Deserialize, Serialize};

/// web_search and web_fetch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebToolsConfig {
    pub enabled: bool,
}

impl Default for WebToolsConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}
