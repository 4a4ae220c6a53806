//! What a provider's prompt cache serves of each turn, through the worker against fakes whose
//! caches behave like the real ones (OpenAI: any prefix of 1,024 tokens or more, in 128-token
//! steps; Anthropic: prefixes ending at `cache_control` breakpoints, found up to 20 blocks
//! back). A hand clock moves a minute and more between messages, as people write: from the
//! third turn on, at least 90 % of each turn's input must come from the cache, in a direct chat,
//! in a group where people take turns, with recall on and with a model failing over; past the
//! history budget and across a compaction the prefix changes only at the step that frees room.
//! In every scenario, each message's request still tells the model the minute and the speaker.

use std::time::Duration;

use switchboard::clock::ManualClock;
use switchboard::config::{
    BudgetsConfig, CompactionConfig, GroupAccessConfig, HistoryConfig, Level, PermissionsConfig, UsersConfig,
};
use switchboard::context::ContextSettings;
use switchboard::scheduler::CronSettings;
use switchboard::store::{RunKind, RunRecord};
use switchboard::subagents::SubagentSettings;
use switchboard::users::AccessPolicy;
use switchboard::worker::{RecallSettings, WorkerSettings};
use switchboard_channels::Deliveries;
use switchboard_channels::contract::{InboundMessage, OutboundKind, Sender};
use switchboard_testkit::fake_anthropic::{self, FakeAnthropic};
use switchboard_testkit::fake_llm::{Scripted, split_context_line};

use crate::common::{BusKind, Harness, Setup, next_out, real_now};

const GROUP: &str = "-1001234";
const OWNER: &str = "42";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Vendor {
    OpenAi,
    Anthropic,
}

struct Rig {
    h: Harness,
    anthropic: Option<FakeAnthropic>,
    clock: ManualClock,
    out: Deliveries,
}

/// The owner is `telegram:42`; the group `telegram:-1001234` makes its members users there.
fn settings(clock: &ManualClock) -> WorkerSettings {
    let groups = [(format!("telegram:{GROUP}"), GroupAccessConfig { level: Level::User, budget: 0 })].into();
    let users = UsersConfig { owners: vec![format!("telegram:{OWNER}")], groups, ..UsersConfig::default() };
    let mut permissions = PermissionsConfig::default();
    permissions.tools.insert("memory_search".into(), Level::User);
    let access = AccessPolicy::from_config(&users, &permissions, &BudgetsConfig::default()).unwrap();
    let mut settings = WorkerSettings { access: access.with_clock(clock.clock()), ..WorkerSettings::default() };
    settings.queue.debounce = Duration::ZERO;
    settings
}

async fn rig(vendor: Vendor, tweak: impl FnOnce(&mut Setup)) -> Rig {
    let clock = ManualClock::new(real_now());
    let anthropic = match vendor {
        Vendor::Anthropic => Some(FakeAnthropic::start().await),
        Vendor::OpenAi => None,
    };
    // The owner's tools of a default install (the web tools aside: they need a network).
    let mut setup = Setup {
        settings: settings(&clock),
        file_tools: true,
        memory_tools: true,
        exec: true,
        cron: Some((CronSettings::default(), clock.clock())),
        subagents: Some((SubagentSettings::default(), clock.clock())),
        anthropic: anthropic.as_ref().map(FakeAnthropic::base_url),
        ..Setup::new(BusKind::InProcess)
    };
    tweak(&mut setup);
    let h = setup.start().await;
    // The workspace a fresh `init` writes: the prompt as users have it.
    switchboard::workspace::init::write_workspace(&h.workspace).unwrap();
    let out = h.outbound("telegram").await;
    Rig { h, anthropic, clock, out }
}

impl Rig {
    /// Sends `msg` a minute and a half after the last one and waits for the answer.
    async fn say(&mut self, msg: InboundMessage) -> String {
        self.clock.advance(Duration::from_secs(90));
        self.h.send(&msg).await;
        let reply = next_out(&mut self.out).await;
        assert_eq!(reply.kind, OutboundKind::Reply, "{}", reply.content);
        self.assert_told_time_and_speaker(&msg);
        reply.content
    }

