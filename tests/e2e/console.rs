//! The owner console's admin routes through the real daemon: every one refused to a chat token
//! and answered to an admin token; levels changed, cron jobs added, paused, resumed, run and
//! deleted; usage per day and person that adds up to the runs; the run list without chat
//! commands; the doctor's checks. Pairing and approvals from the console are in
//! `console_decisions.rs`.

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use switchboard_channels::api::access::token_sha256_hex;
use switchboard_testkit::fake_llm::FakeLlm;

pub use crate::api_sessions::Api;
use crate::support::Launch;

pub const OPS: &str = "sb_ops_console_0123456789";
pub const KID: &str = "sb_kid_console_0123456789";

/// `ops` (admin, an owner) and `kid` (chat only); `extra` is added to the config.
fn write_config(dir: &Path, extra: &str) -> String {
    let text = format!(
        "[users]\nowners = [\"api:ops\"]\n\
         [channels.api.tokens.kid]\nsha256 = \"{}\"\n\
         [channels.api.tokens.ops]\nsha256 = \"{}\"\nscopes = [\"chat\", \"admin\"]\nrequests_per_minute = 0\n\
         [cron]\npoll_interval_ms = 200\n{extra}",
        token_sha256_hex(KID),
        token_sha256_hex(OPS),
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// The daemon with `ops` and `kid`'s config (and `extra`), on the fake model `llm`.
pub fn launch<'a>(dir: &'a Path, llm: &FakeLlm, extra: &str) -> Launch<'a> {
    let config = write_config(dir, extra);
    Launch::new(dir, "run", &["run", "--config", &config]).llm(&llm.base_url())
}

impl Api<'_> {
    /// An admin request that must succeed; its answer.
    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, answer) = self.call(method.clone(), path, OPS, body).await;
        assert!((200..300).contains(&status), "{method} {path}: {status} {answer}\n{}", self.daemon.logs());
        answer
    }
}

/// Every `/v1/admin` route of the API's own description, with example values in its path.
async fn admin_routes(api: &Api<'_>) -> Vec<(Method, String)> {
    let document = api.call(Method::GET, "/openapi.json", KID, None).await.1;
    let mut routes = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        if !path.starts_with("/v1/admin") {
            continue;
        }
        let path = path
            .replace("{identity}", "api%3Akid")
            .replace("{channel}", "telegram")
            .replace("{code}", "ABCDEFGH")
            .replace("{decision}", "deny")
            .replace("{id}", "nojob")
            .replace("{action}", "pause");
        for method in item.as_object().unwrap().keys() {
            routes.push((method.to_uppercase().parse().unwrap(), path.clone()));
        }
    }
    routes
}

#[tokio::test]
async fn every_admin_route_is_refused_to_a_chat_token_and_answered_to_an_admin() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = launch(dir.path(), &llm, "").spawn();
    daemon.wait_healthy().await;
    let api = Api::new(&daemon);
    let routes = admin_routes(&api).await;
    assert!(routes.len() >= 11, "{routes:?}");
    let body = json!({"level": "user", "to": "api:x", "message": "hi", "every": "1d"});
    for (method, path) in &routes {
        let (status, answer) = api.call(method.clone(), path, KID, Some(body.clone())).await;
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "forbidden", "{answer}");
        assert_eq!(answer["error"]["message"], "the owner console needs an admin token");
        let (status, answer) = api.call(method.clone(), path, OPS, Some(body.clone())).await;
        // Nothing by those names exists, so a change answers 404 (or 400 for the level of
        // nobody); the lists and the job answer 2xx.
        assert!([200, 201, 400, 404].contains(&status), "{method} {path}: {status} {answer}");
        assert!(answer["error"]["code"] != "forbidden", "{method} {path}: {answer}");
    }
    let (status, _) = api.call(Method::GET, "/v1/admin/people", "not-a-token", None).await;
    assert_eq!(status, 401);

    // The doctor's checks, as JSON.
    let checks = api.admin(Method::GET, "/v1/admin/health", None).await;
    let config_check = checks["checks"].as_array().unwrap().iter().find(|c| c["check"] == "config").cloned();
    assert_eq!(config_check.map(|c| c["status"].clone()), Some(json!("ok")), "{checks}");
}

