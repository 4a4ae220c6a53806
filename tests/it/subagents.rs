//! Sub-agents through the in-process worker, on the in-process bus and on NATS JetStream: the
//! `spawn` tool, the announcement back to the origin session and chat (with the model usage and
//! its cost), the limits, the `/stop` cascade and the reports of sub-agents lost with their
//! worker.

mod harness;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use switchboard_channels::contract::SessionKey;

use crate::common::{BusKind, Harness, next_out, nothing_more};
use futures_util::StreamExt;
use harness::{eventually, message, setup, setup_with, subagent_requests, tool_names};
use serde_json::json;
use switchboard::clock::ManualClock;
use switchboard::config::{BindingConfig, ModelPrice};
use switchboard::config::{Identity, Level};
use switchboard::store::sqlite::SqliteStore;
use switchboard::store::subagents::{NewSubagent, SubagentStatus, SubagentStore};
use switchboard::subagents::{LOST_ERROR, SHUTDOWN_ERROR, SpawnRequest, SubagentManager, SubagentSettings};
use switchboard::users::month_key;
use switchboard_channels::contract::{ChatAddress, InboundMessage, Origin, OutboundKind, Usage};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

const TASK: &str = "Find the capital of Peru and its population.";
/// In the runtime section of every sub-agent's prompt, and of no main-agent prompt.
const MINIMAL: &str = "prompt mode minimal";

fn spawn_call(task: &str, label: &str) -> Scripted {
    Scripted::ToolCalls(vec![("spawn".into(), json!({"task": task, "label": label}))])
}

/// Where a person writes and where the announcement must land.
struct Place {
    channel: &'static str,
    chat: &'static str,
    thread: Option<&'static str>,
    /// The session the announcement runs in.
    session: &'static str,
}

const TELEGRAM_TOPIC: Place =
    Place { channel: "telegram", chat: "-100123", thread: Some("7"), session: "telegram:-100123:topic:7" };
const DISCORD_THREAD: Place =
    Place { channel: "discord", chat: "555", thread: Some("999"), session: "discord:555:thread:999" };

/// A person asks; the model spawns a sub-agent and says so; the sub-agent answers; its
/// announcement runs in the origin session and the main agent's reply reaches the chat.
async fn announce_routing(kind: BusKind, place: Place, agent: Option<&'static str>) {
    let mut setup = setup(kind);
    if let Some(name) = agent {
        setup.agents.push(harness::agent(name));
        setup.bindings.push(BindingConfig {
            agent: name.into(),
            channel: place.channel.into(),
            ..BindingConfig::default()
        });
    }
    let rig = setup.start().await;
    rig.llm.push(spawn_call(TASK, "capital"));
    rig.llm.push(Scripted::Text("I asked a helper; the answer will follow.".into()));
    rig.llm.push_when(MINIMAL, Scripted::Text("Lima, about 10 million people.".into()));
    rig.llm.push(Scripted::Text("Peru's capital is Lima (about 10 million people).".into()));
    let mut out = rig.outbound(place.channel).await;
    rig.send(&message(place.channel, place.chat, place.thread, true, "What's Peru's capital? Use a helper.")).await;

    let first = next_out(&mut out).await;
    assert_eq!(first.content, "I asked a helper; the answer will follow.");
    let second = next_out(&mut out).await;
    assert_eq!(second.content, "Peru's capital is Lima (about 10 million people).");
    assert_eq!((second.channel.as_str(), second.chat_id.as_str()), (place.channel, place.chat));
    assert_eq!(second.thread_id.as_deref(), place.thread);
    assert_eq!(second.kind, OutboundKind::Reply);

    // The sub-agent's request: the minimal prompt, its task, no message/spawn/cron.
    let sub = subagent_requests(&rig.llm);
    assert_eq!(sub.len(), 1, "{sub:#?}");
    let tools = tool_names(&sub[0]);
    assert!(tools.contains(&"current_time".to_owned()), "{tools:?}");
    for withheld in ["message", "spawn", "cron"] {
        assert!(!tools.contains(&withheld.to_owned()), "{withheld} offered: {tools:?}");
    }
    let sub_text = sub[0]["messages"].to_string();
    assert!(sub_text.contains(TASK), "{sub_text}");
    assert!(!sub_text.contains("What's Peru's capital"), "the sub-agent saw the conversation: {sub_text}");
    let expected_model = format!("{}-model", agent.unwrap_or("main"));
    assert_eq!(sub[0]["model"], expected_model.as_str());

    // The announcement ran in the origin session (with the agent prefix for a named agent).
    let session = agent.map_or_else(|| place.session.to_owned(), |name| format!("{name}/{}", place.session));
    let history = rig.store.history(&session, 50).await.unwrap();
    let announced = history.iter().find(|m| m.content.contains("[sub-agent")).expect("announcement in the session");
    assert!(announced.content.contains("\"capital\""), "{}", announced.content);
    assert!(announced.content.contains(TASK) && announced.content.contains("Lima, about 10 million"));
    // The manager marks the record announced after its publish returned; the worker may have
    // answered the announcement before that write, so wait for it.
    eventually("the record marked announced", || {
        let (store, session) = (rig.store.clone(), session.clone());
        async move { store.subagents_of(&session).await.unwrap().iter().all(|r| r.announced) }
    })
    .await;
    let records = rig.store.subagents_of(&session).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!((records[0].status, records[0].announced), (SubagentStatus::Completed, true));
    assert_eq!(records[0].session, None, "a chat session is not an isolated one");
    rig.stop().await;
}

