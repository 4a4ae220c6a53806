//! Chat commands and busy sessions, as a user sees them: the in-process worker with the
//! in-process bus, a real SQLite store and a scripted model.

use std::time::{Duration, Instant};

use crate::common::{BusKind, Harness, Setup, start};
use bytes::Bytes;
use futures_util::StreamExt;
use switchboard::config::{BudgetsConfig, PermissionsConfig, QueueMode, UsersConfig};
use switchboard::store::RunKind;
use switchboard::users::AccessPolicy;
use switchboard::worker::{QueueSettings, WorkerSettings};
use switchboard_channels::contract::{InboundMessage, OutboundKind, OutboundMessage, Sender};
use switchboard_channels::subject::Flow;
use switchboard_channels::{BusExt, Deliveries};
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

fn msg(chat: &str, content: &str) -> InboundMessage {
    from("u1", chat, content)
}

fn from(sender: &str, chat: &str, content: &str) -> InboundMessage {
    let name = sender.to_uppercase();
    InboundMessage::user("test", chat, Sender { id: sender.into(), name, is_bot: false }, content)
}

fn slow(millis: u64, text: &str) -> Scripted {
    Scripted::Delay(Duration::from_millis(millis), Box::new(Scripted::Text(text.into())))
}

async fn next_reply(out: &mut Deliveries) -> OutboundMessage {
    let delivery = tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("no reply").unwrap().unwrap();
    let reply = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    reply
}

async fn no_more_replies(out: &mut Deliveries, wait: Duration) {
    if let Ok(Some(Ok(d))) = tokio::time::timeout(wait, out.next()).await {
        panic!("unexpected reply {:?}", String::from_utf8_lossy(&d.payload));
    }
}

/// The user messages of the `i`th model request (without their context lines).
fn user_texts(h: &Harness, i: usize) -> Vec<String> {
    switchboard_testkit::fake_llm::user_texts(&h.llm.requests()[i])
}

fn queue(mode: QueueMode) -> WorkerSettings {
    WorkerSettings {
        queue: QueueSettings { mode, collect_window: Duration::from_millis(300), ..Default::default() },
        ..Default::default()
    }
}

async fn harness(settings: WorkerSettings, steps: Vec<Scripted>) -> (Harness, Deliveries) {
    let llm = FakeLlm::start().await;
    for step in steps {
        llm.push(step);
    }
    let h = start(settings, llm).await;
    let out = h.bus.outbound("test").await.unwrap();
    (h, out)
}

#[tokio::test]
async fn stop_cancels_the_running_turn_at_once_and_drops_what_waits() {
    let (h, mut out) = harness(WorkerSettings::default(), vec![slow(5000, "too late")]).await;
    h.bus.publish_inbound(&msg("s", "write an essay")).await.unwrap();
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    h.bus.publish_inbound(&msg("s", "and another")).await.unwrap();
    h.bus.publish_inbound(&msg("s", "and a third")).await.unwrap();
    let started = Instant::now();
    h.bus.publish_inbound(&msg("s", "/stop")).await.unwrap();
    let answer = next_reply(&mut out).await;
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert_eq!(answer.kind, OutboundKind::Notice);
    assert_eq!(answer.content, "Stopped. Dropped 2 waiting messages.");
    // The next message works, and sees none of the stopped turn.
    h.bus.publish_inbound(&msg("s", "hello again")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "echo: hello again");
    assert_eq!(user_texts(&h, 1), ["hello again"]);
    no_more_replies(&mut out, Duration::from_millis(500)).await;
    let runs = h.store.recent_runs(10).await.unwrap();
    let stopped = runs.iter().find(|r| r.error.as_deref() == Some("stopped")).expect("the stopped run");
    assert_eq!(stopped.status.as_str(), "failed");
}

