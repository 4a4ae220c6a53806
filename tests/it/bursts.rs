//! Bursts and a full queue with the settings users get: a lone message is answered at once; a
//! forwarded conversation arrives as many messages of one sender a few milliseconds apart (as
//! Telegram delivers a forward, each marked as part of a burst), and a busy group can fill a
//! session's queue. On both buses, with a real SQLite store, the
//! default input guard, the default rate limits (a guest's forwarded burst counts as one turn)
//! and a scripted model.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{BusKind, Harness, Setup, next_out};
use switchboard::config::{GuardConfig, RateLimitsConfig, WorkerConfig};
use switchboard::hygiene::Guard;
use switchboard::worker::{QueueSettings, WorkerSettings};
use switchboard_channels::Deliveries;
use switchboard_channels::contract::{InboundMessage, MessageFlags, OutboundKind, OutboundMessage, Sender};
use switchboard_testkit::fake_llm;
use switchboard_testkit::fake_llm::{FakeLlm, Scripted};

crate::both_buses!(
    a_forwarded_burst_is_one_turn_and_no_message_is_lost,
    a_burst_during_an_answer_becomes_one_followup_turn,
    a_burst_still_coming_in_when_an_answer_ends_waits_for_the_rest,
    fifty_unmarked_messages_at_once_all_reach_the_model_in_order,
    a_burst_too_long_for_one_message_is_split_never_cut,
    a_full_queue_says_once_which_messages_it_did_not_keep,
    a_lone_message_starts_at_once_and_commands_never_wait,
    requests_awaiting_their_own_answer_are_never_merged,
);

/// What a worker started from the default configuration gets, input guard included.
fn default_settings(guard: GuardConfig) -> WorkerSettings {
    WorkerSettings {
        queue: QueueSettings::from_config(&WorkerConfig::default()),
        guard: Some(Arc::new(Guard::new(&guard).unwrap())),
        rate_limits: RateLimitsConfig::default(),
        ..WorkerSettings::default()
    }
}

async fn start(kind: BusKind, settings: WorkerSettings, steps: Vec<Scripted>) -> (Harness, Deliveries) {
    let llm = FakeLlm::start().await;
    for step in steps {
        llm.push(step);
    }
    let h = Setup { settings, llm: Some(llm), ..Setup::new(kind) }.start().await;
    let out = h.outbound("test").await;
    (h, out)
}

fn direct(sender: &str, content: &str) -> InboundMessage {
    let person = Sender { id: sender.into(), name: sender.to_uppercase(), is_bot: false };
    InboundMessage::user("test", "dm", person, content)
}

/// A forwarded message, as the Telegram channel marks one: more of its burst may follow.
fn forwarded_message(sender: &str, content: &str) -> InboundMessage {
    let mut msg = direct(sender, content);
    msg.metadata.insert(switchboard_channels::contract::BURST.into(), serde_json::Value::Bool(true));
    msg
}

fn in_group(sender: &str, content: &str) -> InboundMessage {
    let person = Sender { id: sender.into(), name: sender.to_uppercase(), is_bot: false };
    let mut msg = InboundMessage::user("test", "group", person, content);
    msg.is_group = true;
    msg.mentioned = true;
    msg
}

/// The lines of a forwarded conversation, each of a chat message's usual length.
fn forwarded(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("[forwarded {i:02}] Sam: about the trip, I think we should book the {i} o'clock train"))
        .collect()
}

/// Sends `messages` a few milliseconds apart (2 to 8, varying), as a platform delivers a burst.
async fn send_burst(h: &Harness, messages: &[InboundMessage]) {
    for (i, msg) in messages.iter().enumerate() {
        h.send(msg).await;
        tokio::time::sleep(Duration::from_millis(2 + (i as u64 * 5) % 7)).await;
    }
}

/// Each model request's input: the last user message (the turn's text), without its context
/// line.
fn turn_inputs(h: &Harness) -> Vec<String> {
    h.llm.requests().iter().map(|request| fake_llm::user_texts(request).pop().unwrap()).collect()
}

/// Each model request's last user message as sent: its context line and text.
fn turn_messages(h: &Harness) -> Vec<String> {
    h.llm
        .requests()
        .iter()
        .map(|request| {
            let line = fake_llm::context_lines(request).pop().flatten().unwrap_or_default();
            format!("{line}\n\n{}", fake_llm::user_texts(request).pop().unwrap())
        })
        .collect()
}