crate::both_buses! {
    announcement_reaches_a_telegram_forum_topic => announce_routing(TELEGRAM_TOPIC, None);
    announcement_reaches_a_discord_thread => announce_routing(DISCORD_THREAD, None);
    announcement_reaches_a_named_agents_session => announce_routing(TELEGRAM_TOPIC, Some("support"));
    stop_cancels_the_sessions_subagents_only => stop_cascade();
    announcement_returns_to_an_isolated_session => isolated_session_routing();
    a_subagents_usage_is_recorded_and_announced => usage_and_cost();
}

/// A sub-agent's model usage, and its cost by the agent's prices, are recorded with it and
/// sent with its announcement (read here off the inbound queue, so no worker runs).
async fn usage_and_cost(kind: BusKind) {
    let price = ModelPrice { input_per_mtok: 1.0, output_per_mtok: 2.0, ..ModelPrice::default() };
    let mut setup = setup(kind);
    setup.agents = vec![crate::common::AgentSpec::new("main", "fake-model", "workspace")];
    setup.prices = BTreeMap::from([("fake-model".to_owned(), price)]);
    setup.run_worker = false;
    let rig = setup.start().await;
    // The person the sub-agent acts for, known to the store (they wrote the message that spawned it).
    let person = Identity::new("telegram", "42");
    let user = rig.store.resolve_user(&person, "Ada", Level::User).await.unwrap();
    let mut inbound = rig.bus.inbound().await.unwrap();
    rig.llm.push(Scripted::Text("42".into()));
    let chat = ChatAddress { channel: "telegram".into(), chat_id: "42".into(), thread_id: None, is_group: false };
    let request = SpawnRequest {
        parent_session: SessionKey::stored(chat.session_key()),
        parent_agent: "main".into(),
        chat,
        label: "answer".into(),
        task: "Find the answer.".into(),
        on_behalf_of: Some("telegram:42".into()),
        tools: Default::default(),
        memory: Default::default(),
        persona: Default::default(),
        level: Default::default(),
    };
    let id = rig.manager().spawn(request).await.unwrap();

    let delivery = tokio::time::timeout(Duration::from_secs(15), inbound.next()).await.expect("no announcement");
    let delivery = delivery.unwrap().unwrap();
    let announcement: InboundMessage = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    assert_eq!(announcement.id, format!("subagent:{id}"));
    let record = rig.store.subagent(&id).await.unwrap().unwrap();
    assert_eq!(record.status, SubagentStatus::Completed);
    // The fake model counts four characters a token (at least one) of the prompt it read (the
    // tool schemas, then a line of role and text per message) and of what it answered.
    let requests = rig.llm.requests();
    assert_eq!(requests.len(), 1);
    let tools = requests[0].get("tools").map_or(0, |tools| tools.to_string().chars().count());
    let sent: usize = requests[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("\n{}:{}", m["role"].as_str().unwrap(), m["content"].as_str().unwrap_or_default()))
        .map(|line| line.chars().count())
        .sum::<usize>()
        + tools;
    let usage = Usage::new((sent / 4).max(1) as u64, 1);
    assert_eq!(record.usage, usage);
    let cost = (usage.input_tokens as f64 + 2.0 * usage.output_tokens as f64) / 1e6;
    assert!(record.cost_usd.is_some_and(|c| (c - cost).abs() < 1e-12), "{:?} vs {cost}", record.cost_usd);
    assert_eq!(announcement.metadata["usage"], json!(usage));
    // Compared with a tolerance: the JSON round trip may change the last bit of a float.
    let announced_cost = announcement.metadata["cost_usd"].as_f64().unwrap();
    assert!((announced_cost - cost).abs() < 1e-12, "{announced_cost} vs {cost}");
    assert_eq!(announcement.metadata["on_behalf_of"], "telegram:42");
    // Its tokens count against that person's month, like the runs they start.
    let month = month_key(chrono::Utc::now());
    assert_eq!(rig.store.monthly_usage(user.id, &month).await.unwrap(), usage);
    rig.manager().shutdown().await;
}