#[tokio::test]
async fn status_is_answered_while_a_run_is_active() {
    let (h, mut out) = harness(WorkerSettings::default(), vec![slow(2500, "done")]).await;
    h.bus.publish_inbound(&msg("st", "slow one")).await.unwrap();
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    h.bus.publish_inbound(&msg("st", "queued")).await.unwrap();
    h.bus.publish_inbound(&msg("st", "/status@switchboard_bot")).await.unwrap();
    let status = next_reply(&mut out).await;
    assert_eq!(status.kind, OutboundKind::Notice);
    for line in ["Model: fake-model", "Running: yes", "Messages waiting: 1", "Compactions: 0", "Queue mode: followup"] {
        assert!(status.content.contains(line), "{line} not in {}", status.content);
    }
    assert_eq!(next_reply(&mut out).await.content, "done");
    assert_eq!(next_reply(&mut out).await.content, "echo: queued");
}

/// After two turns against a model server with a prompt cache: the last turn's input with the
/// share the cache served, and the conversation as the next message will send it again (what
/// the last call read and wrote), not the running total.
#[tokio::test]
async fn status_shows_the_cached_share_and_what_the_next_message_sends_again() {
    // The owner's prompt of a fresh install: long enough for the provider to cache.
    let users = UsersConfig { owners: vec!["test:u1".into()], ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    let settings = WorkerSettings { access, ..WorkerSettings::default() };
    let h = Setup { settings, file_tools: true, ..Setup::new(BusKind::InProcess) }.start().await;
    switchboard::workspace::init::write_workspace(&h.workspace).unwrap();
    let mut out = h.bus.outbound("test").await.unwrap();
    for text in ["what should we cook tonight?", "and for dessert?"] {
        h.bus.publish_inbound(&msg("cache", text)).await.unwrap();
        next_reply(&mut out).await;
    }
    let mut turns = h.store.recent_runs(10).await.unwrap();
    turns.retain(|run| run.kind == RunKind::Turn);
    let last = &turns[0].usage;
    assert!(last.cache_read_tokens > 0, "the second turn was not served from the cache: {last:?}");
    h.bus.publish_inbound(&msg("cache", "/status")).await.unwrap();
    let status = next_reply(&mut out).await.content;
    let last_turn = format!(
        "Last turn: {} tokens in ({}% from the provider's cache), {} out",
        last.input_tokens,
        last.cached_percent(),
        last.output_tokens
    );
    assert!(status.contains(&last_turn), "{last_turn:?} not in {status}");
    let sent_again = format!(
        "Conversation: about {} tokens, sent again with your next message",
        last.input_tokens + last.output_tokens
    );
    assert!(status.contains(&sent_again), "{sent_again:?} not in {status}");
    let input: u64 = turns.iter().map(|run| run.usage.input_tokens).sum();
    assert!(status.contains(&format!("Since the conversation started: {input} tokens in (")), "{status}");
    h.stop().await;
}

#[tokio::test]
async fn new_starts_a_conversation_without_earlier_history() {
    let (h, mut out) = harness(WorkerSettings::default(), vec![]).await;
    h.bus.publish_inbound(&msg("n", "remember 42")).await.unwrap();
    next_reply(&mut out).await;
    h.bus.publish_inbound(&msg("n", "/new")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "Started a new conversation.");
    h.bus.publish_inbound(&msg("n", "what number?")).await.unwrap();
    next_reply(&mut out).await;
    let requests = h.llm.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1]["messages"].as_array().unwrap().len(), 2, "{}", requests[1]["messages"]);
    assert_eq!(user_texts(&h, 1), ["what number?"]);
}

#[tokio::test]
async fn a_redelivered_command_is_not_executed_twice() {
    let (h, mut out) = harness(WorkerSettings::default(), vec![]).await;
    h.bus.publish_inbound(&msg("r", "before")).await.unwrap();
    next_reply(&mut out).await;
    let new = msg("r", "/new");
    let payload = Bytes::from(serde_json::to_vec(&new).unwrap());
    h.bus.publish_raw(Flow::In, "test", "r", None, payload.clone()).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "Started a new conversation.");
    h.bus.publish_inbound(&msg("r", "after")).await.unwrap();
    next_reply(&mut out).await;
    // The same /new again: already answered, so it must not archive "after" away.
    h.bus.publish_raw(Flow::In, "test", "r", None, payload).await.unwrap();
    h.bus.publish_inbound(&msg("r", "later")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "echo: later");
    no_more_replies(&mut out, Duration::from_millis(300)).await;
    assert_eq!(user_texts(&h, 2), ["after", "later"]);
}

