//! `switchboard init`: writes a config file and a workspace with the bootstrap files, never
//! overwriting what is already there, so it is safe to run again after an upgrade to get the
//! files a newer version added.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::BOOTSTRAP_FILES;

/// The example config with every key at its default, as shipped.
pub const CONFIG_TEMPLATE: &str = include_str!("../../config.example.toml");

#[derive(Debug, Error)]
pub enum InitError {
    #[error("cannot create the directory {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAction {
    Created,
    /// It existed and was left as it was.
    Kept,
}

impl fmt::Display for FileAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileAction::Created => "created",
            FileAction::Kept => "kept   ",
        })
    }
}

/// One line of `switchboard init`'s report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    pub path: PathBuf,
    pub action: FileAction,
}

/// Who may read a new config file: its owner only, since it may come to hold bot tokens and
/// API keys. (The workspace files are the agent's to read and write and get the usual mode.)
const CONFIG_MODE: u32 = 0o600;

/// Writes the config file at `path` unless it exists, readable by its owner only.
pub fn write_config(path: &Path) -> Result<FileReport, InitError> {
    create_new(path, CONFIG_TEMPLATE, Some(CONFIG_MODE))
}

/// The example skill `init` writes: its files, relative to the workspace.
pub const EXAMPLE_SKILL: [(&str, &str); 2] = [
    ("skills/meeting-minutes/SKILL.md", include_str!("../../templates/skills/meeting-minutes/SKILL.md")),
    ("skills/meeting-minutes/template.md", include_str!("../../templates/skills/meeting-minutes/template.md")),
];

/// Creates `workspace` and each bootstrap file it lacks; `BOOTSTRAP.md` (onboarding) when the
/// workspace is new; and the example skill when it has no `skills/` folder yet (an owner who
/// removed either does not get it back).
pub fn write_workspace(workspace: &Path) -> Result<Vec<FileReport>, InitError> {
    create_dir(workspace)?;
    let skills_missing = !workspace.join(super::skills::SKILLS_DIR).exists();
    // A workspace without IDENTITY.md is new: its owner has not met the agent yet.
    let new = !workspace.join("IDENTITY.md").exists();
    let mut reports = BOOTSTRAP_FILES
        .iter()
        .map(|file| create_new(&workspace.join(file.name), file.template, None))
        .collect::<Result<Vec<_>, _>>()?;
    if new {
        reports.push(create_new(&workspace.join(super::ONBOARDING.name), super::ONBOARDING.template, None)?);
    }
    if skills_missing {
        for (path, text) in EXAMPLE_SKILL {
            reports.push(create_new(&workspace.join(path), text, None)?);
        }
    }
    Ok(reports)
}

/// Writes `contents` to a new file at `path`; an existing file is kept untouched. Uses
/// `create_new` rather than checking first, so a file that appears in between is not
/// clobbered either. `mode` (Unix permission bits) is set as the file is created, so there is
/// no moment in which it is readable by others.
fn create_new(path: &Path, contents: &str, mode: Option<u32>) -> Result<FileReport, InitError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir(parent)?;
    }
    let write_err = |source| InitError::Write { path: path.to_owned(), source };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if let Some(mode) = mode {
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    match options.open(path) {
        Ok(mut file) => {
            file.write_all(contents.as_bytes()).map_err(write_err)?;
            Ok(FileReport { path: path.to_owned(), action: FileAction::Created })
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(FileReport { path: path.to_owned(), action: FileAction::Kept })
        }
        Err(err) => Err(write_err(err)),
    }
}

fn create_dir(path: &Path) -> Result<(), InitError> {
    std::fs::create_dir_all(path).map_err(|source| InitError::CreateDir { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_missing_files_and_keeps_existing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("ws");
        let first = write_workspace(&workspace).unwrap();
        assert_eq!(first.len(), BOOTSTRAP_FILES.len() + 1 + EXAMPLE_SKILL.len());
        assert!(workspace.join("BOOTSTRAP.md").is_file(), "a new workspace starts with onboarding");
        std::fs::remove_file(workspace.join("BOOTSTRAP.md")).unwrap();
        assert!(first.iter().all(|r| r.action == FileAction::Created));
        // The example skill is written once: removing it is the owner's choice.
        std::fs::remove_dir_all(workspace.join("skills/meeting-minutes")).unwrap();
        std::fs::write(workspace.join("SOUL.md"), "mine").unwrap();
        std::fs::remove_file(workspace.join("TOOLS.md")).unwrap();
        let second = write_workspace(&workspace).unwrap();
        let created: Vec<_> = second.iter().filter(|r| r.action == FileAction::Created).collect();
        assert_eq!(created.len(), 1, "{second:?}");
        assert!(created[0].path.ends_with("TOOLS.md"));
        assert_eq!(std::fs::read_to_string(workspace.join("SOUL.md")).unwrap(), "mine");
    }

    #[cfg(unix)]
    #[test]
    fn the_config_file_is_readable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etc").join("config.toml");
        assert_eq!(write_config(&path).unwrap().action, FileAction::Created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "config written with mode {mode:o}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), CONFIG_TEMPLATE);
    }
}
