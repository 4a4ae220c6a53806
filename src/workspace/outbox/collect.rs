//! Moving a run's outbox files to where they are sent from, and deleting what is old.

use std::collections::{HashMap, HashSet};
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use switchboard_channels::contract::SessionKey;

use super::{MAX_FILES, OUTBOX_DIR, RUNS_DIR, SENT_DIR, run_folder, sent_folder, token};
use crate::workspace::memory::{MemoryScope, Reach, Target, check_real_path};

/// Folders below a run's outbox that are looked into (`outbox/a/b/c/file`).
const MAX_DEPTH: usize = 4;
/// How often one workspace's old outbox folders are looked for.
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// A file ready to go: where it is kept and the name it is sent under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentFile {
    /// Absolute, in `outbox/sent/<token>/`.
    pub path: PathBuf,
    pub name: String,
    pub size: u64,
}

/// What a run's outbox held when it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// To send, in name order, at most [`MAX_FILES`].
    pub files: Vec<SentFile>,
    /// Names of files beyond [`MAX_FILES`], not sent.
    pub left_out: Vec<String>,
    /// What was not sent and why, one line each (a link, another chat's memory).
    pub refused: Vec<String>,
}

impl Collected {
    /// The note the reply gets about files that were not sent, if any.
    pub fn note(&self) -> Option<String> {
        let mut lines: Vec<String> = self.refused.iter().map(|line| format!("({line})")).collect();
        if !self.left_out.is_empty() {
            lines.push(format!("(not sent: {}; a reply carries at most {MAX_FILES} files)", self.left_out.join(", ")));
        }
        (!lines.is_empty()).then(|| lines.join("\n"))
    }
}

/// Moves the files run `run_id` left in its outbox (see the module docs) to its sent folder
/// and lists everything that folder holds, also what an earlier attempt of the run moved.
/// `scope` is the run's memory scope: a file that is the owner's memory under another name is
/// not sent outside the owner's chats. The run's folder stays until [`clear`] (after the reply
/// is stored): while it is there, a new attempt of the run looks for files an earlier one
/// moved. A run that never used its outbox costs one look at the disk.
pub fn collect(workspace: &Path, run_id: &str, scope: &MemoryScope, session_key: &SessionKey) -> io::Result<Collected> {
    let mut collected = Collected::default();
    if !workspace.join(run_folder(run_id)).exists() {
        return Ok(collected);
    }
    let root = workspace.canonicalize()?;
    let folder = root.join(run_folder(run_id));
    let mut found = Vec::new();
    list_files(&folder, Path::new(""), 0, &mut found, &mut collected.refused)?;
    let token = token(&root, run_id).map_err(|err| io::Error::other(err.to_string()))?;
    let sent = sent_folder(&root, &token);
    let allowed = found.into_iter().filter(|(shown, path)| {
        let mine = check_real_path(scope, &root, path, Target::File, Reach::Workspace).is_ok();
        if !mine {
            collected.refused.push(format!("outbox/{shown} was not sent: it is memory this chat may not use"));
        }
        mine
    });
    move_files(&sent, allowed.collect(), &label(run_id, session_key))?;
    let mut files = sent_files(&sent)?;
    if files.len() > MAX_FILES {
        collected.left_out = files.split_off(MAX_FILES).into_iter().map(|file| file.name).collect();
    }
    collected.files = files;
    Ok(collected)
}

