//! The checker checked: planted upward imports, same-layer imports, cycles and unlisted modules
//! are reported; comments and strings are not read as code.

use super::check::{Finding, SourceFile, cycle_findings, layer_findings};

fn upward(file: &str, line: usize, from: (&str, usize), to: (&str, usize)) -> Finding {
    let (from, from_layer) = (from.0.to_owned(), from.1);
    let (to, to_layer) = (to.0.to_owned(), to.1);
    Finding::Upward { file: file.to_owned(), line, from, from_layer, to, to_layer }
}

#[test]
fn a_planted_upward_import_is_reported_with_file_line_and_layers() {
    let files = [
        SourceFile::new("config/mod.rs", "mod queue;\npub struct Config;\n"),
        SourceFile::new("config/queue.rs", "//! Queue settings.\n\nuse crate::worker::QueueMode;\n"),
        SourceFile::new("worker/mod.rs", "use crate::config::Config;\npub enum QueueMode {}\n"),
    ];
    let findings = layer_findings(&files, &[&["config"], &["worker"]]);
    assert_eq!(findings, [upward("config/queue.rs", 3, ("config", 0), ("worker", 1))]);
}

#[test]
fn grouped_nested_and_inline_paths_are_seen_but_comments_and_strings_are_not() {
    let source = r##"
// use crate::worker::Ignored;
/* use crate::worker::Ignored; /* nested */ crate::worker::Ignored */
const TEXT: &str = "crate::worker::Ignored";
const RAW: &str = r#"crate::worker::"Ignored"#;
const QUOTE: char = '"';
fn lifetime<'a>(x: &'a str) -> &'a str { x }
use crate::{clock::Clock, worker::{self, QueueMode}};
fn run() { crate::worker::start::<u8>(); }
#[cfg(test)]
mod tests {
    use super::*;
    use super::super::worker::Tested;
}
"##;
    let files = [
        SourceFile::new("config/mod.rs", source),
        SourceFile::new("clock.rs", ""),
        SourceFile::new("worker.rs", "use crate::{clock, config::Config};\nuse crate::worker::Fine;"),
    ];
    let findings = layer_findings(&files, &[&["clock"], &["config"], &["worker"]]);
    let at = |line| upward("config/mod.rs", line, ("config", 1), ("worker", 2));
    assert_eq!(findings, [at(8), at(8), at(9), at(13)]);
}

#[test]
fn a_same_layer_import_is_reported() {
    let files = [SourceFile::new("clock.rs", ""), SourceFile::new("config.rs", "use crate::clock::Clock;\n")];
    let findings = layer_findings(&files, &[&["clock", "config"]]);
    assert_eq!(findings, [upward("config.rs", 1, ("config", 0), ("clock", 0))]);
}

#[test]
fn files_naming_each_other_are_a_cycle_but_a_test_module_naming_its_user_is_not() {
    let env = "use super::load::Origins;\npub fn apply() {}\n";
    let env_tests = "#[cfg(test)]\nmod tests {\n    use super::super::load::load;\n}\n";
    let load = "use super::env::apply;\npub type Origins = ();\npub fn load() {}\n";
    let tree = |env: &str| {
        [
            SourceFile::new("config/mod.rs", "mod env;\nmod load;\npub use load::load;\n"),
            SourceFile::new("config/env.rs", env),
            SourceFile::new("config/load.rs", load),
        ]
    };
    let cycle = |file: &str, from: &str, to: &str, to_file: &str| Finding::Cycle {
        file: file.into(),
        line: 1,
        from: from.into(),
        to: to.into(),
        to_file: to_file.into(),
    };
    assert_eq!(
        cycle_findings(&tree(&format!("{env}{env_tests}"))),
        [
            cycle("config/env.rs", "config::env", "config::load", "config/load.rs"),
            cycle("config/load.rs", "config::load", "config::env", "config/env.rs"),
        ]
    );
    assert_eq!(cycle_findings(&tree(&format!("pub fn apply() {{}}\n{env_tests}"))), []);
}

#[test]
fn a_module_without_a_layer_and_an_unknown_target_are_reported() {
    let files = [
        SourceFile::new("config.rs", "use crate::nowhere::Thing;\n"),
        SourceFile::new("assembly/mod.rs", "use crate::config::Config;\n"),
    ];
    let findings = layer_findings(&files, &[&["config"]]);
    let unknown = Finding::UnknownTarget { file: "config.rs".into(), line: 1, name: "nowhere".into() };
    assert_eq!(findings, [Finding::Unlisted { module: "assembly".into() }, unknown]);
}