/// A sub-agent started by a turn in an isolated session (a cron job's `metadata.session`) is
/// announced in that session; the reply still goes to the job's chat topic.
async fn isolated_session_routing(kind: BusKind) {
    let rig = setup(kind).start().await;
    rig.llm.push(spawn_call(TASK, "capital"));
    rig.llm.push(Scripted::Text("Asked a helper.".into()));
    rig.llm.push_when(MINIMAL, Scripted::Text("Lima.".into()));
    rig.llm.push(Scripted::Text("Daily fact: Peru's capital is Lima.".into()));
    let mut out = rig.outbound("telegram").await;
    let chat = ChatAddress {
        channel: "telegram".into(),
        chat_id: "-100123".into(),
        thread_id: Some("7".into()),
        is_group: true,
    };
    let origin = Origin { kind: "cron".into(), id: "daily".into() };
    let mut job = InboundMessage::system("cron:daily:1".into(), chat, origin, "Post a daily fact; use a helper.");
    job.metadata.insert("session".into(), json!("cron:daily"));
    rig.send(&job).await;
    assert_eq!(next_out(&mut out).await.content, "Asked a helper.");
    let reply = next_out(&mut out).await;
    assert_eq!(reply.content, "Daily fact: Peru's capital is Lima.");
    assert_eq!((reply.chat_id.as_str(), reply.thread_id.as_deref()), ("-100123", Some("7")));
    let record = rig.store.subagents_of("cron:daily").await.unwrap().remove(0);
    assert_eq!(record.session.as_deref(), Some("cron:daily"));
    let history = rig.store.history("cron:daily", 50).await.unwrap();
    assert!(history.iter().any(|m| m.content.contains("[sub-agent")), "{history:#?}");
    assert!(rig.store.history("telegram:-100123:topic:7", 50).await.unwrap().is_empty());
    rig.stop().await;
}

/// `/stop` in the origin session cancels its hanging sub-agent: recorded `cancelled`, never
/// announced, counted in the answer; another session's sub-agent keeps running.
async fn stop_cascade(kind: BusKind) {
    let rig = setup(kind).start().await;
    let mut out = rig.outbound("telegram").await;
    for (chat, task) in [("-1001", "Task of chat one."), ("-1002", "Task of chat two.")] {
        rig.llm.push(spawn_call(task, chat));
        rig.llm.push(Scripted::Text(format!("started for {chat}")));
        rig.llm.push_when(task, Scripted::Hang);
        rig.send(&message("telegram", chat, None, true, "go")).await;
        assert_eq!(next_out(&mut out).await.content, format!("started for {chat}"));
    }
    rig.llm.wait_for_requests(6, Duration::from_secs(10)).await;
    assert_eq!(subagent_requests(&rig.llm).len(), 2, "both sub-agents are in their model call");

    rig.send(&message("telegram", "-1001", None, true, "/stop")).await;
    let answer = next_out(&mut out).await;
    assert_eq!(answer.chat_id, "-1001");
    assert_eq!(answer.content, "Stopped. Cancelled 1 sub-agent.");
    let one = rig.store.subagents_of("telegram:-1001").await.unwrap().remove(0);
    let store = rig.store.clone();
    eventually("the cancelled record", || {
        let (store, id) = (store.clone(), one.id.clone());
        async move { store.subagent(&id).await.unwrap().unwrap().status == SubagentStatus::Cancelled }
    })
    .await;
    let two = rig.store.subagents_of("telegram:-1002").await.unwrap().remove(0);
    assert_eq!(two.status, SubagentStatus::Running);
    // A reaper pass finds nothing to report, and no announcement reaches the chat.
    assert_eq!(rig.manager().tick().await.unwrap().lost, 0);
    nothing_more(&mut out, Duration::from_millis(700)).await;
    let runs = rig.store.recent_runs(50).await.unwrap();
    assert!(!runs.iter().any(|run| run.inbound_id == format!("subagent:{}", one.id)), "{runs:#?}");
    assert_eq!(rig.manager().live_count(), 1);
    rig.stop().await;
}