#[tokio::test]
async fn levels_cron_jobs_usage_and_runs_from_the_console() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = launch(dir.path(), &llm, "[agent]\ntimezone = \"Europe/Berlin\"\n")
        .env("SWITCHBOARD_WORKER__DEBOUNCE_MS", "0")
        .spawn();
    daemon.wait_healthy().await;
    let api = Api::new(&daemon);

    // Two people talk; one of them also asks for /status, a command that calls no model.
    for (sender, text) in [("ann", "hello there"), ("bob", "a longer question for the model"), ("ann", "again")] {
        let (status, reply) =
            daemon.post_with(json!({"chat_id": sender, "sender": sender, "content": text}), Some(OPS)).await;
        assert_eq!(status, 200, "{reply}");
    }
    let (status, _) =
        daemon.post_with(json!({"chat_id": "ann", "sender": "ann", "content": "/status"}), Some(OPS)).await;
    assert_eq!(status, 200);

    // People and levels.
    let people = api.admin(Method::GET, "/v1/admin/people", None).await;
    let names: Vec<&str> = people["people"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"ann") && names.contains(&"bob"), "{people}");
    assert_eq!(people["levels"], json!(["guest", "user", "admin", "owner"]));
    let ann = people["people"].as_array().unwrap().iter().find(|p| p["name"] == "ann").unwrap();
    assert!(ann["tokens_this_month"].as_u64().unwrap() > 0 && ann["last_active"].is_string(), "{ann}");
    let changed = api.admin(Method::PUT, "/v1/admin/people/api%3Aann/level", Some(json!({"level": "admin"}))).await;
    assert_eq!(changed["level"], "admin");
    let people = api.admin(Method::GET, "/v1/admin/people", None).await;
    let ann = people["people"].as_array().unwrap().iter().find(|p| p["name"] == "ann").unwrap();
    assert_eq!(ann["level"], "admin", "the change is there when read again");
    let (status, refused) =
        api.call(Method::PUT, "/v1/admin/people/api%3Aops/level", OPS, Some(json!({"level": "guest"}))).await;
    assert_eq!(status, 400, "a configured owner stays owner: {refused}");
    let (status, _) =
        api.call(Method::PUT, "/v1/admin/people/api%3Aann/level", OPS, Some(json!({"level": "boss"}))).await;
    assert_eq!(status, 400);

    // The run list holds model runs; the command only when asked.
    let runs = api.admin(Method::GET, "/v1/runs", None).await;
    let kinds: Vec<&str> = runs["runs"].as_array().unwrap().iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["turn", "turn", "turn"], "{runs}");
    let all = api.admin(Method::GET, "/v1/runs?include_commands=true", None).await;
    assert!(all["runs"].as_array().unwrap().iter().any(|r| r["kind"] == "command"), "{all}");
    // Each session with its cost: the fake model has no price, so none is known (null, not 0).
    let sessions = api.admin(Method::GET, "/v1/sessions", None).await;
    let ann_session = sessions["sessions"].as_array().unwrap().iter().find(|s| s["key"] == "api:ann").unwrap();
    assert_eq!(ann_session.get("cost_usd"), Some(&Value::Null), "{sessions}");

    // Usage per day and per person adds up to the runs.
    let usage = api.admin(Method::GET, "/v1/admin/usage?days=7", None).await;
    assert_eq!(usage["days"].as_array().unwrap().len(), 7);
    assert_eq!(usage["timezone"], "Europe/Berlin");
    let tokens = |v: &Value| v["input_tokens"].as_u64().unwrap() + v["output_tokens"].as_u64().unwrap();
    let from_runs: u64 = runs["runs"].as_array().unwrap().iter().map(tokens).sum();
    assert!(from_runs > 0);
    assert_eq!(tokens(&usage["total"]), from_runs, "{usage}");
    assert_eq!(usage["total"]["runs"], 3);
    let today = usage["days"].as_array().unwrap().last().unwrap();
    assert_eq!(tokens(today), from_runs, "every run is today's: {usage}");
    let per_person: u64 = usage["people"].as_array().unwrap().iter().map(tokens).sum();
    assert_eq!(per_person, from_runs);
    let ann_runs: u64 =
        runs["runs"].as_array().unwrap().iter().filter(|r| r["session_key"] == "api:ann").map(tokens).sum();
    let ann_usage = usage["people"].as_array().unwrap().iter().find(|p| p["name"] == "ann").unwrap();
    assert_eq!((tokens(ann_usage), ann_usage["runs"].as_u64()), (ann_runs, Some(2)), "{usage}");
    let (status, _) = api.call(Method::GET, "/v1/admin/usage?days=0", OPS, None).await;
    assert_eq!(status, 400);

    cron_jobs(&api).await;
}

