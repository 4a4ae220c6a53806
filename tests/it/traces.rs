//! What an operator sees of a run: `tracing` spans with their fields. The test installs a global
//! subscriber, which is sound because nextest runs every test in a process of its own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use switchboard::config::{BudgetsConfig, PermissionsConfig, UsersConfig};
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard_channels::BusExt;
use switchboard_channels::contract::{InboundMessage, Sender};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::common::Fields;

/// A closed span: its name and its fields as text.
#[derive(Debug, Clone)]
struct Closed {
    name: String,
    fields: BTreeMap<String, String>,
}

/// Collects every span when it closes.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Closed>>>);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span.extensions().get::<Fields>().map(|f| f.0.clone()).unwrap_or_default();
            self.0.lock().unwrap().push(Closed { name: span.name().to_owned(), fields });
        }
    }
}

impl Capture {
    fn named(&self, name: &str) -> Vec<BTreeMap<String, String>> {
        self.0.lock().unwrap().iter().filter(|s| s.name == name).map(|s| s.fields.clone()).collect()
    }
}

fn owner_policy() -> AccessPolicy {
    let users = UsersConfig { owners: vec!["test:u1".into()], ..UsersConfig::default() };
    AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap()
}

fn msg(chat: &str, content: &str) -> InboundMessage {
    InboundMessage::user("test", chat, Sender { id: "u1".into(), name: "U".into(), is_bot: false }, content)
}

#[tokio::test]
async fn a_run_leaves_spans_for_the_run_each_model_call_and_each_tool_call() {
    // Global, so spans from every thread and task are seen (nextest gives each test its own
    // process); spans are told apart by session below.
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber of this process");

    let llm = FakeLlm::start().await;
    llm.push(Scripted::ToolCalls(vec![("current_time".into(), json!({})), ("no_such_tool".into(), json!({}))]));
    llm.push(Scripted::Text("It is noon.".into()));
    let h = crate::common::start(WorkerSettings { access: owner_policy(), ..WorkerSettings::default() }, llm).await;
    let mut out = h.bus.outbound("test").await.unwrap();
    h.bus.publish_inbound(&msg("spans", "time?")).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), out.next()).await.unwrap().unwrap().unwrap();
    reply.ack().await.unwrap();
    h.shutdown.cancel();
    h.worker.await.unwrap();

    // A span closes when the last handle to it is dropped, which for a run may be a task that
    // ends just after the worker returned; wait for it rather than race it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let runs = loop {
        let runs: Vec<_> = capture.named("run").into_iter().filter(|r| r["session"] == "test:spans").collect();
        if !runs.is_empty() || tokio::time::Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!((run["agent"].as_str(), run["session"].as_str()), ("main", "test:spans"));
    assert_eq!(run["status"], "completed");
    assert!(run.contains_key("run_id") && run.contains_key("duration_ms"), "{run:?}");

    let calls = capture.named("llm_call");
    assert_eq!(calls.len(), 2, "{calls:?}");
    for (i, call) in calls.iter().enumerate() {
        assert_eq!(call["iteration"], (i + 1).to_string());
        assert_eq!(call["model"], "fake-model");
        assert!(call["input_tokens"].parse::<u64>().unwrap() > 0, "{call:?}");
        assert!(call.contains_key("output_tokens") && call.contains_key("duration_ms"), "{call:?}");
        assert!(!call.contains_key("error"), "{call:?}");
    }

    let mut tools = capture.named("tool_call");
    tools.sort_by(|a, b| a["tool"].cmp(&b["tool"]));
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert_eq!((tools[0]["tool"].as_str(), tools[0]["error"].as_str()), ("current_time", "false"));
    assert_eq!((tools[1]["tool"].as_str(), tools[1]["error"].as_str()), ("no_such_tool", "true"));
    assert!(tools.iter().all(|t| t.contains_key("duration_ms")));
}