async fn memory_rig(settings: SubagentSettings) -> Harness {
    setup_with(BusKind::InProcess, settings, switchboard::clock::system()).start().await
}

#[tokio::test]
async fn the_sixth_live_child_of_a_session_is_refused() {
    let rig = memory_rig(SubagentSettings::default()).await;
    let mut out = rig.outbound("test").await;
    let calls = (1..=6).map(|n| ("spawn".to_owned(), json!({"task": format!("Hang task {n}.")}))).collect();
    rig.llm.push(Scripted::ToolCalls(calls));
    rig.llm.push(Scripted::Text("five started".into()));
    for n in 1..=6 {
        rig.llm.push_when(&format!("Hang task {n}."), Scripted::Hang);
    }
    rig.send(&message("test", "cap", None, false, "start six")).await;
    assert_eq!(next_out(&mut out).await.content, "five started");
    // The tool results the model saw (its second call): five started, the sixth refused.
    let requests: Vec<_> =
        rig.llm.requests().into_iter().filter(|r| !harness::system_text(r).contains(MINIMAL)).collect();
    let messages = requests[1]["messages"].as_array().unwrap();
    let results: Vec<&str> =
        messages.iter().filter(|m| m["role"] == "tool").filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(results.len(), 6, "{results:#?}");
    assert_eq!(results.iter().filter(|r| r.starts_with("Started sub-agent")).count(), 5, "{results:#?}");
    // The six calls run in parallel; whichever came last is refused, with the reason.
    let refused: Vec<&&str> = results.iter().filter(|r| r.contains("at most 5")).collect();
    assert_eq!(refused.len(), 1, "{results:#?}");
    assert!(refused[0].contains("already has 5 sub-agents queued or running"), "{}", refused[0]);
    let records = rig.store.subagents_of("test:cap").await.unwrap();
    assert_eq!(records.len(), 5);
    assert_eq!(rig.manager().cancel_session(&SessionKey::stored("test:cap")).await, 5);
    rig.stop().await;
}

#[tokio::test]
async fn concurrent_spawns_on_two_stores_cannot_pass_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let (a, b) = (SqliteStore::open(&path).await.unwrap(), SqliteStore::open(&path).await.unwrap());
    let now = chrono::Utc::now();
    let tries = (0..12).map(|n| {
        let store = if n % 2 == 0 { a.clone() } else { b.clone() };
        let new = record(&format!("s{n}"), "telegram:1", "w");
        tokio::spawn(async move { store.create_subagent(&new, 5, now, now + chrono::Duration::seconds(60)).await })
    });
    let mut queued = 0;
    for attempt in futures_util::future::join_all(tries).await {
        if attempt.unwrap().unwrap() == switchboard::store::subagents::Created::Queued {
            queued += 1;
        }
    }
    assert_eq!(queued, 5);
    assert_eq!(a.subagents_of("telegram:1").await.unwrap().len(), 5);
}

fn record(id: &str, parent: &str, worker: &str) -> NewSubagent {
    NewSubagent {
        id: id.into(),
        parent_session: parent.into(),
        parent_agent: "main".into(),
        chat: ChatAddress { channel: "telegram".into(), chat_id: "1".into(), thread_id: None, is_group: false },
        session: None,
        label: "lbl".into(),
        on_behalf_of: Some("telegram:1".into()),
        task: "a task".into(),
        worker: worker.into(),
    }
}