    /// The newest request that answered `msg` tells the model, in the message's context line,
    /// the minute the (test) clock shows and who spoke: the layout that keeps the prefix
    /// cacheable must not lose them.
    fn assert_told_time_and_speaker(&self, msg: &InboundMessage) {
        let requests = match &self.anthropic {
            Some(anthropic) => anthropic.requests(),
            None => self.h.llm.requests(),
        };
        let newest = requests.iter().rev().filter_map(newest_user_text).find(|text| text.contains(&msg.content));
        let newest = newest.unwrap_or_else(|| panic!("no request answered {:?}", msg.content));
        let line = split_context_line(&newest).0.unwrap_or_else(|| panic!("no context line in {newest:?}"));
        let minute = self.clock.now().format("%-d %B %Y, %H:%M").to_string();
        let speaker = format!("from {} (id {})", msg.sender.name, msg.sender.id);
        assert!(line.contains(&minute), "the time {minute} is not in {line}");
        assert!(line.contains(&speaker), "the speaker {speaker:?} is not in {line}");
    }

    /// Scripts the next answer of whichever fake the rig talks to.
    fn push(&self, step: Scripted) {
        match &self.anthropic {
            Some(anthropic) => anthropic.push(step),
            None => self.h.llm.push(step),
        }
    }

    /// The turns so far, oldest first.
    async fn turns(&self) -> Vec<RunRecord> {
        let mut runs = self.h.store.recent_runs(1000).await.unwrap();
        runs.retain(|run| run.kind == RunKind::Turn);
        runs.reverse();
        runs
    }

    /// Each turn's share of its input the cache served, in percent.
    async fn cached_shares(&self) -> Vec<u64> {
        let turns = self.turns().await;
        let read: Vec<String> =
            turns.iter().map(|run| format!("{}/{}", run.usage.cache_read_tokens, run.usage.input_tokens)).collect();
        eprintln!("cached/input per turn: {}", read.join(" "));
        turns.iter().map(|run| run.usage.cached_percent()).collect()
    }

    async fn stop(self) {
        self.h.stop().await;
    }
}

fn person(id: &str, name: &str) -> Sender {
    Sender { id: id.into(), name: name.into(), is_bot: false }
}

/// What people write: a sentence or three, different every time.
fn words(n: usize) -> String {
    const TOPICS: [&str; 6] = [
        "the garden needs watering before the heat comes back on Thursday",
        "the train to Lyon leaves at seven and we still need a table for four",
        "could you remind me what we decided about the school trip money",
        "the plumber said the boiler part arrives next week, maybe Tuesday",
        "I tried the lentil recipe and it needed twice the cumin it asked for",
        "what is a good way to tell the neighbours about the party on Saturday",
    ];
    format!("Message {n}: {} and {}.", TOPICS[n % 6], TOPICS[(n * 5 + 1) % 6])
}

fn dm(n: usize) -> InboundMessage {
    InboundMessage::user("telegram", OWNER, person(OWNER, "Olga"), &words(n))
}

fn in_group(from: &str, n: usize) -> InboundMessage {
    let mut msg = InboundMessage::user("telegram", GROUP, person(from, &from.to_uppercase()), &words(n));
    msg.is_group = true;
    msg.mentioned = true;
    msg
}

/// From the third turn on, every turn at least 90 % from the cache.
fn assert_cached_from_the_third(shares: &[u64], what: &str) {
    eprintln!("{what}: {shares:?}");
    assert!(shares.len() >= 3, "{what}: only {} turns", shares.len());
    assert!(shares[2..].iter().all(|&share| share >= 90), "{what}: cached share of each turn in %: {shares:?}");
}

async fn a_direct_chat_across_minutes(vendor: Vendor) {
    let mut rig = rig(vendor, |_| {}).await;
    for n in 0..10 {
        if n % 3 == 1 {
            // Some turns use a tool first: the turn's second call shares the first one's prefix.
            let listing = Scripted::ToolCalls(vec![("list_dir".into(), serde_json::json!({"path": "."}))]);
            rig.push(listing);
        }
        rig.say(dm(n)).await;
    }
    assert_cached_from_the_third(&rig.cached_shares().await, "an owner's direct chat");
    rig.stop().await;
}

