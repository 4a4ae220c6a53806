//! Registry behaviour: unknown and forbidden tools, timeouts, retries, argument parsing,
//! result truncation.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::json;

use super::*;

struct Sleepy;

#[async_trait]
impl Tool for Sleepy {
    fn name(&self) -> &str {
        "sleepy"
    }
    fn description(&self) -> &str {
        "sleeps"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(2))
    }
    async fn execute(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok("woke".into())
    }
}

/// Fails transiently `failures` times, then answers with a long text.
struct Flaky {
    failures: u32,
    calls: AtomicU32,
}

#[async_trait]
impl Tool for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn description(&self) -> &str {
        "flaky"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n < self.failures { Err(ToolError::Transient("connection reset".into())) } else { Ok("x".repeat(100)) }
    }
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall { id: "c1".into(), name: name.into(), arguments }
}

fn limits() -> ToolLimits {
    ToolLimits { timeout: Duration::from_secs(5), max_result_chars: 40, retry_delay: Duration::from_millis(1) }
}

fn registry_with(tool: Arc<dyn Tool>) -> ToolRegistry {
    let mut registry = ToolRegistry::with_builtins(limits());
    registry.register(tool);
    registry
}

#[tokio::test]
async fn unknown_tool_is_an_error_result() {
    let registry = ToolRegistry::with_builtins(limits());
    let out = registry.call(&call("rm_rf", json!({})), &ToolContext::default(), &ToolFilter::All).await;
    assert!(out.is_error);
    assert!(out.content.contains("unknown tool `rm_rf`"));
}

#[tokio::test]
async fn filtered_tools_are_neither_offered_nor_run() {
    let registry = registry_with(Arc::new(Sleepy));
    let filter = ToolFilter::Only(["current_time".to_owned()].into());
    let names: Vec<_> = registry.specs(&filter).into_iter().map(|s| s.name.clone()).collect();
    assert_eq!(names, ["current_time"]);
    let out = registry.call(&call("sleepy", json!({})), &ToolContext::default(), &filter).await;
    assert!(out.is_error);
    assert!(out.content.contains("not available to this user"), "{}", out.content);
}

#[tokio::test(start_paused = true)]
async fn a_tool_own_timeout_applies() {
    let registry = registry_with(Arc::new(Sleepy));
    let out = registry.call(&call("sleepy", json!({})), &ToolContext::default(), &ToolFilter::All).await;
    assert!(out.is_error);
    assert!(out.content.contains("did not finish within 2s"), "{}", out.content);
}

#[tokio::test]
async fn transient_failure_is_retried_once_then_reported() {
    let once = Arc::new(Flaky { failures: 1, calls: AtomicU32::new(0) });
    let registry = registry_with(once.clone());
    let out = registry.call(&call("flaky", json!({})), &ToolContext::default(), &ToolFilter::All).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(once.calls.load(Ordering::SeqCst), 2);

    let always = Arc::new(Flaky { failures: 10, calls: AtomicU32::new(0) });
    let registry = registry_with(always.clone());
    let out = registry.call(&call("flaky", json!({})), &ToolContext::default(), &ToolFilter::All).await;
    assert!(out.is_error);
    assert!(out.content.contains("connection reset"), "{}", out.content);
    assert_eq!(always.calls.load(Ordering::SeqCst), 2, "retried more than once");
}

#[tokio::test]
async fn long_results_are_cut_in_the_middle() {
    let registry = registry_with(Arc::new(Flaky { failures: 0, calls: AtomicU32::new(0) }));
    let out = registry.call(&call("flaky", json!({})), &ToolContext::default(), &ToolFilter::All).await;
    assert!(out.content.contains("60 characters cut"), "{}", out.content);
}

#[tokio::test]
async fn string_arguments_are_parsed_and_bad_ones_reported() {
    let registry = ToolRegistry::with_builtins(limits());
    let ctx = ToolContext::default();
    let ok = registry.call(&call("current_time", json!("{\"utc_offset\":\"+01:00\"}")), &ctx, &ToolFilter::All).await;
    assert!(!ok.is_error, "{}", ok.content);
    let bad = registry.call(&call("current_time", json!("{not json")), &ctx, &ToolFilter::All).await;
    assert!(bad.is_error);
    assert!(bad.content.contains("not a JSON object"));
}

#[test]
fn specs_are_sorted_by_name() {
    let registry = registry_with(Arc::new(Sleepy));
    let names: Vec<_> = registry.specs(&ToolFilter::All).into_iter().map(|s| s.name.clone()).collect();
    assert_eq!(names, ["current_time", "sleepy"]);
}

#[test]
fn local_tools_are_registered_as_configured() {
    let names = |config: &ToolsConfig| {
        let mut registry = ToolRegistry::new(ToolLimits::default());
        register_local_tools(&mut registry, config, Path::new("/nonexistent")).unwrap();
        registry.names()
    };
    let mut config = ToolsConfig::default();
    assert_eq!(names(&config), ["delete_file", "edit_file", "exec", "list_dir", "read_file", "write_file"]);
    config.exec.enabled = false;
    assert_eq!(names(&config), ["delete_file", "edit_file", "list_dir", "read_file", "write_file"]);
    config.fs.enabled = false;
    assert!(names(&config).is_empty());
    config.exec = crate::config::ExecToolConfig { deny_patterns: vec!["(".into()], ..Default::default() };
    let mut registry = ToolRegistry::new(ToolLimits::default());
    let error = register_local_tools(&mut registry, &config, Path::new("/nonexistent")).unwrap_err();
    assert!(error.to_string().starts_with("tools.exec.deny_patterns: \"(\" is not"), "{error}");
}

/// Counts how often its schema is built.
struct Counted {
    schemas: AtomicU32,
}

#[async_trait]
impl Tool for Counted {
    fn name(&self) -> &str {
        "counted"
    }
    fn description(&self) -> &str {
        "Counts."
    }
    fn parameters(&self) -> Value {
        self.schemas.fetch_add(1, Ordering::SeqCst);
        json!({"type": "object"})
    }
    async fn execute(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
        Ok(String::new())
    }
}

#[test]
fn a_schema_is_built_once_however_many_turns_offer_it() {
    let counted = Arc::new(Counted { schemas: AtomicU32::new(0) });
    let registry = registry_with(Arc::clone(&counted) as Arc<dyn Tool>);
    for _ in 0..3 {
        registry.specs(&ToolFilter::All);
        registry.raw_tokens(&ToolFilter::All);
        registry.raw_tokens_each(&ToolFilter::All);
    }
    assert_eq!(counted.schemas.load(Ordering::SeqCst), 1);
}
