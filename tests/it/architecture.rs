//! The layer rule of `src/` and `channels/src/`: a top-level module may name (`crate::…`,
//! `super::…`) only modules of strictly lower layers, and the files of one top-level module
//! (of either tree) do not import each other in a cycle. `docs/architecture.md`'s module map
//! lists the same layers, and a test here holds it to them.
//!
//! The check reads the sources as text (comments and string literals blanked out), so it sees
//! `#[cfg(test)]` code and feature-gated modules too. A top-level module missing from its
//! table fails the test: a new module has to be given a layer, not ignored.

use std::path::Path;

use check::{Finding, cycle_findings, layer_findings, read_tree};
use doc_tables::{CHANNELS_TABLE, SRC_TABLE, assert_doc_table, read_doc};

mod check;
mod doc_tables;
mod self_tests;

/// `src/`, lowest layer first. Same-layer imports are refused like upward ones.
const SRC_LAYERS: &[&[&str]] = &[
    // Time zones, which the config checks its zone names against.
    &["zone"],
    &["clock", "config", "systemd"],
    &["hygiene", "telemetry", "provider", "workspace", "schedule"],
    // Token estimation reads provider messages, so it sits just above the provider.
    &["store", "prompt", "tokens"],
    &["tools"],
    &["users"],
    // The owner's operations, which buttons, chat commands, the console and the CLI share.
    &["control"],
    &["agent"],
    &["context"],
    &["scheduler", "subagents"],
    &["worker"],
    // The edge: what switchboard reports through; the composition root that builds every part
    // from the config; the daemon that runs what was built; the command line over all of it.
    &["metrics", "fuzzing"],
    // The owner console's desk, which the assembly hands to the API channel.
    &["console"],
    &["assembly"],
    &["daemon", "doctor"],
    &["cli"],
];

/// `channels/src/`. The adapters share the top layer, so none may import another.
const CHANNELS_LAYERS: &[&[&str]] = &[
    &["contract", "hex"],
    &["subject", "gauge", "meters", "chunking", "policy", "media_files"],
    &["bus", "pairing"],
    &["control"],
    &["delivery"],
    &["api", "telegram", "discord", "matrix"],
];

#[test]
fn src_imports_only_lower_layers() {
    let files = read_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert_clean(&layer_findings(&files, SRC_LAYERS), "src/");
}

#[test]
fn channels_import_only_lower_layers() {
    let files = read_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("channels/src"));
    assert_clean(&layer_findings(&files, CHANNELS_LAYERS), "channels/src/");
}

#[test]
fn files_of_a_src_module_form_no_cycle() {
    let files = read_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert_clean(&cycle_findings(&files), "src/");
}

#[test]
fn files_of_a_channels_module_form_no_cycle() {
    let files = read_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("channels/src"));
    assert_clean(&cycle_findings(&files), "channels/src/");
}

#[test]
fn the_docs_module_map_lists_the_src_layers() {
    assert_doc_table(&read_doc(), &SRC_TABLE, SRC_LAYERS);
}

#[test]
fn the_docs_module_map_lists_the_channels_layers() {
    assert_doc_table(&read_doc(), &CHANNELS_TABLE, CHANNELS_LAYERS);
}

fn assert_clean(findings: &[Finding], tree: &str) {
    let listed: Vec<String> = findings.iter().map(ToString::to_string).collect();
    assert!(listed.is_empty(), "{} layer finding(s) in {tree}:\n{}", listed.len(), listed.join("\n"));
}