async fn a_group_taking_turns(vendor: Vendor) {
    let mut rig = rig(vendor, |_| {}).await;
    for n in 0..9 {
        rig.say(in_group(["ann", "bob", "cem"][n % 3], n)).await;
    }
    assert_cached_from_the_third(&rig.cached_shares().await, "a group of three");
    rig.stop().await;
}

async fn recall_on(vendor: Vendor) {
    let mut rig = rig(vendor, |setup| setup.settings.recall = RecallSettings { results: 2, max_chars: 400 }).await;
    let memory = "# Memory\n\n- The boiler is a Vaillant ecoTEC from 2015.\n- The school trip money is 40 euros.\n\
                  - The neighbours on the left are Ines and Paul.\n- Lyon: the hotel is near Perrache.\n";
    std::fs::write(rig.h.workspace.join("MEMORY.md"), memory).unwrap();
    for n in 0..8 {
        rig.say(dm(n)).await;
    }
    let requests = rig.h.llm.requests();
    let anthropic = rig.anthropic.as_ref().map(FakeAnthropic::requests).unwrap_or_default();
    let sent = format!("{requests:?}{anthropic:?}");
    assert!(sent.contains("Recalled from memory"), "nothing was recalled");
    // Each turn's recall is new by design (it goes with the newest message only), and OpenAI
    // counts what it cached in 128-token steps: a single turn may fall a point short, the
    // input tokens of turns 3+ together may not.
    let turns = rig.turns().await;
    let shares: Vec<u64> = turns.iter().map(|run| run.usage.cached_percent()).collect();
    eprintln!("recall on: {shares:?}");
    assert!(shares.len() >= 3 && shares[2..].iter().all(|&share| share >= 85), "recall on: {shares:?}");
    let (cached, input) =
        turns[2..].iter().fold((0, 0), |(c, i), run| (c + run.usage.cache_read_tokens, i + run.usage.input_tokens));
    assert!(cached * 10 >= input * 9, "recall on: turns 3+ read {cached} of {input} input tokens from the cache");
    rig.stop().await;
}

async fn failing_over_to_a_second_model(vendor: Vendor) {
    let mut rig = rig(vendor, |setup| setup.fallbacks = vec!["fake-backup".into()]).await;
    for n in 0..8 {
        // The first model is down: every call falls over to the second.
        match &rig.anthropic {
            Some(anthropic) => anthropic.push(fake_anthropic::server_error()),
            None => rig.h.llm.push(Scripted::server_error()),
        }
        rig.say(dm(n)).await;
    }
    let turns = rig.turns().await;
    assert!(turns.iter().all(|run| run.model.contains("fake-backup")), "{:?}", turns.iter().map(|r| &r.model));
    assert_cached_from_the_third(&rig.cached_shares().await, "failover");
    rig.stop().await;
}

/// A window small enough that the history passes its budget within a few dozen turns,
/// compaction off: the history is cut in steps of a quarter of the window, so only the turn
/// that cuts reads the history again; every other turn keeps the start of the one before.
async fn past_the_history_budget(vendor: Vendor) {
    let context = ContextSettings {
        context_window: 24_000,
        history: HistoryConfig::default(),
        compaction: CompactionConfig { max_messages: 10_000, context_share: 100.0, ..CompactionConfig::default() },
    };
    let mut rig = rig(vendor, |setup| setup.settings.context = context).await;
    let long = |n: usize| format!("{} {}", words(n), "Some more detail on that, as people write. ".repeat(20));
    for n in 0..45 {
        rig.say(InboundMessage::user("telegram", OWNER, person(OWNER, "Olga"), &long(n))).await;
    }
    let shares = rig.cached_shares().await;
    let first_sent = |request: &serde_json::Value| switchboard_testkit::fake_llm::user_texts(request).first().cloned();
    let firsts: Vec<Option<String>> = match &rig.anthropic {
        Some(anthropic) => anthropic.requests().iter().map(anthropic_first_user_text).collect(),
        None => rig.h.llm.requests().iter().map(first_sent).collect(),
    };
    let cut_at: Vec<usize> = (1..firsts.len()).filter(|&turn| firsts[turn] != firsts[turn - 1]).collect();
    assert!((1..=3).contains(&cut_at.len()), "the history was cut at turns {cut_at:?}: {shares:?}");
    assert!(cut_at.windows(2).all(|pair| pair[1] - pair[0] >= 5), "cuts too close: {cut_at:?}");
    // Past the budget (from the first cut on), every turn but those that cut is served from the cache.
    for (turn, share) in shares.iter().enumerate().skip(cut_at[0]) {
        assert!(*share >= 90 || cut_at.contains(&turn), "turn {turn} missed the cache without a cut: {shares:?}");
    }
    rig.stop().await;
}

