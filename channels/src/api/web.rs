//! The web chat page and the API's description, served from the binary: no CDN, no external
//! fonts, and a content security policy that lets the page load nothing from elsewhere and run
//! no inline script.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use serde_json::Value;

const INDEX: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const MARKDOWN_JS: &str = include_str!("assets/markdown.js");
const APP_CSS: &str = include_str!("assets/app.css");
/// The owner console, shown to admin tokens.
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CRON_JS: &str = include_str!("assets/console-cron.js");
const CONSOLE_USAGE_JS: &str = include_str!("assets/console-usage.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");
const JS: &str = "text/javascript; charset=utf-8";
const OPENAPI: &str = include_str!("assets/openapi.json");

/// Scripts and styles from this server only; sockets to it; images inline at most.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The routes of the page, its assets and the API's description, open to everyone (the page
/// asks for a token itself).
pub(super) fn routes<S: Clone + Send + Sync + 'static>() -> Vec<(&'static str, &'static str, MethodRouter<S>)> {
    vec![
        ("get", "/", get(|| async { asset("text/html; charset=utf-8", INDEX) })),
        ("get", "/assets/app.js", get(|| async { asset(JS, APP_JS) })),
        ("get", "/assets/markdown.js", get(|| async { asset(JS, MARKDOWN_JS) })),
        ("get", "/assets/console.js", get(|| async { asset(JS, CONSOLE_JS) })),
        ("get", "/assets/console-cron.js", get(|| async { asset(JS, CONSOLE_CRON_JS) })),
        ("get", "/assets/console-usage.js", get(|| async { asset(JS, CONSOLE_USAGE_JS) })),
        ("get", "/assets/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) })),
        ("get", "/assets/console.css", get(|| async { asset("text/css; charset=utf-8", CONSOLE_CSS) })),
        ("get", "/openapi.json", get(|| async { openapi() })),
    ]
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Always asked again (cheap, and an upgraded binary's page is never mixed with an old one).
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// The API's OpenAPI description, with this build's version.
pub fn openapi_document() -> Value {
    let mut document: Value = serde_json::from_str(OPENAPI).unwrap_or_default();
    document["info"]["version"] = Value::from(env!("CARGO_PKG_VERSION"));
    document
}

fn openapi() -> Response {
    axum::Json(openapi_document()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_parses_and_names_this_version() {
        let document: Value = serde_json::from_str(OPENAPI).expect("assets/openapi.json is JSON");
        assert_eq!(document["openapi"], "3.1.0");
        assert_eq!(openapi_document()["info"]["version"], env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn the_page_loads_only_its_own_assets() {
        let assets = ["/assets/app.css", "/assets/app.js", "/assets/markdown.js", "/assets/console.css"];
        let console = ["/assets/console.js", "/assets/console-cron.js", "/assets/console-usage.js"];
        for asset in assets.into_iter().chain(console) {
            assert!(INDEX.contains(asset), "index.html does not load {asset}");
        }
        assert!(!INDEX.contains("http://") && !INDEX.contains("https://"), "index.html loads something from elsewhere");
        assert!(
            !INDEX.contains("<script>") && !INDEX.contains("style="),
            "inline script and style are refused by the page's own policy"
        );
        for script in [APP_JS, MARKDOWN_JS, CONSOLE_JS, CONSOLE_CRON_JS, CONSOLE_USAGE_JS] {
            assert!(!script.contains("innerHTML"), "model output and stored text must not meet innerHTML");
        }
        for script in [CONSOLE_JS, CONSOLE_CRON_JS, CONSOLE_USAGE_JS] {
            // The SVG namespace is a name, not an address: the charts load nothing from elsewhere.
            let addresses = script.matches("://").count();
            assert_eq!(
                addresses,
                script.matches("http://www.w3.org/2000/svg").count(),
                "a console script names an address"
            );
        }
    }
}
