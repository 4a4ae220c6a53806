//! Skills: folders `skills/<name>/` in an agent's workspace, each with a `SKILL.md` whose front
//! matter names the skill and says what it is for, and whose body tells the agent how to do
//! that task (with any files the folder holds beside it). See docs/skills.md.
//!
//! The catalog is read fresh like the bootstrap files: a new or edited skill counts from the
//! next turn. A copy is kept while nothing it came from changed (the `skills/` directory, each
//! skill's folder and `SKILL.md`), so a turn costs a few `stat` calls, not a read of every skill.

mod front_matter;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::bm25::Index;
use super::stamp::{Seen, settled, stamp};

/// The folder of an agent's workspace that holds its skills.
pub const SKILLS_DIR: &str = "skills";
/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";

/// How an agent uses skills (`[skills]`, `[agents.<name>] skills`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillSettings {
    /// The skills it may use, by name; empty = every skill in its workspace.
    pub allow: Vec<String>,
    /// Up to this many skills are listed in the prompt; with more, `skill_search` finds them.
    pub inline_max: usize,
}

impl Default for SkillSettings {
    fn default() -> Self {
        Self { allow: Vec::new(), inline_max: 15 }
    }
}

/// One skill as read from its `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// From the front matter; the folder's name when it gives none.
    pub name: String,
    pub description: String,
    /// Its folder under `skills/`.
    pub folder: String,
    /// `SKILL.md` without its front matter.
    pub body: String,
}

/// The skills of a workspace, by name, and the folders that are not usable skills.
#[derive(Debug, Default)]
pub struct Catalog {
    skills: Vec<Arc<Skill>>,
    /// `(folder, why)` for each folder under `skills/` left out.
    problems: Vec<(String, String)>,
    index: OnceLock<Index>,
}

impl Catalog {
    /// A catalog of the given skills, as if read from a workspace (for tests and benches).
    pub fn of(skills: Vec<Skill>) -> Self {
        let mut skills: Vec<Arc<Skill>> = skills.into_iter().map(Arc::new).collect();
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        Self { skills, ..Self::default() }
    }

    pub fn len(&self) -> usize {
        self.skills.len()
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The skills in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Skill> {
        self.skills.iter().map(|skill| skill.as_ref())
    }

    pub fn problems(&self) -> &[(String, String)] {
        &self.problems
    }

    /// The skill called `name` (case aside), or whose folder is `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        let name = name.trim();
        self.iter()
            .find(|skill| skill.name == name)
            .or_else(|| self.iter().find(|skill| skill.name.eq_ignore_ascii_case(name)))
            .or_else(|| self.iter().find(|skill| skill.folder == name))
    }

    /// The skills that match `query`, best first, at most `limit`, with their BM25 scores.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(&Skill, f64)> {
        let index =
            self.index.get_or_init(|| {
                Index::new(self.skills.iter().map(|skill| {
                    vec![(skill.name.as_str(), 3), (skill.description.as_str(), 2), (skill.body.as_str(), 1)]
                }))
            });
        let scores = index.scores(query);
        let mut hits: Vec<(&Skill, f64)> =
            self.iter().zip(scores).filter(|(_, score)| *score > 0.0).collect::<Vec<_>>();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.name.cmp(&b.0.name)));
        hits.truncate(limit);
        hits
    }

    /// This catalog narrowed to the skills `allow` names (all of them when it is empty).
    fn allowed(self: &Arc<Self>, allow: &[String]) -> Arc<Self> {
        if allow.is_empty() {
            return Arc::clone(self);
        }
        let skills = self.skills.iter().filter(|skill| allow.contains(&skill.name)).cloned().collect();
        Arc::new(Self { skills, problems: self.problems.clone(), index: OnceLock::new() })
    }
}

/// The skills of `workspace` that `allow` lets the agent use (see [`SkillSettings::allow`]).
pub async fn load(workspace: &Path, allow: &[String]) -> Arc<Catalog> {
    let dir = workspace.join(SKILLS_DIR);
    if let Some(catalog) = shared().fresh(&dir) {
        return catalog.allowed(allow);
    }
    let read_dir = dir.clone();
    let read = tokio::task::spawn_blocking(move || read_catalog(&read_dir));
    let catalog = match read.await {
        Ok(catalog) => catalog,
        Err(err) => Arc::new(Catalog { problems: vec![(SKILLS_DIR.into(), err.to_string())], ..Catalog::default() }),
    };
    catalog.allowed(allow)
}

/// Reads the catalog of `dir`, blocking, keeping a copy when it is settled.
fn read_catalog(dir: &Path) -> Arc<Catalog> {
    let dir_seen = stamp(dir);
    let (catalog, seen) = match &dir_seen {
        Ok(None) => (Catalog::default(), Vec::new()),
        Ok(Some(_)) => read_folders(dir),
        Err(err) => {
            let why = format!("cannot read {}: {err}", dir.display());
            (Catalog { problems: vec![(SKILLS_DIR.into(), why)], ..Catalog::default() }, Vec::new())
        }
    };
    for (folder, why) in &catalog.problems {
        tracing::warn!(skill = %folder, %why, "a skill is left out");
    }
    let catalog = Arc::new(catalog);
    if let Ok(dir_seen) = dir_seen {
        shared().keep(dir, Copy { dir: dir_seen, folders: seen, catalog: Arc::clone(&catalog) });
    }
    catalog
}

