//! The bootstrap files as last read, so a turn reads them again only when one changed.
//!
//! A copy is used when nothing it came from changed since: every directory it looked in (the
//! workspace, the memory file's directory) and every file it found has the same modification
//! time, size and inode. A file that was missing is still missing while its directory is
//! unchanged, since creating, renaming or deleting a file changes the directory's time; so a
//! turn costs a few `stat` calls on the runtime thread instead of a trip to the blocking pool
//! and an `open` of every file. A copy is kept only when everything it depends on is
//! [`settled`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};

use super::WorkspaceFiles;
use super::stamp::{Seen, settled, stamp};
/// Copies kept at most (one per agent and memory scope in use); beyond it the cache starts over.
const MAX_COPIES: usize = 4096;

/// Which read a copy answers: the workspace, the caps, and the memory file of the scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub dir: PathBuf,
    pub max_chars: usize,
    pub memory_max_chars: usize,
    pub owner: bool,
    pub memory_file: Option<PathBuf>,
}

impl Key {
    /// The directories a copy depends on, and the files in them.
    fn watched(&self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut dirs = vec![self.dir.clone()];
        let names = super::BOOTSTRAP_FILES.iter().chain([&super::ONBOARDING]).map(|file| file.name);
        let mut files: Vec<PathBuf> = names.map(|name| self.dir.join(name)).collect();
        if let Some(memory) = &self.memory_file {
            let memory = self.dir.join(memory);
            if let Some(parent) = memory.parent().filter(|parent| *parent != self.dir) {
                dirs.push(parent.to_owned());
            }
            files.push(memory);
        }
        (dirs, files)
    }
}

/// The stamps of what a copy depends on, taken before the files are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stamps {
    dirs: Vec<Seen>,
    files: Vec<Seen>,
}

struct Copy {
    stamps: Stamps,
    files: WorkspaceFiles,
}

#[derive(Default)]
pub(super) struct FileCache {
    copies: Mutex<HashMap<Key, Copy>>,
}

/// The process's cache: files are shared by every agent and run that reads them.
pub(super) fn shared() -> &'static FileCache {
    static CACHE: OnceLock<FileCache> = OnceLock::new();
    CACHE.get_or_init(FileCache::default)
}

impl FileCache {
    /// The copy for `key` if nothing it depends on changed; `None` otherwise.
    pub(super) fn fresh(&self, key: &Key) -> Option<WorkspaceFiles> {
        // Copied out, so the lock is not held over the `stat` calls.
        let (seen, files) = {
            let copies = self.copies.lock().unwrap_or_else(PoisonError::into_inner);
            let copy = copies.get(key)?;
            (copy.stamps.clone(), copy.files.clone())
        };
        let (dirs, paths) = key.watched();
        let dirs_same = dirs.iter().zip(&seen.dirs).all(|(dir, seen)| stamp(dir).ok() == Some(*seen));
        // A file that was missing is still missing while its directory is unchanged.
        let files_same = dirs_same
            && paths.iter().zip(&seen.files).all(|(path, seen)| seen.is_none() || stamp(path).ok() == Some(*seen));
        files_same.then_some(files)
    }

    /// Keeps `files`, read after `stamps` were taken, unless something changed too recently
    /// to be relied on.
    pub(super) fn keep(&self, key: Key, stamps: Stamps, files: WorkspaceFiles) {
        if !stamps.dirs.iter().chain(&stamps.files).all(settled) {
            return;
        }
        let mut copies = self.copies.lock().unwrap_or_else(PoisonError::into_inner);
        if copies.len() >= MAX_COPIES {
            copies.clear();
        }
        copies.insert(key, Copy { stamps, files });
    }
}

/// The stamps of everything `key` depends on; `None` when one cannot be read (then nothing is
/// kept: the files are read on every turn, and the read reports the error).
pub(super) fn stamps(key: &Key) -> Option<Stamps> {
    let (dirs, files) = key.watched();
    let dirs = dirs.iter().map(|dir| stamp(dir)).collect::<Result<Vec<_>, _>>().ok()?;
    let files = files.iter().map(|file| stamp(file)).collect::<Result<Vec<_>, _>>().ok()?;
    Some(Stamps { dirs, files })
}

#[cfg(test)]
mod tests {
    use std::fs::{self, File, FileTimes};
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::workspace::FileText;
    use crate::workspace::memory::MemoryScope;

    /// Sets `path`'s modification time a minute back, as if it had been written long ago.
    fn settle(path: &Path) {
        let long_ago = SystemTime::now() - Duration::from_secs(60);
        File::open(path).unwrap().set_times(FileTimes::new().set_modified(long_ago)).unwrap();
    }

    fn key(dir: &Path) -> Key {
        Key {
            dir: dir.to_owned(),
            max_chars: 1000,
            memory_max_chars: 1000,
            owner: true,
            memory_file: MemoryScope::Owner.file(),
        }
    }

    async fn load(dir: &Path) -> WorkspaceFiles {
        WorkspaceFiles::load(dir, 1000, 1000, &MemoryScope::Owner).await
    }

    fn text(file: &FileText) -> &str {
        match file {
            FileText::Text { text, .. } => text,
            other => panic!("not read: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_settled_workspace_is_served_from_memory_until_something_changes() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("SOUL.md"), "Calm.").unwrap();
        settle(&dir.path().join("SOUL.md"));
        settle(dir.path());
        assert_eq!(text(&load(dir.path()).await.soul), "Calm.");
        assert!(shared().fresh(&key(dir.path())).is_some(), "kept once everything settled");

        // A new file changes the directory; an edit changes the file: both are seen at once.
        fs::write(dir.path().join("AGENTS.md"), "Be brief.").unwrap();
        assert!(shared().fresh(&key(dir.path())).is_none());
        assert_eq!(text(&load(dir.path()).await.agents), "Be brief.");
        fs::write(dir.path().join("SOUL.md"), "Cheerful.").unwrap();
        assert_eq!(text(&load(dir.path()).await.soul), "Cheerful.");
    }

    #[tokio::test]
    async fn a_file_replaced_by_another_of_the_same_size_and_time_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let soul = dir.path().join("SOUL.md");
        fs::write(&soul, "Calm.").unwrap();
        settle(&soul);
        settle(dir.path());
        assert_eq!(text(&load(dir.path()).await.soul), "Calm.");
        // An editor's save: a new file renamed over the old one, its time set back as well.
        let new = dir.path().join(".SOUL.md.swp");
        fs::write(&new, "Stern.").unwrap();
        settle(&new);
        fs::rename(&new, &soul).unwrap();
        settle(dir.path());
        assert_eq!(text(&load(dir.path()).await.soul), "Stern.");
    }

    #[tokio::test]
    async fn files_written_just_now_are_not_relied_on() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("SOUL.md"), "Calm.").unwrap();
        load(dir.path()).await;
        assert!(shared().fresh(&key(dir.path())).is_none(), "a change in the same clock tick could go unseen");
    }
}
