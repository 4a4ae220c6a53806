//! The agent's workspace: the bootstrap files the owner edits to shape the agent (persona,
//! instructions, memory), their templates, and reading them for a run's system prompt.
//!
//! An edit takes effect on the next message without a restart: each run checks that nothing
//! changed since the files were last read (see `cache`) and reads them again when it did. They are small by design; each is capped so that a file grown by
//! accident (or by the agent appending to `MEMORY.md`) cannot crowd the conversation out of
//! the model's context.

pub mod bm25;
mod cache;
pub mod init;
pub mod mark;
pub mod memory;
pub mod outbox;
pub mod protected;
pub mod skills;
mod stamp;

use std::path::Path;

use memory::{MemoryScope, Reach, Target};

/// One bootstrap file: its name in the workspace, what it is for, and its template.
#[derive(Debug, Clone, Copy)]
pub struct BootstrapFile {
    pub name: &'static str,
    /// One line for the owner (`switchboard init`) and the model (the workspace section).
    pub purpose: &'static str,
    pub template: &'static str,
}

/// The bootstrap files, in the order `switchboard init` reports them.
pub const BOOTSTRAP_FILES: [BootstrapFile; 7] = [
    BootstrapFile {
        name: "AGENTS.md",
        purpose: "operating instructions: how to work, what to always or never do",
        template: include_str!("../templates/workspace/AGENTS.md"),
    },
    BootstrapFile {
        name: "SOUL.md",
        purpose: "persona: character, tone and style",
        template: include_str!("../templates/workspace/SOUL.md"),
    },
    BootstrapFile {
        name: "USER.md",
        purpose: "about the owner (read in the owner's direct chats only)",
        template: include_str!("../templates/workspace/USER.md"),
    },
    BootstrapFile {
        name: "IDENTITY.md",
        purpose: "the agent's name and how it presents itself",
        template: include_str!("../templates/workspace/IDENTITY.md"),
    },
    BootstrapFile {
        name: "TOOLS.md",
        purpose: "notes on tools and local conventions",
        template: include_str!("../templates/workspace/TOOLS.md"),
    },
    BootstrapFile {
        name: "HEARTBEAT.md",
        purpose: "checklist of periodic tasks for heartbeat wake-ups",
        template: include_str!("../templates/workspace/HEARTBEAT.md"),
    },
    BootstrapFile {
        name: "MEMORY.md",
        purpose: "lasting facts from the owner's direct chats; append new ones here",
        template: include_str!("../templates/workspace/MEMORY.md"),
    },
];

/// `BOOTSTRAP.md`: the first-run conversation. Not one of [`BOOTSTRAP_FILES`]: `init` writes it
/// only into a new workspace, and the agent deletes it once onboarding is done.
pub const ONBOARDING: BootstrapFile = BootstrapFile {
    name: "BOOTSTRAP.md",
    purpose: "the first-run conversation with the owner; delete it when done",
    template: include_str!("../templates/workspace/BOOTSTRAP.md"),
};

/// Which end of an over-long file is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Instructions: the top matters most.
    Head,
    /// `MEMORY.md`: the agent appends, so the newest facts are at the end.
    Tail,
}

/// A bootstrap file as read for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileText {
    /// The file is not there: simply left out of the prompt.
    Missing,
    /// The file exists but could not be read; the prompt says so instead of pretending it
    /// is empty.
    Unreadable(String),
    /// The text without `<!-- … -->` comments (the owner's notes to themselves), trimmed;
    /// `cut_chars` > 0 when the cap removed that many characters.
    Text { text: String, cut_chars: usize },
}

impl FileText {
    /// The section body for this file: its text with a note when cut, or a note that it could
    /// not be read. `None` when missing or empty.
    pub fn render(&self, name: &str, keep: Keep) -> Option<String> {
        match self {
            FileText::Missing => None,
            FileText::Unreadable(why) => Some(format!("({name} exists but could not be read: {why})")),
            FileText::Text { text, .. } if text.is_empty() => None,
            FileText::Text { text, cut_chars: 0 } => Some(text.clone()),
            FileText::Text { text, cut_chars } => Some(match keep {
                Keep::Head => format!("{text}\n[… {name} cut here: {cut_chars} more characters not shown]"),
                Keep::Tail => format!("[… {name}: {cut_chars} earlier characters not shown]\n{text}"),
            }),
        }
    }
}

/// The bootstrap files of a workspace, read for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceFiles {
    pub agents: FileText,
    pub soul: FileText,
    pub user: FileText,
    pub identity: FileText,
    pub tools: FileText,
    pub heartbeat: FileText,
    pub memory: FileText,
    /// `BOOTSTRAP.md`, in the owner's scope only.
    pub onboarding: FileText,
}

impl Default for WorkspaceFiles {
    fn default() -> Self {
        let missing = || FileText::Missing;
        Self {
            agents: missing(),
            soul: missing(),
            user: missing(),
            identity: missing(),
            tools: missing(),
            heartbeat: missing(),
            memory: missing(),
            onboarding: missing(),
        }
    }
}