#[tokio::test]
async fn the_global_limit_queues_the_rest() {
    let settings = SubagentSettings { max_concurrent: 2, ..SubagentSettings::default() };
    let rig = memory_rig(settings).await;
    let mut out = rig.outbound("test").await;
    let calls = (1..=3).map(|n| ("spawn".to_owned(), json!({"task": format!("Queued task {n}.")}))).collect();
    rig.llm.push(Scripted::ToolCalls(calls));
    rig.llm.push(Scripted::Text("three started".into()));
    for n in 1..=3 {
        rig.llm.push_when(&format!("Queued task {n}."), Scripted::Hang);
    }
    rig.send(&message("test", "q", None, false, "start three")).await;
    assert_eq!(next_out(&mut out).await.content, "three started");
    let store = rig.store.clone();
    eventually("two running, one queued", || {
        let store = store.clone();
        async move {
            let records = store.subagents_of("test:q").await.unwrap();
            let count = |status| records.iter().filter(|r| r.status == status).count();
            count(SubagentStatus::Running) == 2 && count(SubagentStatus::Queued) == 1
        }
    })
    .await;
    // A record is marked running just before its model call goes out: wait for both calls.
    rig.llm.wait_for_requests(4, Duration::from_secs(10)).await;
    assert_eq!(subagent_requests(&rig.llm).len(), 2, "the queued one has not called the model");
    // The queued one is cancelled too, without ever running.
    assert_eq!(rig.manager().cancel_session(&SessionKey::stored("test:q")).await, 3);
    eventually("all cancelled", || {
        let store = store.clone();
        async move {
            let records = store.subagents_of("test:q").await.unwrap();
            records.iter().all(|r| r.status == SubagentStatus::Cancelled)
        }
    })
    .await;
    let records = rig.store.subagents_of("test:q").await.unwrap();
    assert_eq!(records.iter().filter(|r| r.started_at.is_none()).count(), 1);
    rig.stop().await;
}

#[tokio::test]
async fn a_subagent_stops_at_its_iteration_limit_and_reports_it() {
    let rig = memory_rig(SubagentSettings::default()).await;
    let mut out = rig.outbound("test").await;
    rig.llm.push(spawn_call("Loop on the clock.", "looper"));
    rig.llm.push(Scripted::Text("started".into()));
    // A new question each step (the same call a third time would not be run).
    for n in 0..20 {
        let call = ("current_time".into(), json!({"timezone": format!("Etc/GMT-{}", n % 12)}));
        rig.llm.push_when(MINIMAL, Scripted::ToolCalls(vec![call]));
    }
    rig.llm.push(Scripted::Text("The helper got stuck.".into()));
    rig.send(&message("test", "it", None, false, "loop")).await;
    assert_eq!(next_out(&mut out).await.content, "started");
    assert_eq!(next_out(&mut out).await.content, "The helper got stuck.");
    assert_eq!(subagent_requests(&rig.llm).len(), 15, "the default limit is 15 model calls");
    let record = rig.store.subagents_of("test:it").await.unwrap().remove(0);
    assert_eq!(record.status, SubagentStatus::Failed);
    assert_eq!(record.error.as_deref(), Some("iteration limit of 15 reached"));
    let history = rig.store.history("test:it", 50).await.unwrap();
    let announcement = history.iter().find(|m| m.content.contains("[sub-agent")).unwrap();
    assert!(announcement.content.contains("iteration limit of 15 reached"), "{}", announcement.content);
    rig.stop().await;
}

#[tokio::test]
async fn a_timed_out_subagent_is_announced_as_timed_out() {
    let settings = SubagentSettings { timeout: Duration::from_millis(300), ..SubagentSettings::default() };
    let rig = memory_rig(settings).await;
    let mut out = rig.outbound("test").await;
    rig.llm.push(spawn_call("Think forever.", "slow"));
    rig.llm.push(Scripted::Text("started".into()));
    rig.llm.push_when(MINIMAL, Scripted::Hang);
    rig.llm.push(Scripted::Text("The helper ran out of time.".into()));
    rig.send(&message("test", "slow", None, false, "go")).await;
    assert_eq!(next_out(&mut out).await.content, "started");
    assert_eq!(next_out(&mut out).await.content, "The helper ran out of time.");
    let record = rig.store.subagents_of("test:slow").await.unwrap().remove(0);
    assert_eq!(record.status, SubagentStatus::TimedOut);
    let history = rig.store.history("test:slow", 50).await.unwrap();
    let announcement = history.iter().find(|m| m.content.contains("[sub-agent")).unwrap();
    assert!(announcement.content.contains("\"slow\" you started timed out"), "{}", announcement.content);
    rig.stop().await;
}

