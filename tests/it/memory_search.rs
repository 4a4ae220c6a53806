//! `memory_search` and `memory_get` through the worker, against the scripted model and a real
//! SQLite file: a fact the prompt's cap leaves out of a long `MEMORY.md` is found in the
//! owner's direct chat; a group's search finds the group's own memory and never the owner's;
//! `memory_get` refuses the owner's file in a group; a fact that compaction took out of the
//! history is found in the past conversation, in the owner's scope only. See docs/memory.md,
//! "Search".

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::config::{BudgetsConfig, CompactionConfig, Level, PermissionsConfig, UsersConfig};
use switchboard::users::AccessPolicy;
use switchboard::worker::{RecallSettings, WorkerSettings};
use switchboard_channels::contract::{InboundMessage, Sender};
use switchboard_testkit::fake_llm::Scripted;

use crate::common::{BusKind, Harness, Setup, next_out};

const OWNER: &str = "42";
const MEMBER: &str = "9";
const GROUP: &str = "-1001234";
/// The owner's fact, near the start of a long MEMORY.md.
const SECRET: &str = "ZEBRA-4711";

/// The owner is `telegram:42`; group members (guests) may use the memory tools here, so the
/// test can show what they reach.
pub(crate) fn settings() -> WorkerSettings {
    let users = UsersConfig { owners: vec![format!("telegram:{OWNER}")], ..UsersConfig::default() };
    let mut permissions = PermissionsConfig::default();
    for tool in ["memory_search", "memory_get"] {
        permissions.tools.insert(tool.into(), Level::Guest);
    }
    let access = AccessPolicy::from_config(&users, &permissions, &BudgetsConfig::default()).unwrap();
    let mut settings = WorkerSettings { access, ..WorkerSettings::default() };
    settings.queue.debounce = Duration::ZERO;
    settings
}

async fn start() -> Harness {
    let h = Setup { settings: settings(), memory_tools: true, ..Setup::new(BusKind::InProcess) }.start().await;
    std::fs::write(h.workspace.join("MEMORY.md"), long_memory()).unwrap();
    h
}

/// About 24,000 characters, three times `agent.memory_max_chars`; the locker code on line 3.
fn long_memory() -> String {
    let mut text = format!("# Memory\n\nThe locker code at the zoo is {SECRET}.\n\n");
    for i in 0..600 {
        text.push_str(&format!("- note {i}: a quiet day\n"));
    }
    text
}

pub(crate) fn dm(content: &str) -> InboundMessage {
    let sender = Sender { id: OWNER.into(), name: "Owner".into(), is_bot: false };
    InboundMessage::user("telegram", OWNER, sender, content)
}

fn in_group(content: &str) -> InboundMessage {
    let sender = Sender { id: MEMBER.into(), name: "Member".into(), is_bot: false };
    let mut msg = InboundMessage::user("telegram", GROUP, sender, content);
    msg.is_group = true;
    msg.mentioned = true;
    msg
}

pub(crate) fn call(tool: &str, arguments: Value) -> (String, Value) {
    (tool.to_owned(), arguments)
}

/// The tool results the last model request carries, in call order.
pub(crate) fn last_tool_results(h: &Harness) -> Vec<String> {
    let requests = h.llm.requests();
    let messages = requests.last().unwrap()["messages"].as_array().cloned().unwrap_or_default();
    let tools = messages.iter().filter(|m| m["role"] == "tool");
    tools.map(|m| m["content"].as_str().unwrap_or_default().to_owned()).collect()
}