/// The text of a request's newest user message that has one (OpenAI's string content, or the
/// first text block of Anthropic's; a message of tool results only has none).
fn newest_user_text(request: &serde_json::Value) -> Option<String> {
    let messages = request["messages"].as_array()?;
    messages.iter().rev().filter(|message| message["role"] == "user").find_map(|message| match &message["content"] {
        serde_json::Value::String(text) => Some(text.clone()),
        content => content.as_array()?.iter().find_map(|block| block["text"].as_str().map(str::to_owned)),
    })
}

fn anthropic_first_user_text(request: &serde_json::Value) -> Option<String> {
    let messages = request["messages"].as_array()?;
    let text = messages.first()?["content"].as_array()?.iter().find_map(|block| block["text"].as_str())?;
    Some(switchboard_testkit::fake_llm::without_context_line(text).to_owned())
}

/// A compaction changes the prefix once: the turn after it still reads the tools and the
/// system prompt from the cache, and the turns after that are cached as before. Its memory
/// flush repeats the turn's request, and its summary the flush's, so the cache serves both.
async fn across_a_compaction(vendor: Vendor) {
    let compaction = CompactionConfig { max_messages: 20, keep_recent_messages: 8, ..CompactionConfig::default() };
    let mut rig = rig(vendor, |setup| setup.settings.context.compaction = compaction).await;
    let mut compacted_at = None;
    for n in 0..14 {
        rig.say(dm(n)).await;
        // The compaction runs after the turn, before the next message's turn starts.
        if compacted_at.is_none() && rig.h.store.session_summary(&format!("telegram:{OWNER}")).await.unwrap().is_some()
        {
            compacted_at = Some(n - 1);
        }
    }
    let compacted_at = compacted_at.expect("the conversation was never compacted");
    let turns = rig.turns().await;
    let after = &turns[compacted_at + 1];
    assert!(after.usage.cache_read_tokens >= 1024, "the shared head is cached: {:?}", after.usage);
    let shares: Vec<u64> = turns.iter().map(|run| run.usage.cached_percent()).collect();
    assert!(
        shares[compacted_at + 2..].iter().all(|&share| share >= 90),
        "after compacting at {compacted_at}: {shares:?}"
    );
    // The memory flush starts as the turn before it did: the cache serves nearly all of it.
    let runs = rig.h.store.recent_runs(1000).await.unwrap();
    let flushes: Vec<u64> =
        runs.iter().filter(|run| run.kind == RunKind::MemoryFlush).map(|run| run.usage.cached_percent()).collect();
    assert!(!flushes.is_empty() && flushes.iter().all(|&share| share >= 90), "flushes' cached shares: {flushes:?}");
    // So does the summary, up to the messages the compaction keeps.
    let summaries: Vec<u64> =
        runs.iter().filter(|run| run.kind == RunKind::Summary).map(|run| run.usage.cached_percent()).collect();
    assert!(
        !summaries.is_empty() && summaries.iter().all(|&share| share >= 90),
        "summaries' cached shares: {summaries:?}"
    );
    rig.stop().await;
}

macro_rules! on_both_vendors {
    ($($name:ident),* $(,)?) => {
        mod openai {
            $(#[tokio::test] async fn $name() { super::$name(super::Vendor::OpenAi).await; })*
        }
        mod anthropic {
            $(#[tokio::test] async fn $name() { super::$name(super::Vendor::Anthropic).await; })*
        }
    };
}

on_both_vendors!(
    a_direct_chat_across_minutes,
    a_group_taking_turns,
    recall_on,
    failing_over_to_a_second_model,
    past_the_history_budget,
    across_a_compaction,
);
