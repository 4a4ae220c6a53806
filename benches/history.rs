//! The history of one turn: what the worker does with a session's stored messages before the
//! model call (`src/worker/turn.rs`, `attempt`). `ContextEngine::prepare` fits them into the
//! input budget (the agent's tool schemas counted, whole old turns dropped, tool results
//! trimmed or cleared, the oldest messages dropped, tool-call pairing and user/assistant
//! alternation repaired); the compaction check (`HistoryShape`) estimates the same history
//! again to decide whether the session is due for a summary.
//!
//! `cargo bench -p switchboard --bench history`

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark fails loudly on a broken fixture")]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use switchboard::context::compaction::HistoryShape;
use switchboard::context::{ContextEngine, ContextSettings, Target};
use switchboard::provider::ChatMessage;
use switchboard::tokens;
use switchboard::tools::ToolFilter;

mod support;

/// Stored messages of the session: more than the default `agent.history_limit` (200) loads,
/// as a worker configured for long sessions reads them.
const SESSION_MESSAGES: usize = 500;

fn history(c: &mut Criterion) {
    let workspace = tempfile::tempdir().expect("a temporary directory");
    let agent = support::agent(workspace.path());
    let history = support::session(SESSION_MESSAGES);
    let system_prompt = "You are a personal AI assistant running inside switchboard.\n\n".repeat(120);
    let summary = "Ann and the agent fixed the nightly backup job several times; ".repeat(25);
    let input = ChatMessage::user("It failed again tonight. Same thing?");
    let filter = ToolFilter::All;
    let stored: usize = history.iter().map(|m| m.content.chars().count()).sum();
    println!(
        "session: {} messages, {stored} characters, ~{} tokens estimated",
        history.len(),
        tokens::raw_messages(&history)
    );

    let session = switchboard_channels::contract::SessionKey::stored("bench:1");
    let mut group = c.benchmark_group("history");
    for (name, window) in [("128k", 128_000), ("16k", 16_000)] {
        let engine = ContextEngine::new(ContextSettings { context_window: window, ..ContextSettings::default() });
        let prepared = engine.prepare(
            Target::primary(&agent),
            &session,
            &system_prompt,
            history.clone(),
            Some(&summary),
            &input,
            &filter,
        );
        println!(
            "{name} window: {} messages kept, ~{} tokens of history",
            prepared.history.len(),
            tokens::raw_messages(&prepared.history)
        );
        group.bench_function(format!("prepare/{name}"), |b| {
            b.iter_batched(
                || history.clone(),
                |history| {
                    engine.prepare(
                        Target::primary(&agent),
                        &session,
                        &system_prompt,
                        history,
                        Some(&summary),
                        black_box(&input),
                        &filter,
                    )
                },
                BatchSize::LargeInput,
            )
        });
        let transcript = [input.clone(), ChatMessage::assistant("Yes: the same permission problem.", Vec::new())];
        group.bench_function(format!("compaction_check/{name}"), |b| {
            b.iter(|| {
                let shape = HistoryShape::of(black_box(&history));
                shape.due_after(&engine, &agent, &transcript, SESSION_MESSAGES)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, history);
criterion_main!(benches);
