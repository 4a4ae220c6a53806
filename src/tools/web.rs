//! The web tools: `web_search` (Brave Search API) and `web_fetch` (a page as text, behind an
//! SSRF guard that refuses private and loopback addresses unless the config allows them).

mod body;
mod fetch;
mod guard;
mod html;
mod search;

use std::sync::Arc;

use crate::config::AllowList;
pub use fetch::{FetchSettings, WebFetch};
pub use guard::{Guard, Resolver, SystemResolver, Target, blocked_reason};
pub use search::{SearchSettings, WebSearch};

use crate::config::WebToolsConfig;
use crate::tools::ToolRegistry;
use crate::tools::untrusted::{self, Untrusted};

/// Adds `web_search` and `web_fetch`, set up from `[tools.web]`, their results marked as
/// untrusted content (see `untrusted`). `web_search` is registered
/// without a key too, so the model learns from its answer what the operator must set.
pub fn register_web_tools(registry: &mut ToolRegistry, config: &WebToolsConfig) {
    let search = WebSearch::new(SearchSettings {
        api_key: config.brave_api_key.clone(),
        base_url: config.search_base_url.clone(),
        max_results: config.max_results,
        timeout: config.fetch_timeout(),
    });
    registry.register(Arc::new(Untrusted::new(Arc::new(search), untrusted::search_results)));
    // The loader validated the list; should it still not parse, allow nothing (fail closed).
    let allow_private = AllowList::parse(&config.allow_private).unwrap_or_else(|reason| {
        tracing::error!(%reason, "tools.web.allow_private is invalid; web_fetch allows no private address");
        AllowList::default()
    });
    let fetch = WebFetch::new(FetchSettings {
        allow_private,
        max_bytes: config.max_fetch_bytes,
        timeout: config.fetch_timeout(),
        max_chars: config.max_fetch_chars,
    });
    registry.register(Arc::new(Untrusted::new(Arc::new(fetch), untrusted::web_page)));
}