#[tokio::test]
async fn a_guest_cannot_stop_a_group_run() {
    let (h, mut out) = harness(WorkerSettings::default(), vec![slow(800, "finished")]).await;
    let mut first = from("alice", "g", "long task");
    first.is_group = true;
    h.bus.publish_inbound(&first).await.unwrap();
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    let mut stop = from("mallory", "g", "/stop");
    stop.is_group = true;
    h.bus.publish_inbound(&stop).await.unwrap();
    let refused = next_reply(&mut out).await;
    assert!(refused.content.starts_with("Only members with the user level"), "{}", refused.content);
    assert_eq!(next_reply(&mut out).await.content, "finished");
}

#[tokio::test]
async fn followup_without_debouncing_answers_each_members_message_in_order() {
    let settings = WorkerSettings {
        queue: QueueSettings { debounce: Duration::ZERO, ..Default::default() },
        ..Default::default()
    };
    let (h, mut out) = harness(settings, vec![slow(500, "one")]).await;
    // Three people at once: a turn each (one person's messages at once would be one burst).
    for (sender, text) in [("u1", "m1"), ("u2", "m2"), ("u3", "m3")] {
        h.bus.publish_inbound(&from(sender, "fo", text)).await.unwrap();
    }
    let replies: Vec<String> = [(); 3].iter().map(|_| String::new()).collect();
    let mut got = replies;
    for slot in &mut got {
        *slot = next_reply(&mut out).await.content;
    }
    assert_eq!(got, ["one", "echo: m2", "echo: m3"]);
    assert_eq!(h.llm.requests().len(), 3);
}

#[tokio::test]
async fn collect_merges_quick_messages_into_one_turn() {
    let (h, mut out) = harness(queue(QueueMode::Collect), vec![]).await;
    h.bus.publish_inbound(&from("ann", "c", "hi")).await.unwrap();
    h.bus.publish_inbound(&from("bob", "c", "are you there")).await.unwrap();
    h.bus.publish_inbound(&from("ann", "c", "hello?")).await.unwrap();
    let reply = next_reply(&mut out).await;
    assert_eq!(reply.content, "echo: ANN: hi\nBOB: are you there\nANN: hello?");
    no_more_replies(&mut out, Duration::from_millis(500)).await;
    assert_eq!(h.llm.requests().len(), 1);
}

#[tokio::test]
async fn interrupt_cancels_and_answers_only_the_newest() {
    let (h, mut out) = harness(queue(QueueMode::Interrupt), vec![slow(5000, "too late")]).await;
    h.bus.publish_inbound(&msg("i", "first")).await.unwrap();
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    h.bus.publish_inbound(&msg("i", "second")).await.unwrap();
    h.bus.publish_inbound(&msg("i", "third")).await.unwrap();
    let started = Instant::now();
    assert_eq!(next_reply(&mut out).await.content, "echo: third");
    assert!(started.elapsed() < Duration::from_secs(3));
    no_more_replies(&mut out, Duration::from_millis(500)).await;
    assert_eq!(h.llm.requests().len(), 2);
}

#[tokio::test]
async fn drop_answers_the_running_turn_and_says_once_what_it_did_not_keep() {
    let (h, mut out) = harness(queue(QueueMode::Drop), vec![slow(1500, "the essay")]).await;
    h.bus.publish_inbound(&msg("d", "write an essay")).await.unwrap();
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    h.bus.publish_inbound(&msg("d", "and another thing")).await.unwrap();
    h.bus.publish_inbound(&msg("d", "hurry up")).await.unwrap();
    let mut replies = [next_reply(&mut out).await, next_reply(&mut out).await];
    replies.sort_by_key(|reply| reply.kind == OutboundKind::Notice);
    assert_eq!(replies[0].content, "the essay");
    let notice = &replies[1];
    assert_eq!(notice.kind, OutboundKind::Notice);
    assert!(notice.content.starts_with("I was busy answering"), "{}", notice.content);
    assert!(notice.content.contains("\"and another thing\", \"hurry up\""), "{}", notice.content);
    no_more_replies(&mut out, Duration::from_millis(500)).await;
    assert_eq!(h.llm.requests().len(), 1, "a dropped message reached the model");
}