/// A record `running` on a worker that died: of two reapers on two store handles, exactly
/// one ends it as lost, and its failure reaches the origin chat through the main agent once.
#[tokio::test]
async fn racing_reapers_report_a_lost_subagent_exactly_once() {
    let start = chrono::Utc::now();
    let clock = ManualClock::new(start);
    let rig = setup_with(BusKind::InProcess, SubagentSettings::default(), clock.clock()).start().await;
    let other = Arc::new(SqliteStore::open(&rig.dir.path().join("s.db")).await.unwrap());
    let mut new = record("dead-1", "telegram:-100123:topic:7", "crashed-worker");
    new.chat = ChatAddress {
        channel: "telegram".into(),
        chat_id: "-100123".into(),
        thread_id: Some("7".into()),
        is_group: true,
    };
    let lease = start + chrono::Duration::seconds(60);
    other.create_subagent(&new, 5, start, lease).await.unwrap();
    assert!(other.start_subagent("dead-1", "crashed-worker", start, lease).await.unwrap());
    let second = SubagentManager::new(other.clone(), rig.bus.clone(), clock.clock(), SubagentSettings::default());

    // Before the lease ran out nothing happens.
    assert_eq!(rig.manager().tick().await.unwrap().lost, 0);
    clock.advance(Duration::from_secs(61));
    rig.llm.push(Scripted::Text("Sorry, the helper for that task crashed; shall I retry?".into()));
    let mut out = rig.outbound("telegram").await;
    let (a, b) = tokio::join!(rig.manager().tick(), second.tick());
    assert_eq!(a.unwrap().lost + b.unwrap().lost, 1);
    let reply = next_out(&mut out).await;
    assert_eq!(reply.content, "Sorry, the helper for that task crashed; shall I retry?");
    assert_eq!((reply.chat_id.as_str(), reply.thread_id.as_deref()), ("-100123", Some("7")));
    let stored = rig.store.subagent("dead-1").await.unwrap().unwrap();
    assert_eq!((stored.status, stored.error.as_deref()), (SubagentStatus::Lost, Some(LOST_ERROR)));
    let history = rig.store.history("telegram:-100123:topic:7", 10).await.unwrap();
    assert!(history[0].content.contains("failed") && history[0].content.contains(LOST_ERROR), "{}", history[0].content);
    // Later passes (and a re-announce pass a lease later) add nothing.
    clock.advance(Duration::from_secs(120));
    let (a, b) = tokio::join!(rig.manager().tick(), second.tick());
    assert_eq!(a.unwrap(), Default::default());
    assert_eq!(b.unwrap(), Default::default());
    nothing_more(&mut out, Duration::from_millis(500)).await;
    rig.stop().await;
}

/// The life of a record in the store: queued → running → completed, cancel requests seen at
/// renewal, and an ended record whose announcement never went out announced by the reaper.
#[tokio::test]
async fn record_life_cycle_and_reannouncement() {
    // Whole milliseconds, as the store keeps them.
    let start = chrono::DateTime::from_timestamp_millis(chrono::Utc::now().timestamp_millis()).unwrap();
    let clock = ManualClock::new(start);
    let rig = setup_with(BusKind::InProcess, SubagentSettings::default(), clock.clock()).start().await;
    let store = rig.store.clone();
    let lease = |at: chrono::DateTime<chrono::Utc>| at + chrono::Duration::seconds(60);
    let mut new = record("life-1", "test:life", "w1");
    new.chat = ChatAddress { channel: "test".into(), chat_id: "life".into(), thread_id: None, is_group: false };
    store.create_subagent(&new, 5, start, lease(start)).await.unwrap();
    let queued = store.subagent("life-1").await.unwrap().unwrap();
    assert_eq!((queued.status, queued.started_at, queued.announced), (SubagentStatus::Queued, None, false));
    // Whom its announcement will act for survives in the record, also across a crash.
    assert_eq!(queued.on_behalf_of.as_deref(), Some("telegram:1"));
    assert!(!store.start_subagent("life-1", "w2", start, lease(start)).await.unwrap(), "another worker's record");
    assert!(store.start_subagent("life-1", "w1", start, lease(start)).await.unwrap());
    assert!(!store.start_subagent("life-1", "w1", start, lease(start)).await.unwrap(), "started once");
    use switchboard::store::subagents::{Renewal, SubagentEnd};
    assert_eq!(store.renew_subagent_lease("life-1", "w1", lease(start)).await.unwrap(), Renewal::Renewed);
    assert_eq!(store.request_subagent_cancel("test:life").await.unwrap(), ["life-1"]);
    assert_eq!(store.renew_subagent_lease("life-1", "w1", lease(start)).await.unwrap(), Renewal::CancelRequested);
    // The worker finished it before it saw the request: the result stands.
    let end = SubagentEnd {
        status: SubagentStatus::Completed,
        result: Some("42".into()),
        error: None,
        usage: Default::default(),
        cost_usd: None,
        billing: None,
    };
    assert!(store.finish_subagent("life-1", "w1", &end, start).await.unwrap());
    assert!(!store.finish_subagent("life-1", "w1", &end, start).await.unwrap(), "ended once");
    assert_eq!(store.renew_subagent_lease("life-1", "w1", lease(start)).await.unwrap(), Renewal::Gone);
    let done = store.subagent("life-1").await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.result.as_deref(), done.finished_at),
        (SubagentStatus::Completed, Some("42"), Some(start))
    );

    // Its worker died before announcing: within a lease of its end nothing is re-sent, after it once.
    let mut out = rig.outbound("test").await;
    rig.llm.push(Scripted::Text("The answer is 42.".into()));
    assert_eq!(rig.manager().tick().await.unwrap().reannounced, 0);
    clock.advance(Duration::from_secs(61));
    assert_eq!(rig.manager().tick().await.unwrap().reannounced, 1);
    assert_eq!(next_out(&mut out).await.content, "The answer is 42.");
    assert!(store.subagent("life-1").await.unwrap().unwrap().announced);
    assert_eq!(rig.manager().tick().await.unwrap().reannounced, 0);
    rig.stop().await;
}