/// What one skill folder looked like when read: its path, its stamp and its `SKILL.md`'s.
#[derive(Debug, Clone)]
struct FolderSeen {
    path: PathBuf,
    folder: Seen,
    file: Seen,
}

/// Every skill folder of `dir`, in name order; `seen` is `None` for a folder whose stamp
/// could not be taken (then nothing is kept).
fn read_folders(dir: &Path) -> (Catalog, Vec<Option<FolderSeen>>) {
    let mut catalog = Catalog::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) => {
            catalog.problems.push((SKILLS_DIR.into(), format!("cannot read {}: {err}", dir.display())));
            return (catalog, vec![None]);
        }
    };
    let mut folders: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|entry| (entry.file_name().to_string_lossy().into_owned(), entry.path()))
        // A link to a folder elsewhere (a shared skills checkout) counts.
        .filter(|(name, path)| !name.starts_with('.') && path.is_dir())
        .collect();
    folders.sort();
    let mut seen = Vec::with_capacity(folders.len());
    for (folder, path) in folders {
        let file = path.join(SKILL_FILE);
        seen.push(match (stamp(&path), stamp(&file)) {
            (Ok(folder), Ok(file)) => Some(FolderSeen { path: path.clone(), folder, file }),
            _ => None,
        });
        match read_skill(&folder, &file) {
            Ok(skill) if catalog.skills.iter().any(|known| known.name == skill.name) => {
                catalog.problems.push((folder, format!("another folder already has a skill named {}", skill.name)));
            }
            Ok(skill) => catalog.skills.push(Arc::new(skill)),
            Err(why) => catalog.problems.push((folder, why)),
        }
    }
    catalog.skills.sort_by(|a, b| a.name.cmp(&b.name));
    (catalog, seen)
}

/// One skill from its folder's `SKILL.md`; `Err` says why the folder is not a usable skill.
fn read_skill(folder: &str, file: &Path) -> Result<Skill, String> {
    let text = match std::fs::read(file) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(format!("it has no {SKILL_FILE}")),
        Err(err) => return Err(format!("cannot read {SKILL_FILE}: {err}")),
    };
    let matter = front_matter::parse(&text)
        .ok_or_else(|| format!("{SKILL_FILE} does not start with front matter (--- name, description ---)"))?;
    let description = matter.description.ok_or_else(|| {
        format!("{SKILL_FILE} has no description in its front matter, so the agent could not know when to use it")
    })?;
    let name = matter.name.unwrap_or_else(|| folder.to_owned());
    Ok(Skill { name, description, folder: folder.to_owned(), body: matter.body })
}

/// A catalog as read, with what it was read from.
struct Copy {
    dir: Seen,
    folders: Vec<Option<FolderSeen>>,
    catalog: Arc<Catalog>,
}

/// Copies kept at most (one per workspace); beyond it the cache starts over.
const MAX_COPIES: usize = 256;

#[derive(Default)]
struct SkillCache {
    copies: Mutex<HashMap<PathBuf, Arc<Copy>>>,
}

fn shared() -> &'static SkillCache {
    static CACHE: OnceLock<SkillCache> = OnceLock::new();
    CACHE.get_or_init(SkillCache::default)
}

impl SkillCache {
    /// The copy for `dir` if nothing it came from changed.
    fn fresh(&self, dir: &Path) -> Option<Arc<Catalog>> {
        let copy = Arc::clone(self.copies.lock().unwrap_or_else(PoisonError::into_inner).get(dir)?);
        let same_dir = stamp(dir).ok() == Some(copy.dir);
        let same_folders = copy.folders.iter().all(|seen| {
            seen.as_ref().is_some_and(|seen| {
                stamp(&seen.path).ok() == Some(seen.folder)
                    && stamp(&seen.path.join(SKILL_FILE)).ok() == Some(seen.file)
            })
        });
        (same_dir && same_folders).then(|| Arc::clone(&copy.catalog))
    }

    /// Keeps `copy` when everything it came from is settled and could be stamped.
    fn keep(&self, dir: &Path, copy: Copy) {
        let stamped =
            copy.folders.iter().all(|seen| seen.as_ref().is_some_and(|s| settled(&s.folder) && settled(&s.file)));
        if !stamped || !settled(&copy.dir) {
            return;
        }
        let mut copies = self.copies.lock().unwrap_or_else(PoisonError::into_inner);
        if copies.len() >= MAX_COPIES {
            copies.clear();
        }
        copies.insert(dir.to_owned(), Arc::new(copy));
    }
}

#[cfg(test)]
mod tests;