impl WorkspaceFiles {
    /// Reads every bootstrap file of `dir`, each capped at `max_chars`, and the memory of
    /// `scope` capped at `memory_max_chars`, keeping its end. `USER.md` and `MEMORY.md` are
    /// read only for the owner's scope; another scope's `memory` is its own file.
    pub async fn load(dir: &Path, max_chars: usize, memory_max_chars: usize, scope: &MemoryScope) -> Self {
        let key = cache::Key {
            dir: dir.to_owned(),
            max_chars,
            memory_max_chars,
            owner: scope.is_owner(),
            memory_file: scope.file(),
        };
        // A few `stat` calls of files the kernel has at hand: cheaper here than a hand-off.
        if let Some(files) = cache::shared().fresh(&key) {
            return files;
        }
        let dir = dir.to_owned();
        let scope = scope.clone();
        // One trip to the blocking pool for all seven files, not one per file.
        let read = tokio::task::spawn_blocking(move || {
            let stamps = cache::stamps(&key);
            let files = Self::load_now(&dir, max_chars, memory_max_chars, &scope);
            if let Some(stamps) = stamps {
                cache::shared().keep(key, stamps, files.clone());
            }
            files
        });
        read.await.unwrap_or_else(|err| {
            let unreadable = || FileText::Unreadable(format!("the read stopped: {err}"));
            Self {
                agents: unreadable(),
                soul: unreadable(),
                user: unreadable(),
                identity: unreadable(),
                tools: unreadable(),
                heartbeat: unreadable(),
                memory: unreadable(),
                onboarding: unreadable(),
            }
        })
    }

    /// [`WorkspaceFiles::load`] without the cache, blocking. Public for the benches only.
    #[doc(hidden)]
    pub fn load_now(dir: &Path, max_chars: usize, memory_max_chars: usize, scope: &MemoryScope) -> Self {
        let head = |name| read_capped(dir, name, max_chars, Keep::Head);
        Self {
            agents: head("AGENTS.md"),
            soul: head("SOUL.md"),
            user: if scope.is_owner() { head(memory::OWNER_PROFILE) } else { FileText::Missing },
            identity: head("IDENTITY.md"),
            tools: head("TOOLS.md"),
            heartbeat: head("HEARTBEAT.md"),
            memory: read_memory(dir, memory_max_chars, scope),
            onboarding: if scope.is_owner() { head(ONBOARDING.name) } else { FileText::Missing },
        }
    }
}

/// The scope's memory file. Outside the owner's scope the file must really be the scope's own
/// (not a link to the owner's memory or another chat's), as for the file tools.
fn read_memory(dir: &Path, max_chars: usize, scope: &MemoryScope) -> FileText {
    let Some(file) = scope.file() else { return FileText::Missing };
    let name = file.to_string_lossy();
    if !scope.is_owner() {
        let real = dir.canonicalize().and_then(|root| Ok((dir.join(&file).canonicalize()?, root)));
        match real {
            Ok((real, root)) => {
                if let Err(refusal) = memory::check_real_path(scope, &root, &real, Target::File, Reach::Workspace) {
                    tracing::warn!(file = %name, %refusal, "a chat's memory file leads elsewhere; leaving it out of the prompt");
                    return FileText::Unreadable(format!("it leads to another file: {refusal}"));
                }
            }
            // Missing: simply no memory yet. Other errors are for the read below to report.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return FileText::Missing,
            Err(_) => {}
        }
    }
    read_capped(dir, &name, max_chars, Keep::Tail)
}

/// Reads one file of the workspace, blocking (callers run it on the blocking pool). Errors
/// other than "not found" are logged and reported in the result, never turned into an empty
/// file.
pub fn read_capped(dir: &Path, name: &str, max_chars: usize, keep: Keep) -> FileText {
    let path = dir.join(name);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let text = strip_comments(&String::from_utf8_lossy(&bytes));
            // A template left as it came (a title and comments) says nothing to the model.
            let text = if only_headings(&text) { "" } else { text.trim() };
            let (text, cut_chars) = cap(text, max_chars, keep);
            FileText::Text { text, cut_chars }
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => FileText::Missing,
        Err(err) => {
            tracing::warn!(path = %path.display(), error = %err, "cannot read a workspace file; leaving it out of the prompt");
            FileText::Unreadable(err.to_string())
        }
    }
}

/// Removes `<!-- … -->` comments: the templates use them to tell the owner what to write,
/// which the model need not read on every run. An unclosed comment runs to the end.
pub fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        rest = match rest[start..].find("-->") {
            Some(end) => &rest[start + end + 3..],
            None => "",
        };
    }
    out.push_str(rest);
    // Comments leave runs of blank lines behind; fold them.
    let mut folded = String::with_capacity(out.len());
    let mut blank = 0;
    for line in out.lines() {
        blank = if line.trim().is_empty() { blank + 1 } else { 0 };
        if blank < 2 {
            folded.push_str(line.trim_end());
            folded.push('\n');
        }
    }
    folded
}

/// Whether every non-blank line is a Markdown heading.
fn only_headings(text: &str) -> bool {
    text.lines().map(str::trim).filter(|line| !line.is_empty()).all(|line| line.starts_with('#'))
}

/// Cuts `text` to at most `max_chars` characters, keeping its head or tail; returns the kept
/// text and how many characters went.
pub fn cap(text: &str, max_chars: usize, keep: Keep) -> (String, usize) {
    let total = text.chars().count();
    if total <= max_chars {
        return (text.to_owned(), 0);
    }
    let cut = total - max_chars;
    let kept = match keep {
        Keep::Head => text.chars().take(max_chars).collect(),
        Keep::Tail => text.chars().skip(cut).collect(),
    };
    (kept, cut)
}

#[cfg(test)]
mod tests;