/// Two workers on one store: `/stop` handled by one cancels the sub-agent the other runs, at
/// its next lease renewal.
#[tokio::test]
async fn a_stop_on_one_worker_cancels_a_subagent_running_on_another() {
    let settings = SubagentSettings { lease: Duration::from_millis(600), ..SubagentSettings::default() };
    let rig = memory_rig(settings.clone()).await;
    let other_store = Arc::new(SqliteStore::open(&rig.dir.path().join("s.db")).await.unwrap());
    let other = SubagentManager::new(other_store, rig.bus.clone(), switchboard::clock::system(), settings);
    rig.llm.push(spawn_call("Far away task.", "far"));
    rig.llm.push(Scripted::Text("started".into()));
    rig.llm.push_when("Far away task.", Scripted::Hang);
    let mut out = rig.outbound("test").await;
    rig.send(&message("test", "far", None, false, "go")).await;
    assert_eq!(next_out(&mut out).await.content, "started");
    let id = rig.store.subagents_of("test:far").await.unwrap().remove(0).id;
    assert_eq!(other.cancel_session(&SessionKey::stored("test:far")).await, 1, "counted through the store");
    let store = rig.store.clone();
    eventually("the owner noticed the request", || {
        let (store, id) = (store.clone(), id.clone());
        async move { store.subagent(&id).await.unwrap().unwrap().status == SubagentStatus::Cancelled }
    })
    .await;
    assert_eq!(rig.manager().live_count(), 0);
    nothing_more(&mut out, Duration::from_millis(500)).await;
    rig.stop().await;
}

/// A graceful shutdown records running sub-agents as failed and announces that at once.
#[tokio::test]
async fn shutdown_reports_running_subagents_as_interrupted() {
    let rig = memory_rig(SubagentSettings::default()).await;
    rig.llm.push(spawn_call("Never ending.", "endless"));
    rig.llm.push(Scripted::Text("started".into()));
    rig.llm.push_when(MINIMAL, Scripted::Hang);
    rig.llm.push(Scripted::Text("The helper was interrupted by a restart.".into()));
    let mut out = rig.outbound("test").await;
    rig.send(&message("test", "sd", None, false, "go")).await;
    assert_eq!(next_out(&mut out).await.content, "started");
    rig.llm.wait_for_requests(3, Duration::from_secs(10)).await;
    rig.manager().shutdown().await;
    let record = rig.store.subagents_of("test:sd").await.unwrap().remove(0);
    assert_eq!((record.status, record.error.as_deref()), (SubagentStatus::Failed, Some(SHUTDOWN_ERROR)));
    assert!(record.announced);
    assert_eq!(next_out(&mut out).await.content, "The helper was interrupted by a restart.");
    rig.stop().await;
}

