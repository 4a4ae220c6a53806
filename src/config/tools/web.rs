//! `[tools.web]`: web_search and web_fetch.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::Secret;

/// The Brave Search API, used when `search_base_url` is left at its default.
pub const BRAVE_DEFAULT_BASE_URL: &str = "https://api.search.brave.com";

/// web_search and web_fetch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebToolsConfig {
    pub enabled: bool,
    /// Brave Search API key; empty = `BRAVE_API_KEY`. Without one, web_search says so.
    pub brave_api_key: Secret,
    /// Base URL of the Brave Search API (a local fake in tests).
    pub search_base_url: String,
    /// Results web_search returns unless the model asks for fewer.
    pub max_results: usize,
    /// Hosts, addresses and CIDR ranges web_fetch may reach although they are private or
    /// loopback (`"127.0.0.1"`, `"10.0.0.0/8"`, `"intranet.local"`).
    pub allow_private: Vec<String>,
    /// web_fetch stops reading a body after this many bytes.
    pub max_fetch_bytes: usize,
    /// Seconds one web request may take: a web_search, or a web_fetch with its redirects.
    pub fetch_timeout_secs: u64,
    /// Characters of page text web_fetch returns unless the model asks for fewer.
    pub max_fetch_chars: usize,
}

impl Default for WebToolsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            brave_api_key: Secret::default(),
            search_base_url: BRAVE_DEFAULT_BASE_URL.into(),
            max_results: 5,
            allow_private: Vec::new(),
            max_fetch_bytes: 2 * 1024 * 1024,
            fetch_timeout_secs: 20,
            max_fetch_chars: 20_000,
        }
    }
}

impl WebToolsConfig {
    pub fn fetch_timeout(&self) -> Duration {
        Duration::from_secs(self.fetch_timeout_secs)
    }
}