/// Every line reached the model exactly once, in the order it was sent.
fn assert_all_reached_in_order(inputs: &[String], lines: &[String]) {
    let seen: Vec<&str> =
        inputs.iter().flat_map(|input| input.lines()).filter(|l| l.starts_with("[forwarded")).collect();
    let sent: Vec<&str> = lines.iter().map(String::as_str).collect();
    assert_eq!(seen, sent, "every forwarded message, once, in order");
}

async fn replies(out: &mut Deliveries, count: usize) -> Vec<OutboundMessage> {
    let mut got = Vec::new();
    for _ in 0..count {
        got.push(next_out(out).await);
    }
    got
}

/// The first answer, and every one after it until none came for two seconds.
async fn answers_until_quiet(out: &mut Deliveries) -> Vec<OutboundMessage> {
    let mut answers = vec![next_out(out).await];
    while let Ok(Some(Ok(delivery))) =
        tokio::time::timeout(Duration::from_secs(2), futures_util::StreamExt::next(out)).await
    {
        answers.push(delivery.decode().unwrap());
        delivery.ack().await.unwrap();
    }
    answers
}

async fn a_forwarded_burst_is_one_turn_and_no_message_is_lost(kind: BusKind) {
    let (h, mut out) = start(kind, default_settings(GuardConfig::default()), vec![]).await;
    let lines = forwarded(50);
    let burst: Vec<InboundMessage> = lines.iter().map(|line| forwarded_message("sam", line)).collect();
    send_burst(&h, &burst).await;
    let answers = answers_until_quiet(&mut out).await;
    assert!(answers.iter().all(|a| a.kind == OutboundKind::Reply), "{answers:#?}");
    // The last answer is to the newest message, which carried the (rest of the) burst.
    assert_eq!(answers.last().unwrap().in_reply_to.as_deref(), Some(burst[49].id.as_str()));
    let inputs = turn_inputs(&h);
    // One turn. On NATS, where a message may come a moment late (the worker's check that no
    // older message of the chat is left hands it back for a fraction of a second), two at most.
    let turns = if kind == BusKind::InProcess { 1 } else { 2 };
    assert!(inputs.len() <= turns && inputs.len() == answers.len(), "{inputs:#?}");
    assert_all_reached_in_order(&inputs, &lines);
    h.stop().await;
}

/// The defect users met: during an answer, a burst of 50 got 17 answers and 33 "please wait"
/// notices that were never followed up. Now the burst waits, whole, as one followup turn.
async fn a_burst_during_an_answer_becomes_one_followup_turn(kind: BusKind) {
    let slow = Scripted::Delay(Duration::from_millis(1500), Box::new(Scripted::Text("the plan".into())));
    let (h, mut out) = start(kind, default_settings(GuardConfig::default()), vec![slow]).await;
    let question = direct("sam", "make a plan for the trip");
    h.send(&question).await;
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    let lines = forwarded(50);
    let burst: Vec<InboundMessage> = lines.iter().map(|line| direct("sam", line)).collect();
    send_burst(&h, &burst).await;
    let answers = replies(&mut out, 2).await;
    assert!(answers.iter().all(|a| a.kind == OutboundKind::Reply), "no notice: {answers:#?}");
    assert_eq!(answers[0].in_reply_to.as_deref(), Some(question.id.as_str()));
    assert_eq!(answers[1].in_reply_to.as_deref(), Some(burst[49].id.as_str()));
    h.nothing_more(&mut out).await;
    let inputs = turn_inputs(&h);
    assert_eq!(inputs.len(), 2, "{inputs:#?}");
    assert_all_reached_in_order(&inputs[1..], &lines);
    h.stop().await;
}