#[tokio::test]
async fn a_fact_past_the_prompt_cap_is_found_in_the_owners_chat() {
    let h = start().await;
    let mut out = h.outbound("telegram").await;
    h.llm.push(Scripted::ToolCalls(vec![call("memory_search", json!({"query": "locker code"}))]));
    h.llm.push(Scripted::Text(format!("The code is {SECRET}.")));
    h.send(&dm("What was the locker code?")).await;
    assert_eq!(next_out(&mut out).await.content, format!("The code is {SECRET}."));

    let requests = h.llm.requests();
    assert!(h.offered_tools(0).contains(&"memory_search".to_owned()), "{:?}", h.offered_tools(0));
    let prompt = requests[0]["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(prompt.contains("- note 599") && !prompt.contains(SECRET), "the prompt shows only MEMORY.md's end");
    assert!(prompt.contains("find older facts with memory_search"), "the prompt says how to find the rest");
    let [result] = &last_tool_results(&h)[..] else { panic!("one tool result") };
    assert!(result.contains("1. MEMORY.md line 3\n") && result.contains(SECRET), "{result}");
    h.stop().await;
}

#[tokio::test]
async fn a_groups_search_finds_its_own_memory_and_never_the_owners() {
    let h = start().await;
    let own = format!("memory/groups/telegram_{GROUP}.md");
    std::fs::create_dir_all(h.workspace.join("memory/groups")).unwrap();
    std::fs::write(h.workspace.join(&own), "# Group\n\nOur zoo mascot is a zebra called Stripes.\n").unwrap();
    let mut out = h.outbound("telegram").await;
    h.llm.push(Scripted::ToolCalls(vec![
        call("memory_search", json!({"query": "zoo locker code zebra"})),
        call("memory_get", json!({"path": "MEMORY.md"})),
        call("memory_get", json!({"path": own, "from_line": 3})),
    ]));
    h.llm.push(Scripted::Text("Stripes.".into()));
    h.send(&in_group("What do we know about the zoo?")).await;
    assert_eq!(next_out(&mut out).await.content, "Stripes.");
    h.nothing_more(&mut out).await;

    let [search, owners, group] = &last_tool_results(&h)[..] else { panic!("three tool results") };
    assert!(search.contains(&format!("1. {own} line 3")) && search.contains("Stripes"), "{search}");
    assert!(!search.contains("MEMORY.md") && !search.contains("2. "), "{search}");
    assert!(owners.starts_with("error: refused:") && owners.contains("owner's private memory"), "{owners}");
    assert!(group.contains(&format!("[{own} lines 3-3 of 3]")) && group.contains("Stripes"), "{group}");
    for (i, request) in h.llm.requests().iter().enumerate() {
        assert!(!request.to_string().contains(SECRET), "request {i} of the group carries the owner's fact");
    }
    h.stop().await;
}

#[tokio::test]
async fn guests_are_not_offered_memory_search_by_default() {
    let users = UsersConfig { owners: vec![format!("telegram:{OWNER}")], ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    let mut settings = WorkerSettings { access, ..WorkerSettings::default() };
    settings.queue.debounce = Duration::ZERO;
    let h = Setup { settings, memory_tools: true, ..Setup::new(BusKind::InProcess) }.start().await;
    let mut out = h.outbound("telegram").await;
    h.llm.push(Scripted::Text("Hi.".into()));
    h.send(&in_group("hello")).await;
    assert_eq!(next_out(&mut out).await.content, "Hi.");
    let offered = h.offered_tools(0);
    assert!(offered.contains(&"current_time".to_owned()), "{offered:?}");
    assert!(!offered.iter().any(|tool| tool.starts_with("memory_")), "{offered:?}");
    h.stop().await;
}

/// The owner's passport number, said once early in a long direct conversation.
const PASSPORT: &str = "X9-55-1234";

#[tokio::test]
async fn a_fact_compaction_took_out_of_the_history_is_found_in_the_past_conversation() {
    let mut settings = settings();
    settings.context.compaction = CompactionConfig { max_messages: 5, keep_recent_messages: 2, ..Default::default() };
    let h = Setup { settings, memory_tools: true, ..Setup::new(BusKind::InProcess) }.start().await;
    let mut out = h.outbound("telegram").await;
    h.send(&dm(&format!("My passport number is {PASSPORT}."))).await;
    next_out(&mut out).await;
    h.send(&dm("Nice weather today.")).await;
    next_out(&mut out).await;
    // The third turn makes the session long enough: a flush that writes nothing, a summary
    // that leaves the number out.
    h.llm.push(Scripted::Text("Indeed.".into()));
    h.llm.push(Scripted::Text("NO_REPLY".into()));
    h.llm.push(Scripted::Text("The owner talked about the weather.".into()));
    h.send(&dm("Let us go for a walk.")).await;
    assert_eq!(next_out(&mut out).await.content, "Indeed.");
    wait_for_compaction(&h, &format!("telegram:{OWNER}"), 1).await;

    let before = h.llm.requests().len();
    h.llm.push(Scripted::ToolCalls(vec![call("memory_search", json!({"query": "passport number"}))]));
    h.llm.push(Scripted::Text("Found it.".into()));
    h.send(&dm("What is my passport number?")).await;
    assert_eq!(next_out(&mut out).await.content, "Found it.");
    let asked = &h.llm.requests()[before];
    assert!(!asked.to_string().contains(PASSPORT), "the history still carries the number: {asked}");
    let [result] = &last_tool_results(&h)[..] else { panic!("one tool result") };
    assert!(result.contains(&format!("1. conversation telegram:{OWNER}, message ")), "{result}");
    assert!(result.contains("1234") && result.contains("Owner (id 42): My **passport** **number**"), "{result}");

    // That turn compacts the session again (flush and summary); then the group asks.
    h.llm.push(Scripted::Text("NO_REPLY".into()));
    h.llm.push(Scripted::Text("The owner asked for a number.".into()));
    wait_for_compaction(&h, &format!("telegram:{OWNER}"), 2).await;
    // A group's search does not reach the owner's direct conversation.
    h.llm.push(Scripted::ToolCalls(vec![call("memory_search", json!({"query": "passport number X9"}))]));
    h.llm.push(Scripted::Text("No idea.".into()));
    h.send(&in_group("What is the owner's passport number?")).await;
    assert_eq!(next_out(&mut out).await.content, "No idea.");
    let [group_result] = &last_tool_results(&h)[..] else { panic!("one tool result") };
    assert!(group_result.contains("No match for") && !group_result.contains("1234"), "{group_result}");
    h.stop().await;
}

async fn wait_for_compaction(h: &Harness, session: &str, count: u32) {
    for _ in 0..200 {
        if h.store.session_summary(session).await.unwrap().is_some_and(|summary| summary.compactions >= count) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the session was never compacted");
}

#[tokio::test]
async fn recall_puts_the_best_hits_into_the_prompt_in_the_chats_own_scope() {
    let mut settings = settings();
    settings.recall = RecallSettings { results: 2, max_chars: 2_000 };
    let h = Setup { settings, memory_tools: true, ..Setup::new(BusKind::InProcess) }.start().await;
    std::fs::write(h.workspace.join("MEMORY.md"), long_memory()).unwrap();
    let own = format!("memory/groups/telegram_{GROUP}.md");
    std::fs::create_dir_all(h.workspace.join("memory/groups")).unwrap();
    std::fs::write(h.workspace.join(&own), "# Group\n\nThe zoo trip is on Saturday.\n").unwrap();
    let mut out = h.outbound("telegram").await;

    h.send(&dm("Which code opens my zoo locker?")).await;
    next_out(&mut out).await;
    let first = h.llm.requests()[0].clone();
    assert!(!system_prompt(&first).contains("Recalled"), "recall goes with the message, not in the system prompt");
    let message = newest(&first);
    let recalled = message.split("Recalled from memory").nth(1).expect("a recall section");
    assert!(recalled.contains(&format!("- MEMORY.md line 3: The locker code at the zoo is {SECRET}.")), "{recalled}");
    assert!(!recalled.contains("note 599"), "only hits are recalled: {recalled}");
    let (before, after) = message.split_once("Which code opens my zoo locker?").expect("the question");
    assert!(
        before.starts_with("[context:") && after.contains("Recalled from memory"),
        "recalled after the text: {message}"
    );

    h.send(&in_group("When is the zoo trip? And the locker code?")).await;
    next_out(&mut out).await;
    let group_message = newest(&h.llm.requests()[1]);
    assert!(group_message.contains(&format!("- {own} line 3: The zoo trip is on Saturday.")), "{group_message}");
    assert!(!group_message.contains(SECRET), "a group recalled the owner's memory");

    // A message with nothing to look for recalls nothing; the earlier message is sent again
    // without what it recalled (that was for its own turn), its context line unchanged.
    h.send(&dm("Hi, how are you?")).await;
    next_out(&mut out).await;
    let third = h.llm.requests()[2].clone();
    assert!(!newest(&third).contains("Recalled from memory"));
    let again = &user_messages(&third)[0];
    assert!(!again.contains("Recalled") && again.ends_with("Which code opens my zoo locker?"), "{again}");
    let line = |text: &str| text.split("]\n\n").next().unwrap_or_default().to_owned();
    assert_eq!(line(again), line(&message));
    h.stop().await;
}

/// A local model's 2,048-token window: MEMORY.md does not fit (the minimal prompt), what the
/// message recalls does.
#[tokio::test]
async fn a_small_window_keeps_what_the_message_recalled() {
    let mut settings = settings();
    settings.recall = RecallSettings { results: 2, max_chars: 2_000 };
    settings.context.context_window = 2048;
    let h = Setup { settings, memory_tools: true, ..Setup::new(BusKind::InProcess) }.start().await;
    std::fs::write(h.workspace.join("MEMORY.md"), long_memory()).unwrap();
    let mut out = h.outbound("telegram").await;
    h.send(&dm("Which code opens my zoo locker?")).await;
    next_out(&mut out).await;
    let request = h.llm.requests()[0].clone();
    let prompt = system_prompt(&request);
    assert!(!prompt.contains("- note 599"), "the minimal prompt, without MEMORY.md: {prompt}");
    let message = newest(&request);
    assert!(message.contains(&format!("- MEMORY.md line 3: The locker code at the zoo is {SECRET}.")), "{message}");
    h.stop().await;
}

/// What the person said is recalled, not the agent's reply to it: a wrong answer recalled
/// would be taken for a fact.
#[tokio::test]
async fn recall_brings_back_what_the_person_said_and_not_the_agents_replies() {
    let mut settings = settings();
    settings.recall = RecallSettings { results: 3, max_chars: 2_000 };
    let h = Setup { settings, memory_tools: true, ..Setup::new(BusKind::InProcess) }.start().await;
    let mut out = h.outbound("telegram").await;
    h.send(&dm("My bike is a blue Gazelle.")).await;
    assert_eq!(next_out(&mut out).await.content, "echo: My bike is a blue Gazelle.");
    h.send(&dm("/new")).await;
    next_out(&mut out).await;
    h.send(&dm("Which bike do I ride, the Gazelle?")).await;
    next_out(&mut out).await;
    let message = newest(h.llm.requests().last().unwrap());
    let recalled = message.split("Recalled from memory").nth(1).expect("a recall section");
    assert!(recalled.contains("Owner (id 42): My bike is a blue Gazelle."), "{recalled}");
    assert!(!recalled.contains("assistant:"), "the agent's own reply was recalled: {recalled}");
    h.stop().await;
}

#[tokio::test]
async fn without_recall_the_prompt_has_no_recalled_memory() {
    let h = start().await;
    let mut out = h.outbound("telegram").await;
    h.send(&dm("Which code opens my zoo locker?")).await;
    next_out(&mut out).await;
    let prompt = system_prompt(&h.llm.requests()[0]);
    assert!(!prompt.contains("# Recalled from memory") && !prompt.contains(SECRET), "{prompt}");
    h.stop().await;
}

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"].as_str().unwrap_or_default().to_owned()
}

/// The user messages of a request as sent (context line, what was recalled, text).
fn user_messages(request: &Value) -> Vec<String> {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().filter(|m| m["role"] == "user").map(|m| m["content"].as_str().unwrap_or("").to_owned()).collect()
}

/// The newest user message of a request as sent.
fn newest(request: &Value) -> String {
    user_messages(request).pop().unwrap_or_default()
}
