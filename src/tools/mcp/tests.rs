use rmcp::model::{CallToolResult, Content};
use serde_json::json;

use super::*;

#[test]
fn the_pause_doubles_from_a_second_up_to_a_minute() {
    let pauses: Vec<u64> = (1..=9).map(|failures| backoff(failures).as_secs()).collect();
    assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
}

#[test]
fn names_the_model_apis_refuse_are_made_safe() {
    assert_eq!(tool::offered_name("files", "read_text_file"), "files__read_text_file");
    assert_eq!(tool::offered_name("web", "fetch.url/v2 now"), "web__fetch_url_v2_now");
    assert_eq!(tool::offered_name("s", &"x".repeat(100)).len(), 64);
}

#[test]
fn results_are_text_with_other_parts_described() {
    let mut result = CallToolResult::success(vec![Content::text("first"), Content::image("AAAA", "image/png")]);
    assert_eq!(tool::render(&result), "first\n[an image, image/png, 4 bytes base64]");
    result.content.clear();
    result.structured_content = Some(json!({"sum": 3}));
    assert_eq!(tool::render(&result), "{\"sum\":3}");
    result.structured_content = None;
    assert_eq!(tool::render(&result), "(the tool returned nothing)");
}

#[test]
fn a_server_without_a_session_offers_nothing_and_reports_starting() {
    let mut config = McpConfig::default();
    config.servers.insert("files".into(), McpServerConfig { command: "true".into(), ..McpServerConfig::default() });
    config.servers.insert("off".into(), McpServerConfig { enabled: false, ..McpServerConfig::default() });
    let servers = McpServers::new(&config);
    assert!(servers.current().is_empty());
    assert_eq!(
        servers.statuses(),
        [("files".to_owned(), ServerStatus::Starting), ("off".to_owned(), ServerStatus::Disabled)]
    );
}
