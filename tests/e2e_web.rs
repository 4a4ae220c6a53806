//! web_fetch end to end through the real binary: the scripted model asks for a page on
//! 127.0.0.1 and gets a refusal, unless the environment allows that address.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::{Value, json};
use support::Launch;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

/// A page on 127.0.0.1 that counts its visitors.
async fn start_page() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let page = |State(hits): State<Arc<AtomicUsize>>| async move {
        hits.fetch_add(1, Ordering::SeqCst);
        axum::response::Html("<html><head><title>Intranet</title></head><body><p>The secret plan.</p></body></html>")
    };
    let app = Router::new().route("/", get(page)).with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, hits)
}

/// Runs one turn in which the model fetches `url`; returns what the tool answered.
async fn fetch_through_daemon(url: &str, env: &[(&str, &str)]) -> String {
    let llm = FakeLlm::start().await;
    llm.push(Scripted::ToolCalls(vec![("web_fetch".into(), json!({"url": url}))]));
    llm.push(Scripted::Text("Done.".into()));
    let dir = tempfile::tempdir().unwrap();
    // API senders start as guests; the test is about the guard, not permissions.
    let mut launch = Launch::new(dir.path(), "run", &["run"])
        .llm(&llm.base_url())
        .env("SWITCHBOARD_PERMISSIONS__TOOLS__WEB_FETCH", "guest");
    for (key, value) in env {
        launch = launch.env(key, value);
    }
    let mut daemon = launch.spawn();
    daemon.wait_healthy().await;

    let (status, body) = daemon.post(json!({"chat_id": "web", "content": "read that page"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "Done.", "{body}");
    let requests = llm.requests();
    let tool_result = requests[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").cloned();
    tool_result
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no tool result in {:#}\nlogs:\n{}", Value::Array(requests), daemon.logs()))
}

#[tokio::test]
async fn loopback_is_refused_by_default() {
    let (url, hits) = start_page().await;
    let result = fetch_through_daemon(&url, &[]).await;
    assert!(result.starts_with("error: refused: 127.0.0.1 is a loopback address"), "{result}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the page was requested");
}

#[tokio::test]
async fn loopback_is_fetched_when_the_environment_allows_it() {
    let (url, hits) = start_page().await;
    let result = fetch_through_daemon(&url, &[("SWITCHBOARD_TOOLS__WEB__ALLOW_PRIVATE", r#"["127.0.0.1"]"#)]).await;
    assert_eq!(result, format!("URL: {url}\nTitle: Intranet\n\nThe secret plan."));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