/// A merged turn stays within the guard's `max_message_chars`, so the guard never cuts it:
/// a longer burst becomes a few turns, each message whole in one of them.
async fn a_burst_too_long_for_one_message_is_split_never_cut(kind: BusKind) {
    let guard = GuardConfig { max_message_chars: 2000, ..GuardConfig::default() };
    let (h, mut out) = start(kind, default_settings(guard), vec![]).await;
    let lines = forwarded(50); // about 4,000 characters in all
    let burst: Vec<InboundMessage> = lines.iter().map(|line| forwarded_message("sam", line)).collect();
    send_burst(&h, &burst).await;
    let first = next_out(&mut out).await;
    let mut answers = vec![first];
    while let Ok(Some(Ok(delivery))) =
        tokio::time::timeout(Duration::from_secs(3), futures_util::StreamExt::next(&mut out)).await
    {
        answers.push(delivery.decode().unwrap());
        delivery.ack().await.unwrap();
    }
    assert!(answers.iter().all(|a| a.kind == OutboundKind::Reply), "{answers:#?}");
    let inputs = turn_inputs(&h);
    assert!((2..=4).contains(&inputs.len()), "a few turns: {}", inputs.len());
    assert_eq!(answers.len(), inputs.len());
    for input in &inputs {
        assert!(input.chars().count() <= 2000, "{} characters", input.chars().count());
        assert!(!input.contains("[cut"), "{input}");
    }
    assert_all_reached_in_order(&inputs, &lines);
    h.stop().await;
}

/// A busy group: 14 members write while an answer is being written, but only
/// `max_queue_depth` (10) turns may wait. The four not kept get one notice, which quotes them,
/// after the chat went quiet; every kept message is answered.
async fn a_full_queue_says_once_which_messages_it_did_not_keep(kind: BusKind) {
    let slow = Scripted::Delay(Duration::from_millis(2500), Box::new(Scripted::Text("done".into())));
    let (h, mut out) = start(kind, default_settings(GuardConfig::default()), vec![slow]).await;
    h.send(&in_group("ann", "summarise the thread")).await;
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    let members: Vec<InboundMessage> =
        (1..=14).map(|i| in_group(&format!("m{i:02}"), &format!("question {i:02} from me"))).collect();
    send_burst(&h, &members).await;

    let outbound = replies(&mut out, 12).await;
    h.nothing_more(&mut out).await;
    let notices: Vec<&OutboundMessage> = outbound.iter().filter(|m| m.kind == OutboundKind::Notice).collect();
    assert_eq!(notices.len(), 1, "one notice: {outbound:#?}");
    let notice = notices[0];
    assert_eq!(notice.in_reply_to.as_deref(), Some(members[10].id.as_str()), "carried by the first not kept");
    assert!(
        notice.content.starts_with("Too many messages were waiting, so I did not keep 4 of them: "),
        "{}",
        notice.content
    );
    for i in 11..=14 {
        assert!(notice.content.contains(&format!("M{i}: \"question {i} from me\"")), "{}", notice.content);
    }
    for i in 1..=10 {
        assert!(!notice.content.contains(&format!("question {i:02}")), "{}", notice.content);
    }
    assert!(notice.content.ends_with("Send again what you still need answered."), "{}", notice.content);
    // Kept: answered, each in its own turn (different people). Not kept: never seen by the model.
    let inputs = turn_inputs(&h);
    assert_eq!(inputs.len(), 11, "{inputs:#?}");
    let messages = turn_messages(&h);
    for i in 1..=10 {
        // A group chat: the context line names the member who wrote each message.
        let named = |m: &&String| {
            m.contains(&format!("| from M{i:02} (id m{i:02}), level"))
                && m.ends_with(&format!("]\n\nquestion {i:02} from me"))
        };
        assert!(messages.iter().any(|m| named(&m)), "{messages:#?}");
    }
    assert!(!inputs.iter().any(|input| input.contains("question 11")), "{inputs:#?}");
    h.stop().await;
}

/// No fixed wait: a lone message in a quiet chat is answered at once (the model answers at
/// once here). A forward waits a moment for the rest of its burst, and `/stop` during that
/// moment drops it, answered at once.
async fn a_lone_message_starts_at_once_and_commands_never_wait(kind: BusKind) {
    let (h, mut out) = start(kind, default_settings(GuardConfig::default()), vec![]).await;
    let sent = Instant::now();
    h.send(&direct("sam", "hello")).await;
    assert_eq!(next_out(&mut out).await.content, "echo: hello");
    let took = sent.elapsed();
    assert!(took < Duration::from_millis(300), "answered after {took:?}");

    let burst: Vec<InboundMessage> = ["wait", "no", "actually"].iter().map(|t| forwarded_message("sam", t)).collect();
    send_burst(&h, &burst).await;
    let sent = Instant::now();
    h.send(&direct("sam", "/stop")).await;
    let stopped = next_out(&mut out).await;
    assert!(sent.elapsed() < Duration::from_millis(200), "/stop took {:?}", sent.elapsed());
    assert_eq!(stopped.content, "Nothing to stop. Dropped 3 waiting messages.");
    h.nothing_more(&mut out).await;
    assert_eq!(h.llm.requests().len(), 1);
    h.stop().await;
}

