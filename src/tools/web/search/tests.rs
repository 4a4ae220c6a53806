//! web_search against a local fake of the Brave Search API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::*;

const KEY: &str = "brave-test-key";

#[derive(Default)]
struct Fake {
    /// The status to answer with instead of results, when set.
    status: Option<u16>,
    queries: Mutex<Vec<HashMap<String, String>>>,
}

async fn search(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    fake.queries.lock().unwrap().push(q.clone());
    if headers.get("x-subscription-token").and_then(|v| v.to_str().ok()) != Some(KEY) {
        return (StatusCode::UNAUTHORIZED, "bad token").into_response();
    }
    assert_eq!(headers.get("accept").unwrap(), "application/json");
    if let Some(code) = fake.status {
        return StatusCode::from_u16(code).unwrap().into_response();
    }
    let count: usize = q["count"].parse().unwrap();
    let results: Vec<Value> = (1..=count.min(3))
        .map(|i| {
            json!({"title": format!("Result <strong>{i}</strong>"), "url": format!("https://example.com/{i}"),
                   "description": format!("About &quot;{}&quot; number {i}", q["q"]), "extra": true})
        })
        .collect();
    axum::Json(json!({"type": "search", "web": {"type": "search", "results": results}})).into_response()
}

async fn start(fake: Fake) -> (String, Arc<Fake>) {
    let fake = Arc::new(fake);
    let app = Router::new().route("/res/v1/web/search", get(search)).with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, fake)
}

fn tool(base_url: &str, key: &str) -> WebSearch {
    WebSearch::new(SearchSettings {
        api_key: key.into(),
        base_url: base_url.into(),
        max_results: 2,
        timeout: Duration::from_secs(5),
    })
}

async fn run(tool: &WebSearch, args: Value) -> Result<String, ToolError> {
    tool.execute(args, &ToolContext::default()).await
}

#[tokio::test]
async fn returns_a_numbered_list_and_sends_the_key() {
    let (url, fake) = start(Fake::default()).await;
    let out = run(&tool(&url, KEY), json!({"query": "rust async"})).await.unwrap();
    assert_eq!(
        out,
        "1. Result 1\n   https://example.com/1\n   About \"rust async\" number 1\n\n\
         2. Result 2\n   https://example.com/2\n   About \"rust async\" number 2"
    );
    let queries = fake.queries.lock().unwrap().clone();
    assert_eq!(queries[0]["q"], "rust async");
    assert_eq!(queries[0]["count"], "2", "max_results is the default count");

    let out = run(&tool(&url, KEY), json!({"query": "x", "count": 50})).await.unwrap();
    assert!(out.starts_with("1. ") && out.contains("\n3. "), "{out}");
    assert_eq!(fake.queries.lock().unwrap()[1]["count"], "20", "count is capped at Brave's 20");
}

#[tokio::test]
async fn without_a_key_it_says_how_to_configure_it() {
    let err = run(&tool("http://127.0.0.1:9", ""), json!({"query": "x"})).await.unwrap_err();
    let ToolError::Failed(message) = err else { panic!("{err:?}") };
    assert!(message.starts_with("web_search is not configured: set BRAVE_API_KEY"), "{message}");
}

#[tokio::test]
async fn http_errors_are_classified() {
    let (url, _) = start(Fake::default()).await;
    let err = run(&tool(&url, "wrong-key"), json!({"query": "x"})).await.unwrap_err();
    assert!(matches!(&err, ToolError::Failed(m) if m.contains("rejected the API key")), "{err:?}");
    assert!(!err.to_string().contains("wrong-key"), "the key is never echoed");

    for code in [429, 500, 503] {
        let (url, _) = start(Fake { status: Some(code), ..Fake::default() }).await;
        let err = run(&tool(&url, KEY), json!({"query": "x"})).await.unwrap_err();
        assert!(matches!(err, ToolError::Transient(_)), "{code}: {err:?}");
    }
    let (url, _) = start(Fake { status: Some(422), ..Fake::default() }).await;
    let err = run(&tool(&url, KEY), json!({"query": "x"})).await.unwrap_err();
    assert!(matches!(&err, ToolError::Failed(m) if m.contains("422")), "{err:?}");

    let err = run(&tool(&url, KEY), json!({"query": "  "})).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(_)));
}

#[tokio::test]
async fn no_results_is_said_plainly() {
    assert_eq!(render("nothing", &[]), "No results for \"nothing\".");
}
