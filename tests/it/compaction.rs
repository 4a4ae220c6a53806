//! Compaction through the worker against the scripted model: the memory flush (file tools
//! only, MEMORY.md written, reply never delivered), the summary call, the shorter history of
//! the next turn, and a failed summary that leaves everything as it was.

use std::time::Duration;

use crate::common::{BusKind, Logs, Setup};
use futures_util::StreamExt;
use serde_json::{Value, json};
use switchboard::config::{BudgetsConfig, CompactionConfig, PermissionsConfig, UsersConfig};
use switchboard::context::ContextSettings;
use switchboard::context::compaction::{SUMMARY_INSTRUCTION, SUMMARY_PROMPT, flush_prompt};
use switchboard::store::{HistorySummary, Store};
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard::workspace::memory::MemoryScope;
use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
use switchboard_channels::{BusExt, Deliveries};
use switchboard_testkit::fake_llm::Scripted;

const SESSION: &str = "test:chat";

/// `u1` is the owner, so this direct chat's memory is `MEMORY.md` (docs/memory.md).
fn settings() -> WorkerSettings {
    let compaction = CompactionConfig { max_messages: 5, keep_recent_messages: 2, ..CompactionConfig::default() };
    let users = UsersConfig { owners: vec!["test:u1".into()], ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    WorkerSettings {
        context: ContextSettings { compaction, ..ContextSettings::default() },
        access,
        ..WorkerSettings::default()
    }
}

fn msg(content: &str) -> InboundMessage {
    InboundMessage::user("test", "chat", Sender { id: "u1".into(), name: "U".into(), is_bot: false }, content)
}

async fn turn(h: &crate::common::Harness, out: &mut Deliveries, content: &str) -> OutboundMessage {
    h.bus.publish_inbound(&msg(content)).await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("no reply").unwrap().unwrap();
    let reply = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    reply
}

fn messages(request: &Value) -> &Vec<Value> {
    request["messages"].as_array().unwrap()
}

/// A message's text without the context line of a user message.
fn text_of(message: &Value) -> &str {
    switchboard_testkit::fake_llm::without_context_line(message["content"].as_str().unwrap_or(""))
}

/// A summary call, in either form: after the turn (its instruction last) or detached (its own
/// system prompt first).
fn is_summary(request: &Value) -> bool {
    let last = messages(request).last().map_or("", text_of);
    last.starts_with(SUMMARY_INSTRUCTION) || messages(request)[0]["content"] == SUMMARY_PROMPT
}

/// The text of the detached summary call's conversation.
fn detached_text(request: &Value) -> Option<&str> {
    (messages(request)[0]["content"] == SUMMARY_PROMPT).then(|| text_of(&messages(request)[1]))
}

fn tool_names(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<String> = tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect();
    names.sort();
    names
}

/// The owner's chat after two exchanges: four messages, below `max_messages` (5), so the
/// next turn leads to a compaction.
async fn two_turns_in(texts: [&str; 2]) -> (crate::common::Harness, Deliveries) {
    let h = Setup { settings: settings(), file_tools: true, ..Setup::new(BusKind::InProcess) }.start().await;
    let mut out = h.bus.outbound("test").await.unwrap();
    for text in texts {
        turn(&h, &mut out, text).await;
    }
    (h, out)
}

async fn wait_for_summary(store: &dyn Store) -> Option<(String, u32)> {
    for _ in 0..100 {
        if let Some(summary) = store.session_summary(SESSION).await.unwrap() {
            return Some((summary.text, summary.compactions));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[tokio::test]
async fn a_long_session_is_flushed_to_memory_then_summarised() {
    let logs = Logs::install();
    // Two turns (four messages): below max_messages, the model just echoes.
    let (h, mut out) = two_turns_in(["one", "two"]).await;
    assert_eq!(h.llm.requests().len(), 2, "no compaction yet");

    h.llm.push(Scripted::Text("third answer".into()));
    // The flush is offered the turn's tools, but may call only the file tools.
    h.llm.push(Scripted::ToolCalls(vec![("current_time".into(), json!({}))]));
    let memory = json!({"path": "MEMORY.md", "content": "- The user likes green tea.\n"});
    h.llm.push(Scripted::ToolCalls(vec![("write_file".into(), memory)]));
    h.llm.push(Scripted::Text("NO_REPLY".into()));
    h.llm.push(Scripted::Text("The user likes green tea; nothing is open.".into()));
    assert_eq!(turn(&h, &mut out, "three").await.content, "third answer");
    let requests = h.llm.wait_for_requests(7, Duration::from_secs(10)).await;
    assert_eq!(requests.len(), 7, "turn, three flush calls, summary");

    // The flush starts as the turn did (its system prompt, its tools, its history, its answer),
    // so a provider's cache serves all of that; then the flush instruction.
    let (turn_request, flush) = (&requests[2], &requests[3]);
    assert_eq!(tool_names(flush), tool_names(turn_request));
    let sent = messages(turn_request);
    assert_eq!(messages(flush)[..sent.len()], sent[..], "the flush repeats the turn's request");
    assert_eq!(messages(flush)[sent.len()]["content"], "third answer");
    assert_eq!(messages(flush).last().unwrap()["content"], flush_prompt(&MemoryScope::Owner));
    let refused = messages(&requests[4]).last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(refused.contains("`current_time` is not available"), "{refused}");
    assert_eq!(tool_names(&requests[5]), tool_names(flush));
    // The summary: one call that starts as the flush did, so the cache serves it too, up to
    // the messages the compaction keeps; then the instruction.
    let summary = &requests[6];
    assert_eq!(tool_names(summary), tool_names(flush));
    let (instruction, conversation) = messages(summary).split_last().unwrap();
    assert_eq!(conversation[..], messages(flush)[..conversation.len()], "the summary repeats the flush's start");
    assert!(text_of(instruction).starts_with(SUMMARY_INSTRUCTION), "{instruction}");
    let said: Vec<&str> = conversation.iter().skip(1).map(text_of).collect();
    assert_eq!(said, ["one", "echo: one", "two", "echo: two"], "the most recent messages stay verbatim");

    let memory = std::fs::read_to_string(h.workspace.join("MEMORY.md")).unwrap();
    assert_eq!(memory, "- The user likes green tea.\n");
    let (saved, count) = wait_for_summary(h.store.as_ref()).await.expect("no summary saved");
    assert_eq!((saved.as_str(), count), ("The user likes green tea; nothing is open.", 1));
    let flushes = logs.with_message("memory flush done");
    assert_eq!(flushes.len(), 1, "{flushes:?}");
    assert_eq!(flushes[0].field("wrote"), Some("true"), "{flushes:?}");

    // The next turn starts with the summary and carries only the recent messages.
    assert_eq!(turn(&h, &mut out, "four").await.content, "echo: four");
    let next = &h.llm.requests()[7];
    // The first message is the run's system prompt (with the operator's "test" in it), the
    // summary at its end: one system message, as strict chat templates require.
    let sent: Vec<(&str, &str)> = messages(next).iter().map(|m| (m["role"].as_str().unwrap(), text_of(m))).collect();
    assert_eq!(sent[0].0, "system");
    assert!(sent[0].1.contains("# Operator instructions\n\ntest"), "{}", sent[0].1);
    let summary = "\n\nSummary of the earlier conversation: The user likes green tea; nothing is open.";
    assert!(sent[0].1.ends_with(summary), "{}", sent[0].1);
    assert_eq!(sent[1..], [("user", "three"), ("assistant", "third answer"), ("user", "four")]);
    // The flush and the summary are runs of the session, after the turn that led to them.
    let runs = h.store.recent_runs(10).await.unwrap();
    let kinds: Vec<&str> = runs.iter().rev().map(|run| run.kind.as_str()).collect();
    assert_eq!(kinds, ["turn", "turn", "turn", "memory_flush", "summary", "turn"]);
    let flush = &runs[2];
    assert!(flush.usage.input_tokens > 0 && flush.iterations == 3, "{flush:?}");
    // The flush's NO_REPLY never reached the chat, and the transcript kept every row.
    assert!(tokio::time::timeout(Duration::from_millis(300), out.next()).await.is_err(), "unexpected delivery");
}

/// A flush whose write the file tools refuse (outside the workspace) wrote nothing, and the
/// log says so: an operator reading "wrote=true" would look for a memory that is not there.
#[tokio::test]
async fn a_flush_whose_write_was_refused_logs_that_it_wrote_nothing() {
    let logs = Logs::install();
    let (h, mut out) = two_turns_in(["one", "two"]).await;
    h.llm.push(Scripted::Text("third answer".into()));
    let outside = json!({"path": "../MEMORY.md", "content": "- The user likes green tea.\n"});
    h.llm.push(Scripted::ToolCalls(vec![("write_file".into(), outside)]));
    h.llm.push(Scripted::Text("NO_REPLY".into()));
    h.llm.push(Scripted::Text("The user likes green tea.".into()));
    assert_eq!(turn(&h, &mut out, "three").await.content, "third answer");
    wait_for_summary(h.store.as_ref()).await.expect("no summary saved");

    let refusal = &h.llm.requests()[4];
    let result = messages(refusal).last().unwrap()["content"].as_str().unwrap_or_default().to_owned();
    assert!(result.starts_with("error:"), "the write was refused: {result}");
    assert!(!h.workspace.join("../MEMORY.md").exists());
    let flushes = logs.with_message("memory flush done");
    assert_eq!(flushes.len(), 1, "{flushes:?}");
    assert_eq!(flushes[0].field("wrote"), Some("false"), "{flushes:?}");
}

#[tokio::test]
async fn a_failed_summary_leaves_history_and_summary_as_they_were() {
    let (h, mut out) = two_turns_in(["one", "two"]).await;
    h.llm.push(Scripted::Text("third answer".into()));
    h.llm.push(Scripted::Text("NO_REPLY".into()));
    h.llm.push(Scripted::server_error());
    turn(&h, &mut out, "three").await;
    assert_eq!(h.llm.wait_for_requests(5, Duration::from_secs(10)).await.len(), 5);
    // The mark is cleared once the failure is handled: a new compaction may start.
    let mut free = false;
    for _ in 0..100 {
        if h.store.begin_compaction(SESSION).await.unwrap() {
            free = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(free, "the compaction mark was never cleared");
    h.store.abort_compaction(SESSION).await.unwrap();
    assert_eq!(h.store.session_summary(SESSION).await.unwrap(), None);
    assert_eq!(h.store.history(SESSION, 100).await.unwrap().len(), 6);

    h.llm.push(Scripted::Text("fourth answer".into()));
    turn(&h, &mut out, "four").await;
    let next = &h.llm.requests()[5];
    let sent: Vec<&str> = messages(next).iter().skip(1).map(text_of).collect();
    assert_eq!(sent, ["one", "echo: one", "two", "echo: two", "three", "third answer", "four"]);
}

/// Every later turn carries the summary: it must not grow with each compaction, even when the
/// model would write more (the fake echoes all it is asked to summarise, previous summary included).
#[tokio::test]
async fn the_summary_stays_within_its_bound_however_often_the_session_is_compacted() {
    let mut settings = settings();
    settings.context.compaction.summary_max_tokens = 50;
    settings.queue.debounce = Duration::ZERO;
    let h = Setup { settings, ..Setup::new(BusKind::InProcess) }.start().await;
    let mut out = h.bus.outbound("test").await.unwrap();
    let long = "a long message that the summary would repeat word for word. ".repeat(20);
    let mut compactions = 0;
    for n in 0..12 {
        turn(&h, &mut out, &format!("{n}: {long}")).await;
        // A compaction runs after its turn's reply, before the session's next turn.
        let saved = h.store.session_summary(SESSION).await.unwrap();
        if let Some((summary, count)) = saved.map(|s| (s.text, s.compactions)).filter(|(_, count)| *count > compactions)
        {
            compactions = count;
            assert!(summary.chars().count() <= 200, "compaction {count}: {} chars", summary.chars().count());
        }
    }
    assert!(compactions >= 2, "only {compactions} compactions");
    let summary_calls: Vec<_> = h.llm.requests().into_iter().filter(is_summary).collect();
    assert!(!summary_calls.is_empty());
    for call in summary_calls {
        assert_eq!(call["max_tokens"], 50, "the summary call asks for at most the bound");
        let asked = text_of(messages(&call).last().unwrap());
        assert!(asked.ends_with("Write at most 37 words."), "the summariser is told the bound: {asked}");
    }
}

/// `/compact` summarises the conversation now, below every threshold, keeping the newest
/// messages; on a short conversation it says there is nothing to do.
#[tokio::test]
async fn compact_summarises_now_and_says_when_there_is_nothing_to_do() {
    let compaction = CompactionConfig { max_messages: 100, keep_recent_messages: 2, ..CompactionConfig::default() };
    let settings =
        WorkerSettings { context: ContextSettings { compaction, ..ContextSettings::default() }, ..settings() };
    let h = Setup { settings, file_tools: true, ..Setup::new(BusKind::InProcess) }.start().await;
    let mut out = h.bus.outbound("test").await.unwrap();
    let short = turn(&h, &mut out, "/compact").await;
    assert_eq!(short.content, "Nothing to compact yet: the conversation has no earlier exchange to summarise.");
    turn(&h, &mut out, "one").await;
    turn(&h, &mut out, "two").await;
    assert_eq!(h.store.session_summary(SESSION).await.unwrap(), None, "below max_messages: no compaction by itself");

    h.llm.push(Scripted::Text("NO_REPLY".into()));
    h.llm.push(Scripted::Text("They said one.".into()));
    let done = turn(&h, &mut out, "/compact").await;
    assert_eq!(done.content, "Compacted: the 2 oldest messages of this conversation are now a summary.");
    assert_eq!(
        h.store.session_summary(SESSION).await.unwrap(),
        Some(HistorySummary { text: "They said one.".to_owned(), compactions: 1 })
    );
    let summary_request = h.llm.requests().last().unwrap().clone();
    assert!(is_summary(&summary_request) && detached_text(&summary_request).is_none(), "{summary_request}");
    // The next turn reads the summary and the two newest messages only.
    turn(&h, &mut out, "three").await;
    let next = h.llm.requests().last().unwrap().to_string();
    assert!(next.contains("They said one.") && !next.contains("echo: one"), "{next}");
}

/// With the default settings, which keep a share of a large window verbatim (all of a short
/// chat), `/compact` still summarises everything before the newest exchange.
#[tokio::test]
async fn compact_with_the_default_settings_summarises_a_short_chat() {
    let settings = WorkerSettings { context: ContextSettings::default(), ..settings() };
    let h = Setup { settings, file_tools: true, ..Setup::new(BusKind::InProcess) }.start().await;
    let mut out = h.bus.outbound("test").await.unwrap();
    for text in ["one", "two", "three"] {
        turn(&h, &mut out, text).await;
    }
    h.llm.push(Scripted::Text("NO_REPLY".into()));
    h.llm.push(Scripted::Text("They counted to two.".into()));
    let done = turn(&h, &mut out, "/compact").await;
    assert_eq!(done.content, "Compacted: the 4 oldest messages of this conversation are now a summary.");
    let summary = h.store.session_summary(SESSION).await.unwrap().map(|summary| summary.text);
    assert_eq!(summary.as_deref(), Some("They counted to two."));
    // The next turn reads the summary and the newest exchange only.
    turn(&h, &mut out, "four").await;
    let next = h.llm.requests().last().unwrap().to_string();
    assert!(next.contains("They counted to two.") && next.contains("echo: three"), "{next}");
    assert!(!next.contains("echo: two"), "{next}");
}

/// A local model's 4,096-token window (llama-cpp-python's quirks): thirty turns of a chat
/// compact a handful of times, not on every turn, and each compaction's two calls are runs of
/// the session that the person pays for.
#[tokio::test]
async fn a_small_window_compacts_now_and_then_and_its_calls_are_runs() {
    use switchboard::store::RunKind;
    use switchboard_testkit::fake_llm::{FakeLlm, Quirks};
    let mut settings = settings();
    settings.context.context_window = 4096;
    settings.context.compaction = CompactionConfig::default();
    settings.queue.debounce = Duration::ZERO;
    let llm = FakeLlm::start_with_quirks(Quirks::llama_cpp(4096)).await;
    // Streamed, as by default: llama-cpp-python then reports no usage, and every call
    // (the summary's too) is counted by an estimate.
    let h = Setup { settings, llm: Some(llm), file_tools: true, stream: true, ..Setup::new(BusKind::InProcess) }
        .start()
        .await;
    let mut out = h.bus.outbound("test").await.unwrap();
    for n in 0..30 {
        let text = format!(
            "Turn {n}: what should we cook tonight, something with the leftover rice and the peas? \
             There are also two eggs, half an onion, a jar of kimchi and some soy sauce in the fridge, \
             and we would like to eat by seven, since the children have swimming lessons at eight."
        );
        turn(&h, &mut out, &text).await;
    }
    // A compaction follows its turn's reply: the last one may still be running.
    h.quiet().await;
    let compactions = h.store.session_info(SESSION).await.unwrap().compactions;
    assert!((2..=6).contains(&compactions), "{compactions} compactions in 30 turns");
    // Every later turn carries the summary: it is bounded by the history's room (a quarter of
    // it, what a compaction keeps of recent messages), well under a turn's answer limit.
    let requests = h.llm.requests();
    let limit = |request: &Value| request["max_tokens"].as_u64().unwrap_or(u64::MAX);
    let turn_limit = limit(&requests[0]);
    let summary_limits: Vec<u64> = requests.iter().filter(|r| is_summary(r)).map(limit).collect();
    // The request after the turn fits and is answered (streamed with tools, which this server
    // answers unstreamed only): no detached request follows it.
    let summary_calls = summary_limits.len() as u64;
    assert_eq!(summary_calls, compactions, "one summary call a compaction");
    assert!(summary_limits.iter().all(|&bound| (64..turn_limit).contains(&bound)), "{summary_limits:?}");
    let runs = h.store.recent_runs(200).await.unwrap();
    let count = |kind: RunKind| runs.iter().filter(|run| run.kind == kind).count() as u64;
    assert_eq!(
        (count(RunKind::Turn), count(RunKind::MemoryFlush), count(RunKind::Summary)),
        (30, compactions, summary_calls)
    );
    assert!(runs.iter().all(|run| run.usage.input_tokens > 0), "every call is counted");
    let owner =
        h.store.resolve_user(&"test:u1".parse().unwrap(), "U", switchboard::config::Level::Owner).await.unwrap();
    let month = switchboard::users::month_key(chrono::Utc::now());
    let billed = h.store.monthly_usage(owner.id, &month).await.unwrap();
    let spent: u64 = runs.iter().map(|run| run.usage.total()).sum();
    assert_eq!(billed.total(), spent, "the person pays for the compactions' calls too");
    h.stop().await;
}

/// A model that keeps calling tools in the memory flush is stopped after a few steps (each one
/// re-sends the conversation), and the summary goes on.
#[tokio::test]
async fn a_memory_flush_that_keeps_calling_tools_stops_after_a_few_steps() {
    use switchboard::store::{RunKind, RunStatus};
    let (h, mut out) = two_turns_in(["one", "two"]).await;
    h.llm.push(Scripted::Text("third answer".into()));
    for n in 0..5 {
        h.llm.push(Scripted::ToolCalls(vec![("list_dir".into(), json!({"path": format!("notes-{n}")}))]));
    }
    h.llm.push(Scripted::Text("The user counts to three.".into()));
    turn(&h, &mut out, "three").await;
    let (saved, _) = wait_for_summary(h.store.as_ref()).await.expect("no summary saved");
    assert_eq!(saved, "The user counts to three.");
    let runs = h.store.recent_runs(10).await.unwrap();
    let flush = runs.iter().find(|run| run.kind == RunKind::MemoryFlush).expect("no flush run");
    assert_eq!((flush.iterations, flush.status), (5, RunStatus::Failed), "{flush:?}");
    assert_eq!(h.llm.requests().len(), 3 + 5 + 1, "three turns, five flush steps, the summary");
    h.stop().await;
}

/// A small model's tokenizer counts twice the characters-per-token heuristic, and the chat's
/// stored history is long (messages too long to keep beside each other, so turns cut them).
/// The summary call is sized by the ratio the provider's counts showed and fits the window at
/// the first try (sized at a fixed three characters a token, it asked for more than the window).
#[tokio::test]
async fn a_dense_tokenizer_gets_its_summary_at_the_first_try() {
    use switchboard::store::{RunKind, RunStatus};
    use switchboard_testkit::fake_llm::{FakeLlm, Quirks};
    let mut settings = settings();
    settings.context.context_window = 4096;
    // Only `/compact` compacts here, once the history is long.
    settings.context.compaction = CompactionConfig { max_messages: 1000, context_share: 10.0, ..Default::default() };
    let quirks = Quirks { dense_tokenizer: true, ..Quirks::llama_cpp(4096) };
    let llm = FakeLlm::start_with_quirks(quirks).await;
    let setup = Setup { settings, llm: Some(llm), message_tool: false, ..Setup::new(BusKind::InProcess) };
    let h = setup.start().await;
    let mut out = h.bus.outbound("test").await.unwrap();
    for n in 0..6 {
        let text = format!("Note {n}: {}", "the boiler part comes on Tuesday and the plumber at nine. ".repeat(40));
        turn(&h, &mut out, &text).await;
    }
    // The second turn is refused as too long and answered without the first exchange; from the
    // refusal on, the estimate counts what was sent, so the later turns fit at the first call
    // (counting the dropped history as sent, every turn was refused once).
    assert_eq!(h.llm.requests().len(), 7, "six turns, one refused call");
    h.llm.push(Scripted::Text("NO_REPLY".into()));
    h.llm.push(Scripted::Text("Boiler part Tuesday, plumber at nine.".into()));
    let done = turn(&h, &mut out, "/compact").await;
    assert!(done.content.starts_with("Compacted:"), "{}", done.content);
    let runs = h.store.recent_runs(50).await.unwrap();
    let summaries: Vec<RunStatus> =
        runs.iter().filter(|run| run.kind == RunKind::Summary).map(|run| run.status).collect();
    assert_eq!(summaries, [RunStatus::Completed], "one summary call, not refused first");
    h.stop().await;
}

/// A history cut to fit a small window before it is compacted: the summary request still
/// starts as the flush's (what the cache holds), and the messages the cut left out are given
/// as text in its instruction, so the summary covers them too.
#[tokio::test]
async fn a_summary_after_a_cut_history_reads_what_the_cut_left_out() {
    use switchboard_testkit::fake_llm::{FakeLlm, Quirks};
    let mut settings = settings();
    settings.context.context_window = 4096;
    // Only `/compact` compacts here.
    settings.context.compaction = CompactionConfig { max_messages: 1000, context_share: 10.0, ..Default::default() };
    let llm = FakeLlm::start_with_quirks(Quirks::llama_cpp(4096)).await;
    let setup = Setup { settings, llm: Some(llm), message_tool: false, ..Setup::new(BusKind::InProcess) };
    let h = setup.start().await;
    let mut out = h.bus.outbound("test").await.unwrap();
    for n in 0..10 {
        turn(&h, &mut out, &format!("Note {n}: {}", "the plumber comes at nine on Tuesday. ".repeat(15))).await;
    }
    let last_turn = h.llm.requests().last().unwrap().to_string();
    assert!(!last_turn.contains("Note 0:") && last_turn.contains("Note 8:"), "the history was cut: {last_turn}");
    h.llm.push(Scripted::Text("NO_REPLY".into()));
    h.llm.push(Scripted::Text("The plumber comes at nine on Tuesday.".into()));
    assert!(turn(&h, &mut out, "/compact").await.content.starts_with("Compacted:"));
    let requests = h.llm.requests();
    let (flush, summary) = (&requests[requests.len() - 2], &requests[requests.len() - 1]);
    let (instruction, conversation) = messages(summary).split_last().unwrap();
    assert_eq!(conversation[..], messages(flush)[..conversation.len()], "the summary repeats the flush's start");
    let instruction = text_of(instruction);
    assert!(instruction.starts_with(SUMMARY_INSTRUCTION), "{instruction}");
    let left_out = instruction.split_once("no longer shown above:").expect("the left-out messages").1;
    let shown: String = conversation.iter().map(text_of).collect();
    // Each note to summarise is either shown or left out, once; the newest ones are kept.
    let (in_shown, in_left_out): (Vec<bool>, Vec<bool>) =
        (0..10).map(|n| (shown.contains(&format!("Note {n}:")), left_out.contains(&format!("Note {n}:")))).unzip();
    assert!(in_left_out[0] && in_shown.contains(&true), "shown {in_shown:?}, left out {in_left_out:?}");
    let summarised = in_shown.iter().zip(&in_left_out).take_while(|(shown, left)| *shown ^ *left).count();
    assert!((2..10).contains(&summarised), "shown {in_shown:?}, left out {in_left_out:?}");
    assert!(!in_shown[summarised..].contains(&true) && !in_left_out[summarised..].contains(&true));
    assert_eq!(wait_for_summary(h.store.as_ref()).await.unwrap().0, "The plumber comes at nine on Tuesday.");
    h.stop().await;
}

/// A small window's history near its room when a turn makes the session due: stored with the
/// turn's exchange, it would be cut again if prepared anew, so the flush starts with what the
/// turn sent, message for message, and the cache serves all of that.
#[tokio::test]
async fn the_flush_repeats_the_turn_even_where_its_history_would_be_cut_again() {
    use switchboard_testkit::fake_llm::{FakeLlm, Quirks};
    let mut settings = settings();
    settings.context.context_window = 4096;
    settings.context.compaction = CompactionConfig::default();
    let llm = FakeLlm::start_with_quirks(Quirks::llama_cpp(4096)).await;
    let setup = Setup { settings, llm: Some(llm), file_tools: true, ..Setup::new(BusKind::InProcess) };
    let h = setup.start().await;
    let mut out = h.bus.outbound("test").await.unwrap();
    let flush_instruction = json!(flush_prompt(&MemoryScope::Owner));
    let mut flush_at = None;
    for n in 0..30 {
        turn(&h, &mut out, &format!("Note {n}: {}", "the plumber comes at nine on Tuesday. ".repeat(30))).await;
        let requests = h.llm.requests();
        flush_at = requests.iter().position(|r| messages(r).last().unwrap()["content"] == flush_instruction);
        if flush_at.is_some() {
            break;
        }
    }
    let requests = h.llm.requests();
    let at = flush_at.expect("the session was never compacted");
    let (turn_request, flush) = (&requests[at - 1], &requests[at]);
    let sent = messages(turn_request);
    assert_eq!(messages(flush)[..sent.len()], sent[..], "the flush repeats the turn's request");
    assert_eq!(tool_names(flush), tool_names(turn_request));
    h.stop().await;
}

/// A summary call the server refuses as too long is asked again with half the conversation
/// (its tokenizer may count more than the calibration has seen), and both calls are runs.
#[tokio::test]
async fn a_summary_refused_as_too_long_is_asked_again_with_half() {
    use switchboard::store::{RunKind, RunStatus};
    let long = |n: usize| format!("{n}: {}", "the boiler part arrives on Tuesday, call the plumber. ".repeat(20));
    let (h, mut out) = two_turns_in([&long(1), &long(2)]).await;
    h.llm.push(Scripted::Text("third answer".into()));
    h.llm.push(Scripted::Text("NO_REPLY".into()));
    // Refused after the turn, then in the detached form, which reads half the second time.
    h.llm.push(Scripted::context_overflow());
    h.llm.push(Scripted::context_overflow());
    h.llm.push(Scripted::Text("The boiler part comes on Tuesday.".into()));
    turn(&h, &mut out, "three").await;
    let (saved, count) = wait_for_summary(h.store.as_ref()).await.expect("no summary saved");
    assert_eq!((saved.as_str(), count), ("The boiler part comes on Tuesday.", 1));
    let requests = h.llm.requests();
    assert!(is_summary(&requests[4]) && detached_text(&requests[4]).is_none(), "after the turn first");
    let asked: Vec<usize> = requests.iter().filter_map(detached_text).map(|text| text.chars().count()).collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[1] <= asked[0] / 2 + 100, "the second call reads half: {asked:?}");
    let runs = h.store.recent_runs(10).await.unwrap();
    let summaries: Vec<RunStatus> =
        runs.iter().rev().filter(|run| run.kind == RunKind::Summary).map(|run| run.status).collect();
    assert_eq!(summaries, [RunStatus::Failed, RunStatus::Failed, RunStatus::Completed]);
    h.stop().await;
}

/// A model that answers the summary request with a tool call (it is offered the turn's tools,
/// so that the request starts as the turn's) runs no tool: the summary is asked for again in
/// the detached form, with the older messages rendered as text and named by their authors.
#[tokio::test]
async fn a_summary_answered_with_a_tool_call_is_asked_again_detached() {
    use switchboard::store::RunKind;
    let (h, mut out) = two_turns_in(["one", "two"]).await;
    h.llm.push(Scripted::Text("third answer".into()));
    h.llm.push(Scripted::Text("NO_REPLY".into()));
    h.llm.push(Scripted::ToolCalls(vec![("write_file".into(), json!({"path": "x.md", "content": "x"}))]));
    h.llm.push(Scripted::Text("They counted to two.".into()));
    turn(&h, &mut out, "three").await;
    let (saved, _) = wait_for_summary(h.store.as_ref()).await.expect("no summary saved");
    assert_eq!(saved, "They counted to two.");
    assert!(!h.workspace.join("x.md").exists(), "the summary request runs no tool");
    let requests = h.llm.requests();
    assert_eq!(requests.len(), 6, "three turns, the flush, two summary calls");
    let text = detached_text(&requests[5]).expect("the second summary call is detached");
    assert!(tool_names(&requests[5]).is_empty());
    assert!(text.contains("user U (id u1): one") && text.contains("user U (id u1): two"), "{text}");
    assert!(!text.contains("user U (id u1): three"), "the most recent messages stay verbatim: {text}");
    let runs = h.store.recent_runs(10).await.unwrap();
    assert_eq!(runs.iter().filter(|run| run.kind == RunKind::Summary).count(), 2, "both calls are runs");
    h.stop().await;
}
