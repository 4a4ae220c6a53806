//! `web_search`: the Brave Search API (`GET /res/v1/web/search`).

use std::time::Duration;

use async_trait::async_trait;
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::html::strip_tags;
use crate::config::Secret;
use crate::tools::{Tool, ToolContext, ToolError, required_str};

/// The most results one Brave request returns.
const BRAVE_MAX_COUNT: usize = 20;

/// web_search's settings.
#[derive(Debug, Clone)]
pub struct SearchSettings {
    /// Empty: the tool answers every call with how to configure it.
    pub api_key: Secret,
    /// `https://api.search.brave.com`, or a fake's address.
    pub base_url: String,
    /// Results returned unless the call asks for fewer.
    pub max_results: usize,
    pub timeout: Duration,
}

/// Searches the web through the Brave Search API.
pub struct WebSearch {
    settings: SearchSettings,
}

impl WebSearch {
    pub fn new(settings: SearchSettings) -> Self {
        Self { settings }
    }
}

#[derive(Debug, Deserialize)]
struct BraveResponse {
    #[serde(default)]
    web: Option<BraveWeb>,
}

#[derive(Debug, Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveResult>,
}

#[derive(Debug, Deserialize)]
struct BraveResult {
    #[serde(default)]
    title: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    description: String,
}

#[async_trait]
impl Tool for WebSearch {
    fn name(&self) -> &str {
        "web_search"
    }

    fn description(&self) -> &str {
        "Searches the web and returns a numbered list of results (title, URL, snippet). Use web_fetch to read one."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for"},
                "count": {"type": "integer", "minimum": 1, "maximum": BRAVE_MAX_COUNT,
                          "description": format!("Number of results; default {}", self.settings.max_results)}
            },
            "required": ["query"]
        })
    }

    async fn execute(&self, arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        if self.settings.api_key.is_empty() {
            return Err(ToolError::Failed(
                "web_search is not configured: set BRAVE_API_KEY (or tools.web.brave_api_key in the config) \
                 to a Brave Search API key"
                    .into(),
            ));
        }
        let query = required_str(&arguments, "query")?.trim();
        if query.is_empty() {
            return Err(ToolError::InvalidArguments("`query` must not be empty".into()));
        }
        let count = match arguments.get("count").and_then(Value::as_u64) {
            Some(n) => usize::try_from(n).unwrap_or(BRAVE_MAX_COUNT).clamp(1, BRAVE_MAX_COUNT),
            None => self.settings.max_results,
        };
        let results = self.search(query, count).await?;
        Ok(render(query, &results))
    }
}

impl WebSearch {
    async fn search(&self, query: &str, count: usize) -> Result<Vec<BraveResult>, ToolError> {
        let url = format!("{}/res/v1/web/search", self.settings.base_url.trim_end_matches('/'));
        let client = reqwest::Client::builder()
            .timeout(self.settings.timeout)
            .build()
            .map_err(|error| ToolError::Failed(format!("cannot build an HTTP client: {error}")))?;
        let response = client
            .get(&url)
            .query(&[("q", query), ("count", &count.to_string())])
            .header("Accept", "application/json")
            .header("X-Subscription-Token", self.settings.api_key.expose())
            .send()
            .await
            // Without the URL: reqwest's message would repeat it, and it carries the query.
            .map_err(|error| ToolError::Transient(format!("cannot reach the search API: {}", error.without_url())))?;
        let status = response.status();
        if !status.is_success() {
            return Err(status_error(status, response.text().await.unwrap_or_default()));
        }
        let body: BraveResponse = response
            .json()
            .await
            .map_err(|error| ToolError::Failed(format!("the search API answered something unreadable: {error}")))?;
        let mut results = body.web.map(|web| web.results).unwrap_or_default();
        results.truncate(count);
        Ok(results)
    }
}

/// Rate limits and server errors pass; a rejected key or request does not.
fn status_error(status: StatusCode, body: String) -> ToolError {
    let detail: String = body.chars().take(300).collect();
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        return ToolError::Transient(format!("the search API answered HTTP {status}"));
    }
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        tracing::warn!(%status, "the Brave Search API rejected the configured key");
        return ToolError::Failed(format!(
            "the search API rejected the API key (HTTP {status}); check BRAVE_API_KEY / tools.web.brave_api_key"
        ));
    }
    ToolError::Failed(format!("the search API answered HTTP {status}: {detail}"))
}

/// `1. Title\n   URL\n   snippet`, one blank line between results.
fn render(query: &str, results: &[BraveResult]) -> String {
    if results.is_empty() {
        return format!("No results for {query:?}.");
    }
    let items: Vec<String> = results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut item = format!("{}. {}\n   {}", i + 1, strip_tags(&r.title), r.url);
            let snippet = strip_tags(&r.description);
            if !snippet.is_empty() {
                item.push_str(&format!("\n   {snippet}"));
            }
            item
        })
        .collect();
    items.join("\n\n")
}

#[cfg(test)]
mod tests;
