//! `[rate_limits]` through the real worker, on both buses, with a real SQLite store and a
//! scripted model: one member of a group floods it; they get one notice and no more turns,
//! while another member of the same group is answered and the flooder's commands still work.
//! And `worker.max_concurrent_runs`: sessions beyond it wait for a free slot, none is lost.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::{BusKind, Harness, Setup, next_out};
use switchboard::config::{BudgetsConfig, PermissionsConfig, RateLimitsConfig, UsersConfig, WorkerConfig};
use switchboard::users::AccessPolicy;
use switchboard::worker::{QueueSettings, WorkerSettings};
use switchboard_channels::Deliveries;
use switchboard_channels::contract::{InboundMessage, MessageFlags, OutboundKind, OutboundMessage, Sender};
use switchboard_testkit::fake_llm;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

crate::both_buses!(
    a_flooding_member_is_told_once_and_the_others_are_still_answered,
    owners_are_not_limited_by_default,
    claimed_senders_are_not_limited,
    no_more_sessions_run_at_once_than_max_concurrent_runs,
);

/// Guests may start 4 turns a minute. Debouncing is off; messages [`TYPING_GAP`] apart are a
/// turn each and count (a burst merged into one turn counts once: see tests/it/bursts.rs).
fn settings(owners: &[&str]) -> WorkerSettings {
    let users = UsersConfig { owners: owners.iter().map(|o| o.to_string()).collect(), ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    WorkerSettings {
        queue: QueueSettings::from_config(&WorkerConfig { debounce_ms: 0, ..WorkerConfig::default() }),
        rate_limits: RateLimitsConfig { guest: 4, ..RateLimitsConfig::default() },
        access,
        ..WorkerSettings::default()
    }
}

async fn start(kind: BusKind, settings: WorkerSettings) -> (Harness, Deliveries) {
    let llm = FakeLlm::start().await;
    let h = Setup { settings, llm: Some(llm), ..Setup::new(kind) }.start().await;
    let out = h.outbound("test").await;
    (h, out)
}

fn in_group(sender: &str, content: &str) -> InboundMessage {
    let person = Sender { id: sender.into(), name: sender.to_uppercase(), is_bot: false };
    let mut msg = InboundMessage::user("test", "group", person, content);
    msg.is_group = true;
    msg.mentioned = true;
    msg
}

fn direct(sender: &str, content: &str) -> InboundMessage {
    let person = Sender { id: sender.into(), name: sender.to_uppercase(), is_bot: false };
    InboundMessage::user("test", "dm", person, content)
}

/// Everything the worker sends until it is quiet, by the message it answers.
async fn all_out(h: &Harness, out: &mut Deliveries, at_least: usize) -> HashMap<String, OutboundMessage> {
    let mut got = HashMap::new();
    for _ in 0..at_least {
        let msg = next_out(out).await;
        got.insert(msg.in_reply_to.clone().unwrap_or_default(), msg);
    }
    h.nothing_more(out).await;
    got
}

/// Each model request's last user message.
/// Each model request's newest user message: who its context line says wrote it, and its text
/// (`from SAM (id sam), level guest | spam 01`).
fn model_inputs(h: &Harness) -> Vec<String> {
    h.llm
        .requests()
        .iter()
        .map(|request| {
            let line = fake_llm::context_lines(request).pop().flatten().unwrap_or_default();
            let from = line.split(" | ").find(|part| part.starts_with("from ")).unwrap_or_default().to_owned();
            format!("{from} | {}", fake_llm::user_texts(request).pop().unwrap_or_default())
        })
        .collect()
}

/// A person typing fast: further apart than a burst (whose messages make one turn and count
/// once), so each message is a turn of its own.
const TYPING_GAP: Duration = Duration::from_millis(1_200);

async fn a_flooding_member_is_told_once_and_the_others_are_still_answered(kind: BusKind) {
    let (h, mut out) = start(kind, settings(&[])).await;
    let flood: Vec<InboundMessage> = (1..=6).map(|i| in_group("sam", &format!("spam {i:02}"))).collect();
    let ann_first = in_group("ann", "what time is the meeting?");
    let status = in_group("sam", "/status");
    let ann_last = in_group("ann", "and where?");
    for (i, msg) in flood.iter().enumerate() {
        h.send(msg).await;
        if i == 2 {
            h.send(&ann_first).await;
        }
        tokio::time::sleep(TYPING_GAP).await;
    }
    h.send(&status).await;
    h.send(&ann_last).await;

    // Sam's first four, the one notice, Ann's two and the /status answer.
    let got = all_out(&h, &mut out, 8).await;
    assert_eq!(got.len(), 8, "{got:#?}");
    for msg in &flood[..4] {
        assert_eq!(got[&msg.id].kind, OutboundKind::Reply, "{:?}", got[&msg.id]);
    }
    let notice = &got[&flood[4].id];
    assert_eq!(notice.kind, OutboundKind::Notice);
    assert!(
        notice.content.starts_with("SAM, you are sending messages faster than I answer them (at most 4 a minute)."),
        "{}",
        notice.content
    );
    let wait: u64 =
        notice.content.split("will not answer more for ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!((55..=60).contains(&wait), "until Sam's first turn is a minute old: {}", notice.content);
    for msg in &flood[5..] {
        assert!(!got.contains_key(&msg.id), "no answer and no second notice for {}", msg.content);
    }
    assert_eq!(got[&ann_first.id].content, "echo: what time is the meeting?");
    assert_eq!(got[&ann_last.id].content, "echo: and where?");
    assert!(got[&status.id].content.starts_with("Model: "), "{}", got[&status.id].content);

    let inputs = model_inputs(&h);
    // A group chat: each message's context line names its author.
    let named = |who: &str, text: &str| format!("from {} (id {who}), level guest | {text}", who.to_uppercase());
    let mut expected: Vec<String> = (1..=4).map(|i| named("sam", &format!("spam {i:02}"))).collect();
    expected.extend([named("ann", "what time is the meeting?"), named("ann", "and where?")]);
    let mut seen = inputs.clone();
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected, "the model saw Sam's first four turns and Ann's two: {inputs:#?}");
    h.stop().await;
}

/// The same flood from a configured owner: every message is answered (owner = 0, unlimited).
async fn owners_are_not_limited_by_default(kind: BusKind) {
    let (h, mut out) = start(kind, settings(&["test:boss"])).await;
    let messages: Vec<InboundMessage> = (1..=6).map(|i| direct("boss", &format!("task {i}"))).collect();
    for msg in &messages {
        h.send(msg).await;
        tokio::time::sleep(TYPING_GAP).await;
    }
    let got = all_out(&h, &mut out, 6).await;
    for msg in &messages {
        assert_eq!(got[&msg.id].content, format!("echo: {}", msg.content));
    }
    assert_eq!(model_inputs(&h).len(), 6);
    h.stop().await;
}

/// Six chats write at once to a worker that runs two sessions at a time, each turn taking
/// 600 ms: two model calls are in flight at any moment, the other chats wait their turn, and
/// all six are answered (in three waves, so about 1.8 s).
async fn no_more_sessions_run_at_once_than_max_concurrent_runs(kind: BusKind) {
    let llm = FakeLlm::start().await;
    for _ in 0..6 {
        llm.push(Scripted::Delay(Duration::from_millis(600), Box::new(Scripted::Text("done".into()))));
    }
    let settings = WorkerSettings { max_concurrent_runs: 2, ..settings(&[]) };
    let h = Setup { settings, llm: Some(llm), ..Setup::new(kind) }.start().await;
    let mut out = h.outbound("test").await;
    let started = std::time::Instant::now();
    let chats: Vec<InboundMessage> = (1..=6)
        .map(|i| {
            let person = Sender { id: format!("p{i}"), name: format!("P{i}"), is_bot: false };
            InboundMessage::user("test", &format!("chat{i}"), person, "hello")
        })
        .collect();
    for msg in &chats {
        h.send(msg).await;
    }
    h.llm.wait_for_requests(2, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.llm.requests().len(), 2, "only two turns started while two run");
    let got = all_out(&h, &mut out, 6).await;
    for msg in &chats {
        assert_eq!(got[&msg.id].content, "done");
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1800), "three waves of two: {took:?}");
    h.stop().await;
}

/// A client that names its own sender (the API, or another adapter saying so with
/// `flags.claimed_sender`) would escape a per-sender limit by naming a new one: its requests
/// are not counted, and a guest's ninth request in a minute is answered like the first. A
/// message of an earlier API process, without flags, is still read so.
async fn claimed_senders_are_not_limited(kind: BusKind) {
    let h = Setup { settings: settings(&[]), ..Setup::new(kind) }.start().await;
    for channel in ["api", "console"] {
        let mut out = h.outbound(channel).await;
        let person = Sender { id: "client".into(), name: "client".into(), is_bot: false };
        let request = |i: usize| {
            let msg = InboundMessage::user(channel, &format!("c{i}"), person.clone(), &format!("q{i}"));
            let legacy = channel == "api" && i.is_multiple_of(2);
            if legacy { msg } else { InboundMessage { flags: MessageFlags::request(), ..msg } }
        };
        let requests: Vec<InboundMessage> = (1..=9).map(request).collect();
        for msg in &requests {
            h.send(msg).await;
        }
        let got = all_out(&h, &mut out, 9).await;
        for msg in &requests {
            assert_eq!(got[&msg.id].content, format!("echo: {}", msg.content));
        }
    }
    h.stop().await;
}