/// A paste the client splits into twenty messages 60 ms apart, begun during an answer and
/// still coming in when it ends: the followup turn waits for its end (a quarter second of
/// quiet), so the paste is one turn, not the part that was there and then the rest.
async fn a_burst_still_coming_in_when_an_answer_ends_waits_for_the_rest(kind: BusKind) {
    let slow = Scripted::Delay(Duration::from_millis(600), Box::new(Scripted::Text("the plan".into())));
    let (h, mut out) = start(kind, default_settings(GuardConfig::default()), vec![slow]).await;
    let question = direct("sam", "make a plan for the trip");
    h.send(&question).await;
    h.llm.wait_for_requests(1, Duration::from_secs(5)).await;
    let lines = forwarded(20);
    let burst: Vec<InboundMessage> = lines.iter().map(|line| direct("sam", line)).collect();
    for msg in &burst {
        h.send(msg).await;
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let answers = replies(&mut out, 2).await;
    assert_eq!(answers[0].in_reply_to.as_deref(), Some(question.id.as_str()));
    assert_eq!(answers[1].in_reply_to.as_deref(), Some(burst[19].id.as_str()), "{answers:#?}");
    h.nothing_more(&mut out).await;
    let inputs = turn_inputs(&h);
    assert_eq!(inputs.len(), 2, "{inputs:#?}");
    assert_all_reached_in_order(&inputs[1..], &lines);
    h.stop().await;
}

/// Fifty messages of one person a few milliseconds apart, unmarked (a paste, a bot of theirs),
/// with a model that takes a moment: the first starts at once, the rest wait together and are
/// answered in one more turn; every word reaches the model, in order, and nobody is told to
/// wait.
async fn fifty_unmarked_messages_at_once_all_reach_the_model_in_order(kind: BusKind) {
    let model = |text: &str| Scripted::Delay(Duration::from_millis(300), Box::new(Scripted::Text(text.into())));
    let steps = (0..5).map(|n| model(&format!("answer {n}"))).collect();
    let (h, mut out) = start(kind, default_settings(GuardConfig::default()), steps).await;
    let lines = forwarded(50);
    let burst: Vec<InboundMessage> = lines.iter().map(|line| direct("sam", line)).collect();
    send_burst(&h, &burst).await;
    let answers = answers_until_quiet(&mut out).await;
    assert!(answers.iter().all(|a| a.kind == OutboundKind::Reply), "no notice: {answers:#?}");
    // In a turn or a few: the first may start alone, before the second is there; what comes
    // while a turn runs waits for the next (NATS hands messages over one by one, the
    // in-process bus at once).
    assert!((1..=5).contains(&answers.len()), "{answers:#?}");
    assert_eq!(answers.last().unwrap().in_reply_to.as_deref(), Some(burst[49].id.as_str()));
    let inputs = turn_inputs(&h);
    assert_eq!(inputs.len(), answers.len(), "{inputs:#?}");
    assert_all_reached_in_order(&inputs, &lines);
    h.stop().await;
}

/// A request/response adapter's client waits for the answer to each of its messages
/// (`flags.awaits_reply`, as the API sets it): a burst of them is a turn each, every one
/// answered, never merged into one answer for the newest.
async fn requests_awaiting_their_own_answer_are_never_merged(kind: BusKind) {
    let (h, mut out) = start(kind, default_settings(GuardConfig::default()), vec![]).await;
    let lines = forwarded(5);
    let requests: Vec<InboundMessage> = lines
        .iter()
        .map(|line| InboundMessage { flags: MessageFlags::request(), ..forwarded_message("sam", line) })
        .collect();
    send_burst(&h, &requests).await;
    let mut answered: Vec<String> =
        replies(&mut out, requests.len()).await.into_iter().filter_map(|reply| reply.in_reply_to).collect();
    answered.sort();
    let mut sent: Vec<String> = requests.iter().map(|msg| msg.id.clone()).collect();
    sent.sort();
    assert_eq!(answered, sent, "one answer for each request");
    assert_eq!(turn_inputs(&h).len(), requests.len(), "a turn each");
    h.stop().await;
}
