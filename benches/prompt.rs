//! The system prompt of a turn (`src/worker/prompt.rs`, `system_prompt`): the bootstrap files
//! of the workspace read (from the cache that `WorkspaceFiles::load` keeps, or from disk when
//! one changed), the offered tools' specs, and `prompt::build` assembling the sections. The
//! workspace is a temporary directory with realistic files (`support::WORKSPACE_FILES`).
//!
//! `cargo bench -p switchboard --bench prompt`

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark fails loudly on a broken fixture")]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use switchboard::config::Level;
use switchboard::prompt::{self, PromptInput, PromptMode, PromptSettings, Sender};
use switchboard::tokens;
use switchboard::tools::ToolFilter;
use switchboard::workspace::WorkspaceFiles;
use switchboard::workspace::memory::MemoryScope;

mod support;

fn prompt(c: &mut Criterion) {
    let workspace = tempfile::tempdir().expect("a temporary directory");
    let dir = workspace.path();
    support::write_workspace(dir);
    // The cache keeps a copy only of files whose times are settled (2 s old).
    std::thread::sleep(Duration::from_millis(2_100));
    let agent = support::agent(dir);
    let settings = PromptSettings::default();
    let scope = MemoryScope::Owner;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a current-thread runtime");
    let load =
        || runtime.block_on(WorkspaceFiles::load(dir, settings.max_file_chars, settings.memory_max_chars, &scope));
    let files = load();
    let tools = agent.tool_specs(&ToolFilter::All);
    let skills = switchboard::workspace::skills::Catalog::default();
    let session_key = switchboard_channels::contract::SessionKey::stored("telegram:123456789");
    let input = |mode| PromptInput {
        mode,
        files: &files,
        workspace: dir,
        tools: &tools,
        skills: &skills,
        operator: &agent.settings().system_prompt,
        sender: Sender::Person { id: "123456789", name: "Ann", level: Level::Owner },
        channel: "telegram",
        is_group: false,
        memory: &scope,
        agent: &agent.settings().name,
        session_key: &session_key,
    };
    let full = prompt::build(&input(PromptMode::Full));
    println!(
        "full prompt: {} characters, ~{} tokens; {} tools, ~{} tokens of schemas",
        full.chars().count(),
        full.len().div_ceil(4),
        tools.len(),
        tokens::raw_tools(&tools)
    );

    let mut group = c.benchmark_group("prompt");
    group.bench_function("files/cached", |b| b.iter(load));
    group.bench_function("files/read", |b| {
        b.iter(|| WorkspaceFiles::load_now(black_box(dir), settings.max_file_chars, settings.memory_max_chars, &scope))
    });
    group.bench_function("tool_specs", |b| {
        b.iter(|| {
            let specs = agent.tool_specs(black_box(&ToolFilter::All));
            (tokens::raw_tools(&specs), specs)
        })
    });
    group.bench_function("build/full", |b| b.iter(|| prompt::build(black_box(&input(PromptMode::Full)))));
    group.bench_function("build/minimal", |b| b.iter(|| prompt::build(black_box(&input(PromptMode::Minimal)))));
    group.finish();
}

criterion_group!(benches, prompt);
criterion_main!(benches);