/// A reminder job added, paused, resumed, run now (its message reaches the chat) and deleted.
async fn cron_jobs(api: &Api<'_>) {
    let job = json!({"to": "api:garden", "message": "Water the plants", "cron": "0 8 * * *", "kind": "reminder", "name": "plants"});
    let added = api.admin(Method::POST, "/v1/admin/cron", Some(job)).await;
    let id = added["id"].as_str().unwrap().to_owned();
    assert_eq!((added["state"].as_str(), added["tz"].as_str()), (Some("active"), Some("Europe/Berlin")), "{added}");
    assert!(
        added["next_run"].as_str().unwrap().ends_with(":00 CET")
            || added["next_run"].as_str().unwrap().ends_with(":00 CEST"),
        "{added}"
    );
    assert!(added["next_run"].as_str().unwrap().contains(" 08:00 "), "next run in the owner's zone: {added}");
    let (status, bad) = api
        .call(Method::POST, "/v1/admin/cron", OPS, Some(json!({"to": "api:x", "message": "m", "every": "1s"})))
        .await;
    assert_eq!(status, 400, "{bad}");

    let path = format!("/v1/admin/cron/{id}");
    let state = |schedule: &Value| {
        schedule["jobs"].as_array().unwrap().iter().find(|j| j["id"] == id.as_str()).map(|j| j["state"].clone())
    };
    api.admin(Method::POST, &format!("{path}/pause"), None).await;
    assert_eq!(state(&api.admin(Method::GET, "/v1/admin/cron", None).await), Some(json!("paused")));
    let resumed = api.admin(Method::POST, &format!("{path}/resume"), None).await;
    assert!(resumed["message"].as_str().unwrap().contains("next run"), "{resumed}");
    let schedule = api.admin(Method::GET, "/v1/admin/cron", None).await;
    assert_eq!(state(&schedule), Some(json!("active")));
    assert_eq!(schedule["timezone"], "Europe/Berlin");
    assert_eq!(schedule["heartbeats"][0]["agent"], "main", "the main agent's heartbeat: {schedule}");

    api.admin(Method::POST, &format!("{path}/run"), None).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let page = api.admin(Method::GET, "/v1/sessions/api%3Agarden/messages", None).await;
        if page.to_string().contains("Water the plants") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the job never ran\n{}", api.daemon.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    api.admin(Method::DELETE, &path, None).await;
    assert_eq!(state(&api.admin(Method::GET, "/v1/admin/cron", None).await), None);
    let (status, _) = api.call(Method::POST, &format!("{path}/pause"), OPS, None).await;
    assert_eq!(status, 404);
}

/// The page's policy, written out: loosening it (an inline script, a CDN, a frame) must fail here
/// and be decided on purpose.
const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                        img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

#[tokio::test]
async fn the_page_and_the_consoles_assets_carry_the_strict_content_security_policy() {
    let llm = FakeLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = launch(dir.path(), &llm, "").spawn();
    daemon.wait_healthy().await;
    let client = reqwest::Client::new();
    let page = ["/", "/assets/app.js", "/assets/markdown.js", "/assets/app.css"];
    let console = ["/assets/console.js", "/assets/console-cron.js", "/assets/console-usage.js", "/assets/console.css"];
    for path in page.into_iter().chain(console) {
        // Open routes: no token, as a browser first asks for them.
        let response = client.get(daemon.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        assert_eq!(header("content-security-policy").as_deref(), Some(PAGE_CSP), "{path}");
        assert_eq!(header("x-frame-options").as_deref(), Some("DENY"), "{path}");
        assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"), "{path}");
    }
}
