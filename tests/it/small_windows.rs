//! A model with a small context window, through the worker: every answer is limited by the
//! output reserve the fitting keeps (with `agent.max_tokens = 0`, the default), and when the
//! prompt and the tool schemas do not fit, an MCP server's tools go before switchboard's own,
//! the core ones (the files, `message`) last, and the warning names the tools dropped.
//!
//! The tool test captures the log (see [`Logs`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use switchboard::config::{BudgetsConfig, PermissionsConfig, UsersConfig};
use switchboard::tools::Tool;
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard_channels::contract::{InboundMessage, Sender};
use tracing::Level;

use crate::common::{BusKind, Harness, Logs, NamedTool, Setup, next_out};

/// Tools as an MCP server's are named (`<server>__<tool>`): small schemas, smaller than any of
/// switchboard's own, so only their tier puts them first.
const MCP_TOOLS: [&str; 3] = ["notes__search", "notes__append", "calendar__add_event"];
/// What a small window keeps longest.
const CORE_TOOLS: [&str; 5] = ["read_file", "write_file", "edit_file", "list_dir", "message"];

/// `u1` owns the agent: it is offered every tool.
fn owner_settings(context_window: u64) -> WorkerSettings {
    let users = UsersConfig { owners: vec!["test:u1".into()], ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &PermissionsConfig::default(), &BudgetsConfig::default()).unwrap();
    let mut settings = WorkerSettings { access, ..WorkerSettings::default() };
    settings.context.context_window = context_window;
    settings
}

fn msg(content: &str) -> InboundMessage {
    InboundMessage::user("test", "chat", Sender { id: "u1".into(), name: "U".into(), is_bot: false }, content)
}

/// The owner's first message to a worker with the file tools, `exec`, `message` and the MCP
/// tools, at `context_window`: the harness once it answered.
async fn first_turn(context_window: u64) -> Harness {
    let tools: Vec<Arc<dyn Tool>> = MCP_TOOLS.iter().map(|&name| Arc::new(NamedTool(name)) as Arc<dyn Tool>).collect();
    let setup = Setup {
        settings: owner_settings(context_window),
        file_tools: true,
        exec: true,
        tools,
        ..Setup::new(BusKind::InProcess)
    };
    let h = setup.start().await;
    let mut out = h.outbound("test").await;
    h.send(&msg("what is on my list today?")).await;
    next_out(&mut out).await;
    h
}

#[tokio::test]
async fn with_no_max_tokens_each_answer_is_limited_by_the_windows_output_reserve() {
    // An eighth of an 8k window ...
    let h = first_turn(8192).await;
    assert_eq!(h.llm.requests()[0]["max_tokens"], 1024, "{}", h.llm.requests()[0]);
    h.stop().await;
    // ... and at most 4096 in a large one.
    let h = first_turn(128_000).await;
    assert_eq!(h.llm.requests()[0]["max_tokens"], 4096);
    h.stop().await;
}

/// The tools a warning says were dropped: `… without the tools a, b, c (see …`.
fn named_as_dropped(warning: &str) -> BTreeSet<String> {
    let list = warning.split_once("without the tools ").map_or("", |(_, rest)| rest);
    let list = list.split_once(" (see").map_or(list, |(names, _)| names);
    list.split(", ").filter(|name| !name.is_empty()).map(str::to_owned).collect()
}

#[tokio::test]
async fn a_small_window_drops_the_mcp_tools_first_keeps_the_core_ones_and_names_what_it_dropped() {
    let logs = Logs::install();

    let roomy = first_turn(128_000).await;
    let every_tool: BTreeSet<String> = roomy.offered_tools(0).into_iter().collect();
    roomy.stop().await;
    for tool in MCP_TOOLS.iter().chain(&CORE_TOOLS) {
        assert!(every_tool.contains(*tool), "{tool} is not offered in a large window: {every_tool:?}");
    }
    let degraded = |logs: &Logs| -> Vec<String> {
        logs.messages_at(Level::WARN).into_iter().filter(|w| w.contains("minimal prompt")).collect()
    };
    assert_eq!(degraded(&logs), Vec::<String>::new());

    // Too small for every schema beside even the minimal prompt, large enough for the core ones
    // and some of switchboard's own (the MCP tools are smaller than any of those: largest first
    // alone would keep them).
    let small = first_turn(3300).await;
    let kept: BTreeSet<String> = small.offered_tools(0).into_iter().collect();
    small.stop().await;
    let dropped: BTreeSet<String> = every_tool.difference(&kept).cloned().collect();
    for tool in MCP_TOOLS {
        assert!(dropped.contains(tool), "{tool} was kept: {kept:?}");
    }
    for tool in CORE_TOOLS {
        assert!(kept.contains(tool), "{tool} was dropped: {dropped:?}");
    }
    let degraded = degraded(&logs);
    assert_eq!(degraded.len(), 1, "one warning about the small window: {degraded:?}");
    assert_eq!(named_as_dropped(&degraded[0]), dropped, "{}", degraded[0]);
}

/// The tools fitted to a small window are the head of every request: they stay the same from
/// turn to turn until the session is compacted. A message too long for them drops more; the
/// short ones after it keep that smaller set (rather than changing the head back and forth);
/// after `/compact` the prompt is fitted afresh.
#[tokio::test]
async fn the_tools_fitted_to_a_small_window_stay_until_the_session_is_compacted() {
    use switchboard::config::CompactionConfig;
    let tools: Vec<Arc<dyn Tool>> = MCP_TOOLS.iter().map(|&name| Arc::new(NamedTool(name)) as Arc<dyn Tool>).collect();
    let mut settings = owner_settings(4096);
    // No compaction of its own: only `/compact`.
    settings.context.compaction = CompactionConfig { max_messages: 10_000, context_share: 100.0, ..Default::default() };
    let setup = Setup { settings, file_tools: true, exec: true, tools, ..Setup::new(BusKind::InProcess) };
    let h = setup.start().await;
    let mut out = h.outbound("test").await;
    let long = "a long pasted text that leaves little room beside the tools. ".repeat(130);
    let mut sets = Vec::new();
    for text in ["what is on my list today?", &long, "and tomorrow?", "/compact", "and the day after?"] {
        h.send(&msg(text)).await;
        next_out(&mut out).await;
        let last = h.llm.requests().len() - 1;
        sets.push(h.offered_tools(last).into_iter().collect::<BTreeSet<String>>());
    }
    assert!(sets[1].len() < sets[0].len() && sets[1].is_subset(&sets[0]), "the long message drops more: {sets:?}");
    assert_eq!(sets[2], sets[1], "a short message after it keeps the same head");
    // Fitted afresh after the compaction: without the long message, more tools fit again.
    assert!(sets[4].len() > sets[2].len() && sets[2].is_subset(&sets[4]), "{sets:?}");
    h.stop().await;
}