#[tokio::test]
async fn a_subagent_cannot_spawn() {
    use switchboard::tools::{Tool, ToolContext, ToolError};
    let rig = memory_rig(SubagentSettings::default()).await;
    let tool = switchboard::subagents::tool::SpawnTool::new(rig.manager().clone());
    let ctx = ToolContext { run_id: "subagent:abc".into(), agent: "main".into(), ..ToolContext::default() };
    let err = tool.execute(json!({"task": "more"}), &ctx).await.unwrap_err();
    assert!(matches!(&err, ToolError::Refused(why) if why.contains("cannot start sub-agents")), "{err}");
    let ctx = ToolContext { run_id: "r1".into(), agent: "main".into(), ..ToolContext::default() };
    let err = tool.execute(json!({"task": "  "}), &ctx).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(_)), "{err}");
    rig.stop().await;
}

#[tokio::test]
async fn a_new_conversation_cancels_the_sessions_subagents() {
    let rig = memory_rig(SubagentSettings::default()).await;
    let mut out = rig.outbound("test").await;
    rig.llm.push(spawn_call("Old conversation task.", "old"));
    rig.llm.push(Scripted::Text("started".into()));
    rig.llm.push_when(MINIMAL, Scripted::Hang);
    rig.send(&message("test", "new", None, false, "go")).await;
    assert_eq!(next_out(&mut out).await.content, "started");
    rig.llm.wait_for_requests(3, Duration::from_secs(10)).await;
    rig.send(&message("test", "new", None, false, "/new")).await;
    assert_eq!(next_out(&mut out).await.content, "Started a new conversation. Cancelled 1 sub-agent.");
    let store = rig.store.clone();
    eventually("the cancelled record", || {
        let store = store.clone();
        async move { store.subagents_of("test:new").await.unwrap()[0].status == SubagentStatus::Cancelled }
    })
    .await;
    nothing_more(&mut out, Duration::from_millis(500)).await;
    rig.stop().await;
}

/// A sub-agent has no history an overflow could drop: its run shortens its older tool results
/// to fit the model's window, as a turn does, and finishes.
#[tokio::test]
async fn a_subagent_whose_tool_results_outgrow_the_window_shortens_them_and_finishes() {
    // Six reads of 16,000 characters (`tools.max_result_chars`), about 4,000 tokens each, do
    // not fit beside the prompt; the window leaves the parent its tools, which the child gets.
    const WINDOW: u64 = 24_000;
    const FILES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
    let quirks = switchboard_testkit::fake_llm::Quirks {
        context_window: Some(WINDOW as usize),
        ..switchboard_testkit::fake_llm::Quirks::default()
    };
    let mut setup = setup(BusKind::InProcess);
    setup.file_tools = true;
    setup.settings.context.context_window = WINDOW;
    setup.llm = Some(FakeLlm::start_with_quirks(quirks).await);
    let rig = setup.start().await;
    for name in FILES {
        let line = format!("{name} {}\n", "lorem ipsum ".repeat(8));
        std::fs::write(rig.workspace.join(format!("{name}.txt")), line.repeat(20_000 / line.len())).unwrap();
    }
    let mut out = rig.outbound("test").await;
    rig.llm.push(spawn_call("Read the six files.", "reader"));
    rig.llm.push(Scripted::Text("started".into()));
    for name in FILES {
        let call = ("read_file".into(), json!({"path": format!("{name}.txt")}));
        rig.llm.push_when(MINIMAL, Scripted::ToolCalls(vec![call]));
    }
    rig.llm.push_when(MINIMAL, Scripted::Text("All six read.".into()));
    rig.llm.push(Scripted::Text("The helper read them.".into()));
    rig.send(&message("test", "it", None, false, "read them")).await;
    assert_eq!(next_out(&mut out).await.content, "started");
    assert_eq!(next_out(&mut out).await.content, "The helper read them.");
    let record = rig.store.subagents_of("test:it").await.unwrap().remove(0);
    assert_eq!(record.status, SubagentStatus::Completed, "{record:?}");
    let requests = subagent_requests(&rig.llm);
    assert_eq!(requests.len(), FILES.len() + 1, "no call of the sub-agent was refused");
    let last = requests[FILES.len()]["messages"].to_string();
    assert!(last.contains("[shortened to fit the context window:"), "{last}");
    rig.stop().await;
}
