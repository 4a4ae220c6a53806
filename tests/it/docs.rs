//! The documents a user reads point only at files they can open: every relative Markdown
//! link, every `docs/…` path and every capitalised `NAME.md` in the README, `docs/` and
//! `config.example.toml` names a file of this repository.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README, every Markdown file under `docs/`, and the example config.
fn documents() -> Vec<PathBuf> {
    let mut found = vec![root().join("README.md"), root().join("config.example.toml")];
    let mut dirs = vec![root().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                found.push(path);
            }
        }
    }
    found
}

/// Whether some file of the repository (outside `target/` and `.git/`) is called `name`.
fn repository_has_file_named(name: &str) -> bool {
    let mut dirs = vec![root()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let file_name = entry.file_name();
            if path.is_dir() {
                if !matches!(file_name.to_str(), Some("target" | ".git" | "node_modules")) {
                    dirs.push(path);
                }
            } else if file_name == name {
                return true;
            }
        }
    }
    false
}

/// The relative targets of `[text](target)` links, without their `#anchor`.
fn relative_links(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            let target = &rest[..rest.find(')')?];
            let target = target.split('#').next()?;
            let external = target.contains("://") || target.starts_with("mailto:");
            (!target.is_empty() && !external).then_some(target)
        })
        .collect()
}

/// The words of `text` that look like file names: runs of path characters.
fn path_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_-./".contains(c)))
        .map(|word| word.trim_end_matches('.'))
        .filter(|word| !word.is_empty())
}

fn is_capitalised_markdown_name(word: &str) -> bool {
    word.strip_suffix(".md").is_some_and(|stem| {
        stem.starts_with(|c: char| c.is_ascii_uppercase())
            && stem.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c == '-')
    })
}

fn dangling_references(document: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(document).unwrap();
    let dir = document.parent().unwrap();
    let mut dangling = Vec::new();
    for target in relative_links(&text) {
        if !dir.join(target).exists() {
            dangling.push(format!("link to {target}"));
        }
    }
    for word in path_words(&text) {
        if word.starts_with("docs/") && !root().join(word).exists() {
            dangling.push(format!("path {word}"));
        } else if is_capitalised_markdown_name(word) && !repository_has_file_named(word) {
            dangling.push(format!("file {word}"));
        }
    }
    dangling
}

#[test]
fn every_file_the_documents_name_is_in_the_repository() {
    let dangling: Vec<String> = documents()
        .iter()
        .flat_map(|document| {
            let name = document.strip_prefix(root()).unwrap_or(document).display().to_string();
            dangling_references(document).into_iter().map(move |what| format!("{name}: {what}"))
        })
        .collect();
    assert!(dangling.is_empty(), "documents name files that are not in the repository:\n{}", dangling.join("\n"));
}

#[test]
fn a_name_that_is_nowhere_is_found() {
    let doc = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(doc.path(), "See [x](nowhere.md), docs/nowhere.md and DESIGN.md; MEMORY.md is fine.").unwrap();
    let found = dangling_references(doc.path());
    assert_eq!(found, ["link to nowhere.md", "path docs/nowhere.md", "file DESIGN.md"]);
}
