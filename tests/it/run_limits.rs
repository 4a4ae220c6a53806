//! Runs that do not end on their own: a model looping on tool calls meets the whole-run time
//! limit, and a run that panics is recorded and answered; either way the chat's next message
//! is served.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::common::{BusKind, Setup};
use switchboard::config::{BudgetsConfig, PermissionsConfig, UsersConfig};
use switchboard::store::RunStatus;
use switchboard::tools::{Tool, ToolContext, ToolError};
use switchboard::users::AccessPolicy;
use switchboard::worker::{QueueSettings, WorkerSettings};
use switchboard_channels::contract::{InboundMessage, OutboundKind, OutboundMessage, Sender};
use switchboard_channels::{BusExt, Deliveries};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

/// Both chat channels: the limits are the worker's, whatever the chat.
const CHANNELS: [&str; 2] = ["telegram", "discord"];

fn settings(channel: &str, run_timeout: Duration) -> WorkerSettings {
    let users = UsersConfig { owners: vec![format!("{channel}:42")], ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    WorkerSettings {
        run_timeout,
        access,
        queue: QueueSettings { debounce: Duration::ZERO, ..Default::default() },
        ..WorkerSettings::default()
    }
}

fn from_owner(channel: &str, text: &str) -> InboundMessage {
    InboundMessage::user(channel, "42", Sender { id: "42".into(), name: "Ada".into(), is_bot: false }, text)
}

async fn next_message(out: &mut Deliveries) -> OutboundMessage {
    let delivery =
        tokio::time::timeout(Duration::from_secs(15), out.next()).await.expect("nothing sent").unwrap().unwrap();
    let message = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    message
}

#[tokio::test]
async fn a_looping_run_ends_at_the_time_limit_with_a_message_and_the_next_one_is_served() {
    for channel in CHANNELS {
        let llm = FakeLlm::start().await;
        // A model that never stops calling tools, each call taking a while: 20 iterations of
        // 400 ms would hold the chat for 8 s.
        for _ in 0..20 {
            let call = Scripted::ToolCalls(vec![("current_time".into(), json!({}))]);
            llm.push_when("again and again", Scripted::Delay(Duration::from_millis(400), Box::new(call)));
        }
        let setup = Setup {
            settings: settings(channel, Duration::from_millis(1500)),
            llm: Some(llm),
            ..Setup::new(BusKind::InProcess)
        };
        let h = setup.start().await;
        let mut out = h.bus.outbound(channel).await.unwrap();
        let started = Instant::now();
        let looping = from_owner(channel, "what time is it, again and again?");
        h.bus.publish_inbound(&looping).await.unwrap();
        // Asked while the loop runs (at once, the two would be one burst: one turn).
        h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
        h.bus.publish_inbound(&from_owner(channel, "are you there?")).await.unwrap();

        let notice = next_message(&mut out).await;
        let waited = started.elapsed();
        assert_eq!(notice.kind, OutboundKind::Notice, "{channel}: {notice:?}");
        assert!(notice.content.contains("took too long"), "{channel}: {}", notice.content);
        assert!(notice.content.contains("1 second") || notice.content.contains("seconds"), "{}", notice.content);
        assert!(waited < Duration::from_secs(4), "{channel}: the loop held the chat for {waited:?}");

        // The queued message is answered next (the fake echoes it).
        let answer = next_message(&mut out).await;
        assert_eq!(answer.kind, OutboundKind::Reply, "{channel}: {answer:?}");
        assert_eq!(answer.content, "echo: are you there?", "{channel}");

        let runs = h.store.recent_runs(10).await.unwrap();
        let timed_out = runs.iter().find(|run| run.inbound_id == looping.id).unwrap();
        assert_eq!(timed_out.status, RunStatus::Failed);
        assert!(timed_out.error.as_deref().unwrap_or_default().starts_with("timed out"), "{timed_out:?}");
        h.stop().await;
    }
}

/// A tool with a bug: it panics. Stands for any bug in a run (a tool, a provider quirk).
struct Explode;

#[async_trait]
impl Tool for Explode {
    fn name(&self) -> &str {
        "explode"
    }

    fn description(&self) -> &str {
        "Panics."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }

    async fn execute(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
        panic!("index out of bounds: the len is 0 but the index is 3")
    }
}

#[tokio::test]
async fn a_run_that_panics_is_recorded_and_answered_and_the_chat_goes_on() {
    for channel in CHANNELS {
        let llm = FakeLlm::start().await;
        llm.push(Scripted::ToolCalls(vec![("explode".into(), json!({}))]));
        let setup = Setup {
            settings: settings(channel, Duration::from_secs(300)),
            llm: Some(llm),
            tools: vec![Arc::new(Explode) as Arc<dyn Tool>],
            ..Setup::new(BusKind::InProcess)
        };
        let h = setup.start().await;
        let mut out = h.bus.outbound(channel).await.unwrap();
        let doomed = from_owner(channel, "please explode");
        h.bus.publish_inbound(&doomed).await.unwrap();
        let notice = next_message(&mut out).await;
        assert_eq!(notice.kind, OutboundKind::Notice, "{channel}: {notice:?}");
        assert!(notice.content.contains("went wrong"), "{channel}: {}", notice.content);

        h.bus.publish_inbound(&from_owner(channel, "still there?")).await.unwrap();
        let answer = next_message(&mut out).await;
        assert_eq!(answer.content, "echo: still there?", "{channel}: the chat is stuck after a panic");

        let runs = h.store.recent_runs(10).await.unwrap();
        let failed = runs.iter().find(|run| run.inbound_id == doomed.id).unwrap();
        assert_eq!(failed.status, RunStatus::Failed);
        let error = failed.error.as_deref().unwrap_or_default();
        assert!(error.starts_with("panicked: index out of bounds"), "{error}");
        h.stop().await;
    }
}
