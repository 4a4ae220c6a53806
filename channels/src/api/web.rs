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
const OPENAPI: &str = include_str!("assets/openapi.json");

/// Scripts and styles from this server only; sockets to it; images inline at most.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The routes of the page, its assets and the API's description, open to everyone (the page
/// asks for a token itself).
pub(super) fn routes<S: Clone + Send + Sync + 'static>() -> Vec<(&'static str, &'static str, MethodRouter<S>)> {
    vec![
        ("get", "/", get(|| async { asset("text/html; charset=utf-8", INDEX) })),
        ("get", "/assets/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) })),
        ("get", "/assets/markdown.js", get(|| async { asset("text/javascript; charset=utf-8", MARKDOWN_JS) })),
        ("get", "/assets/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) })),
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
        for asset in ["/assets/app.css", "/assets/app.js", "/assets/markdown.js"] {
            assert!(INDEX.contains(asset), "index.html does not load {asset}");
        }
        assert!(!INDEX.contains("http://") && !INDEX.contains("https://"), "index.html loads something from elsewhere");
        assert!(!INDEX.contains("<script>"), "inline script is refused by the page's own policy");
        assert!(
            !APP_JS.contains("innerHTML") && !MARKDOWN_JS.contains("innerHTML"),
            "model output must not meet innerHTML"
        );
    }
}