/// Removes run `run_id`'s outbox folder, once its reply is stored.
pub fn clear(workspace: &Path, run_id: &str) -> io::Result<()> {
    match std::fs::remove_dir_all(workspace.join(run_folder(run_id))) {
        Err(err) if err.kind() != ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// Moves `paths` (files in the run's outbox folder) to the sent folder of `seed` at once: the
/// `message` tool sends them now, so they do not go with the reply again.
pub fn send_files(
    workspace: &Path,
    seed: &str,
    session_key: &SessionKey,
    paths: &[PathBuf],
) -> io::Result<Vec<SentFile>> {
    let root = workspace.canonicalize()?;
    let token = token(&root, seed).map_err(|err| io::Error::other(err.to_string()))?;
    let sent = sent_folder(&root, &token);
    let named = paths.iter().map(|path| (shown_name(path), path.clone())).collect();
    let names = move_files(&sent, named, &label(seed, session_key))?;
    let files = sent_files(&sent)?;
    Ok(files.into_iter().filter(|file| names.contains(&file.name)).collect())
}

fn shown_name(path: &Path) -> String {
    path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
}

/// What `sent/<token>.json` holds: whose files these are, for the API's download check.
fn label(seed: &str, session_key: &SessionKey) -> String {
    switchboard_channels::media_files::sent_label(session_key, seed)
}

/// Moves each `(shown path, path)` into `sent` under a safe, flat name (`charts/a.png` becomes
/// `charts_a.png`; two files never share one); writes the label first. The names used.
fn move_files(sent: &Path, files: Vec<(String, PathBuf)>, label: &str) -> io::Result<HashSet<String>> {
    let mut used = HashSet::new();
    if files.is_empty() {
        return Ok(used);
    }
    std::fs::create_dir_all(sent)?;
    let label_path = sent.with_extension("json");
    if !label_path.exists() {
        let partial = sent.with_extension("json.part");
        std::fs::write(&partial, label)?;
        std::fs::rename(&partial, &label_path)?;
    }
    for (shown, path) in files {
        let name = unique(flat_name(&shown), &used);
        // Replaces a file an earlier attempt of the run moved under the same name.
        std::fs::rename(&path, sent.join(&name))?;
        used.insert(name);
    }
    Ok(used)
}

/// The regular files of `dir` (recursively, [`MAX_DEPTH`] deep), as `(path shown, path)`;
/// links and other special files go to `refused` with the reason.
fn list_files(
    dir: &Path,
    shown: &Path,
    depth: usize,
    found: &mut Vec<(String, PathBuf)>,
    refused: &mut Vec<String>,
) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        let (path, kind) = (entry.path(), entry.file_type()?);
        // Hidden files are left out: a write cut short leaves its `.name.tmp` behind.
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let name = shown.join(entry.file_name());
        let shown_name = format!("outbox/{}", name.display());
        if kind.is_file() {
            found.push((name.display().to_string(), path));
        } else if kind.is_dir() && depth < MAX_DEPTH {
            list_files(&path, &name, depth + 1, found, refused)?;
        } else if kind.is_dir() {
            refused.push(format!("{shown_name} was not sent: folders nest at most {MAX_DEPTH} deep in the outbox"));
        } else {
            refused.push(format!("{shown_name} was not sent: it is a link or a special file, not a file"));
        }
    }
    Ok(())
}

/// The files in a sent folder, in name order.
fn sent_files(sent: &Path) -> io::Result<Vec<SentFile>> {
    let entries = match std::fs::read_dir(sent) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        let meta = entry.metadata()?;
        if entry.file_type()?.is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            files.push(SentFile { path: entry.path(), name, size: meta.len() });
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// `a/b c.csv` as `a_b_c.csv`: letters, digits, `.`, `-` and `_` only, no leading dot.
fn flat_name(shown: &str) -> String {
    let joined = shown.replace('/', "_");
    let safe = switchboard_channels::media_files::safe_name(&joined);
    if safe.is_empty() { "file".to_owned() } else { safe }
}

/// `name`, or `name-2.ext`, `name-3.ext`… when taken.
fn unique(name: String, used: &HashSet<String>) -> String {
    if !used.contains(&name) {
        return name;
    }
    let (stem, extension) = match name.rsplit_once('.') {
        Some((stem, extension)) if !stem.is_empty() => (stem.to_owned(), format!(".{extension}")),
        _ => (name.clone(), String::new()),
    };
    (2..).map(|n| format!("{stem}-{n}{extension}")).find(|candidate| !used.contains(candidate)).unwrap_or(name)
}

/// Whether `workspace` is due for [`prune_now`], at most every [`PRUNE_EVERY`] per workspace
/// and process; if so, it counts as pruned from now on. Cheap: a lookup, no disk.
pub fn prune_due(workspace: &Path) -> bool {
    static LAST: Mutex<Option<HashMap<PathBuf, Instant>>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    let last = last.get_or_insert_with(HashMap::new);
    if last.get(workspace).is_some_and(|at| at.elapsed() < PRUNE_EVERY) {
        return false;
    }
    last.insert(workspace.to_owned(), Instant::now());
    true
}

/// Deletes the outbox folders of `workspace` older than `keep`: sent files past their time,
/// and folders of runs that never finished. What cannot be deleted is logged and left.
pub fn prune_now(workspace: &Path, keep: Duration) {
    let Some(cutoff) = SystemTime::now().checked_sub(keep) else { return };
    for kind in [RUNS_DIR, SENT_DIR] {
        let dir = workspace.join(OUTBOX_DIR).join(kind);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let old = entry.metadata().and_then(|meta| meta.modified()).is_ok_and(|at| at < cutoff);
            if old && let Err(err) = remove(&entry.path()) {
                tracing::warn!(path = %entry.path().display(), %err, "cannot delete an old outbox folder");
            }
        }
    }
}

fn remove(path: &Path) -> io::Result<()> {
    if path.symlink_metadata()?.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) }
}
