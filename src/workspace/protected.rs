//! The files every chat of an agent runs under: its persona, instructions, heartbeat checklist,
//! onboarding and skills (`[workspace] protected`). Anyone may read them, as before; only runs
//! of an admin or the owner may change them, since a change reaches every chat. The owner's
//! `MEMORY.md` and `USER.md` are on the list too, and stay behind their memory scope besides.

use std::path::{Component, Path, PathBuf};

use crate::config::DEFAULT_PROTECTED;

/// The protected paths of a workspace, relative to it: each covers itself and, for a
/// directory, everything below it. Compared ignoring case, since some file systems do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedFiles {
    /// Lowercase, `/`-separated, without a trailing `/`.
    entries: Vec<String>,
    /// As configured (without the trailing `/`), for messages and for the sandbox's mounts.
    shown: Vec<String>,
    /// For each of `shown`: configured with a trailing `/`, as a directory.
    dirs: Vec<bool>,
}

/// One protected path, joined to a workspace root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedPath {
    pub path: PathBuf,
    /// Configured as a directory (`skills/`).
    pub is_dir: bool,
}

impl Default for ProtectedFiles {
    fn default() -> Self {
        Self::new(&DEFAULT_PROTECTED.map(str::to_owned))
    }
}

impl ProtectedFiles {
    /// The list of `[workspace] protected` (checked when the config loads).
    pub fn new(configured: &[String]) -> Self {
        let configured = configured.iter().filter(|entry| !entry.trim_end_matches('/').is_empty());
        let (shown, dirs): (Vec<String>, Vec<bool>) =
            configured.map(|entry| (entry.trim_end_matches('/').to_owned(), entry.ends_with('/'))).unzip();
        Self { entries: shown.iter().map(|entry| lowercase_path(Path::new(entry))).collect(), shown, dirs }
    }

    /// Whether `relative` (a real path relative to the workspace root) is protected or inside
    /// a protected directory.
    pub fn protects(&self, relative: &Path) -> bool {
        let path = lowercase_path(relative);
        self.entries.iter().any(|entry| path == *entry || path.strip_prefix(entry.as_str()).is_some_and(is_below))
    }

    /// Each protected path as configured, joined to `root`.
    pub fn paths_in(&self, root: &Path) -> Vec<ProtectedPath> {
        let paths = self.shown.iter().zip(&self.dirs);
        paths.map(|(entry, &is_dir)| ProtectedPath { path: root.join(entry), is_dir }).collect()
    }

    /// The list as the refusal names it: `SOUL.md, IDENTITY.md, …`.
    pub fn listed(&self) -> String {
        self.shown.join(", ")
    }
}

fn is_below(rest: &str) -> bool {
    rest.starts_with('/')
}

fn lowercase_path(path: &Path) -> String {
    let parts: Vec<String> = path
        .components()
        .filter_map(|part| match part {
            Component::Normal(name) => Some(name.to_string_lossy().to_lowercase()),
            _ => None,
        })
        .collect();
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_cover_the_persona_files_and_everything_under_skills_whatever_the_case() {
        let protected = ProtectedFiles::default();
        for path in ["SOUL.md", "soul.MD", "skills", "skills/x/SKILL.md", "./AGENTS.md", "BOOTSTRAP.md", "USER.md"] {
            assert!(protected.protects(Path::new(path)), "{path}");
        }
        for path in ["notes.md", "skillsets/x.md", "SOUL.md.bak", "memory/groups/x.md", "docs/SOUL.md"] {
            assert!(!protected.protects(Path::new(path)), "{path}");
        }
    }

    #[test]
    fn a_configured_list_replaces_the_defaults() {
        let protected = ProtectedFiles::new(&["rules/".into(), "SOUL.md".into()]);
        assert!(protected.protects(Path::new("rules/a.md")));
        assert!(!protected.protects(Path::new("AGENTS.md")));
        assert_eq!(protected.listed(), "rules, SOUL.md");
        let paths = protected.paths_in(Path::new("/w"));
        let kinds: Vec<(&Path, bool)> = paths.iter().map(|p| (p.path.as_path(), p.is_dir)).collect();
        assert_eq!(kinds, [(Path::new("/w/rules"), true), (Path::new("/w/SOUL.md"), false)]);
    }
}