#[tokio::test]
async fn queue_mode_is_set_per_session_by_command() {
    let (h, mut out) = harness(WorkerSettings::default(), vec![]).await;
    h.bus.publish_inbound(&msg("q", "/queue collect")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "Queue mode set to collect.");
    h.bus.publish_inbound(&msg("q", "/queue")).await.unwrap();
    assert!(next_reply(&mut out).await.content.starts_with("Queue mode: collect."));
    h.bus.publish_inbound(&msg("q", "/queue drop")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "Queue mode set to drop.");
    h.bus.publish_inbound(&msg("q", "/help")).await.unwrap();
    let help = next_reply(&mut out).await.content;
    assert!(help.contains("/stop") && help.contains("/reset: the same as /new"), "{help}");
}

#[tokio::test]
async fn steer_adds_a_message_to_the_running_turn() {
    let steps = vec![
        Scripted::Delay(
            Duration::from_millis(800),
            Box::new(Scripted::ToolCalls(vec![("current_time".into(), serde_json::json!({}))])),
        ),
        Scripted::Text("answer with the detail".into()),
    ];
    let (h, mut out) = harness(queue(QueueMode::Steer), steps).await;
    h.bus.publish_inbound(&msg("sr", "plan a trip")).await.unwrap();
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    h.bus.publish_inbound(&msg("sr", "make it by train")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "answer with the detail");
    no_more_replies(&mut out, Duration::from_millis(500)).await;
    assert_eq!(h.llm.requests().len(), 2);
    assert_eq!(user_texts(&h, 1), ["plan a trip", "make it by train"]);
}

#[tokio::test]
async fn steer_after_the_last_model_call_becomes_a_followup() {
    let (h, mut out) = harness(queue(QueueMode::Steer), vec![slow(800, "first answer")]).await;
    h.bus.publish_inbound(&msg("sf", "question")).await.unwrap();
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    h.bus.publish_inbound(&msg("sf", "one more thing")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "first answer");
    assert_eq!(next_reply(&mut out).await.content, "echo: one more thing");
}

#[tokio::test]
async fn debounce_merges_one_senders_rapid_messages() {
    let settings = WorkerSettings {
        queue: QueueSettings { debounce: Duration::from_millis(300), ..Default::default() },
        ..Default::default()
    };
    let (h, mut out) = harness(settings, vec![]).await;
    h.bus.publish_inbound(&msg("d", "so")).await.unwrap();
    h.bus.publish_inbound(&msg("d", "about that")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "echo: so\nabout that");
    no_more_replies(&mut out, Duration::from_millis(500)).await;
    assert_eq!(h.llm.requests().len(), 1);
}

#[tokio::test]
async fn verbose_sends_a_progress_note_as_each_tool_starts_until_turned_off() {
    let call = || Scripted::ToolCalls(vec![("current_time".into(), serde_json::json!({}))]);
    let steps = vec![call(), Scripted::Text("it is noon".into()), call(), Scripted::Text("still noon".into())];
    let (h, mut out) = harness(WorkerSettings::default(), steps).await;
    h.bus.publish_inbound(&msg("v", "/verbose")).await.unwrap();
    assert!(next_reply(&mut out).await.content.starts_with("Progress messages while tools run: off."));
    h.bus.publish_inbound(&msg("v", "/verbose on")).await.unwrap();
    assert!(next_reply(&mut out).await.content.starts_with("Progress messages on"));

    h.bus.publish_inbound(&msg("v", "what time is it?")).await.unwrap();
    let progress = next_reply(&mut out).await;
    assert_eq!((progress.kind, progress.content.as_str()), (OutboundKind::Progress, "⏳ using current_time…"));
    assert_eq!(next_reply(&mut out).await.content, "it is noon");

    h.bus.publish_inbound(&msg("v", "/verbose off")).await.unwrap();
    assert_eq!(next_reply(&mut out).await.content, "Progress messages off.");
    h.bus.publish_inbound(&msg("v", "and now?")).await.unwrap();
    let reply = next_reply(&mut out).await;
    assert_eq!((reply.kind, reply.content.as_str()), (OutboundKind::Reply, "still noon"));
}
