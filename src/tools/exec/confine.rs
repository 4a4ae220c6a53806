//! What a sandboxed command run for a chat sees of the workspace: outside the owner's direct
//! chats, the memory of other scopes is not there, and for a run that may not change the
//! persona, the protected files are read-only. The file tools check the same rules path by
//! path; here the mounts do it, so a shell cannot step around them.
//!
//! A protected path that does not exist cannot be mounted over, and a command could create it
//! (`BOOTSTRAP.md` after onboarding, a new `skills/`). So it is first made on the host as an
//! empty file (an empty directory for an entry configured as one, `skills/`), which every
//! reader treats as missing (an empty persona file adds nothing to the prompt, an empty
//! HEARTBEAT.md has no tasks, an empty `skills/` no skills), and then mounted read-only like
//! the others. A placeholder made only for the command's time would be unsound: removing it
//! while another command's sandbox has it mounted detaches that mount there.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use crate::tools::ToolContext;
use crate::workspace::memory::{MEMORY_DIR, MemoryScope, OWNER_MEMORY, OWNER_PROFILE};
use crate::workspace::outbox::OUTBOX_DIR;
use crate::workspace::protected::ProtectedPath;

/// Mounts over the workspace, in the order bubblewrap must make them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    /// Mounted as an empty directory: `memory/`, which holds every scope's file.
    pub emptied: Option<PathBuf>,
    /// Mounted back inside the emptied directory, read-write: the scope's own memory file.
    pub kept: Option<PathBuf>,
    /// Replaced by an unreadable node: the owner's `MEMORY.md` and `USER.md`.
    pub hidden: Vec<PathBuf>,
    /// Mounted read-only: the protected files (each made empty first when missing).
    pub read_only: Vec<PathBuf>,
    /// The workspace's `outbox/` and what is mounted over it: the run's own folder, or an
    /// empty directory for a run without a reply of its own.
    pub outbox: Option<(PathBuf, Option<PathBuf>)>,
}

impl Confinement {
    /// The mounts for a run of `ctx` in the workspace `root` (canonical). Creates what a mount
    /// needs to exist: the `memory/` folder, the scope's own (empty) memory file, empty
    /// `MEMORY.md`/`USER.md` (else a command could create the owner's memory for them), and for
    /// a run that may not change the persona, the protected paths missing (see the module docs).
    pub fn for_run(root: &Path, ctx: &ToolContext) -> std::io::Result<Self> {
        let mut confinement = Self::default();
        if !ctx.memory.is_owner() {
            let memory = root.join(MEMORY_DIR);
            std::fs::create_dir_all(&memory)?;
            confinement.emptied = Some(memory);
            confinement.kept = own_file(root, &ctx.memory)?;
            for name in [OWNER_MEMORY, OWNER_PROFILE] {
                let path = root.join(name);
                touch(&path)?;
                confinement.hidden.push(path);
            }
        }
        confinement.outbox = Some(outbox(root, ctx)?);
        if let Some(protected) = ctx.persona.read_only() {
            for entry in protected.paths_in(root) {
                if confinement.hidden.contains(&entry.path) {
                    continue;
                }
                placeholder(&entry)?;
                // A link to nowhere stays as it is: there is nothing to mount.
                if entry.path.exists() {
                    confinement.read_only.push(entry.path);
                }
            }
        }
        Ok(confinement)
    }

    /// The bubblewrap arguments, to come after the workspace's own `--bind`.
    pub fn args(&self) -> Vec<&std::ffi::OsStr> {
        let mut args: Vec<&std::ffi::OsStr> = Vec::new();
        if let Some(emptied) = &self.emptied {
            args.extend(["--tmpfs".as_ref(), emptied.as_os_str()]);
        }
        if let Some(kept) = &self.kept {
            args.extend(["--bind".as_ref(), kept.as_os_str(), kept.as_os_str()]);
        }
        for path in &self.hidden {
            args.extend(["--ro-bind".as_ref(), "/dev/null".as_ref(), path.as_os_str()]);
        }
        for path in &self.read_only {
            args.extend(["--ro-bind".as_ref(), path.as_os_str(), path.as_os_str()]);
        }
        match &self.outbox {
            Some((outbox, Some(own))) => args.extend(["--bind".as_ref(), own.as_os_str(), outbox.as_os_str()]),
            Some((outbox, None)) => args.extend(["--tmpfs".as_ref(), outbox.as_os_str()]),
            None => {}
        }
        args
    }
}

/// The workspace's `outbox/` and the run's own folder (made, both, so they can be mounted):
/// in the sandbox the run sees only its own files there, never another run's or those sent.
fn outbox(root: &Path, ctx: &ToolContext) -> std::io::Result<(PathBuf, Option<PathBuf>)> {
    let outbox = root.join(OUTBOX_DIR);
    std::fs::create_dir_all(&outbox)?;
    let own = ctx.outbox.as_ref().map(|folder| root.join(folder));
    if let Some(own) = &own {
        std::fs::create_dir_all(own)?;
    }
    Ok((outbox, own))
}

/// The scope's own memory file, created empty when missing so that it can be mounted.
fn own_file(root: &Path, scope: &MemoryScope) -> std::io::Result<Option<PathBuf>> {
    let Some(relative) = scope.file() else { return Ok(None) };
    let path = root.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    touch(&path)?;
    Ok(Some(path))
}

/// Makes a missing protected path on the host, empty, with its parents, so that it can be
/// mounted read-only; leaves anything there (a link included) as it is.
fn placeholder(entry: &ProtectedPath) -> std::io::Result<()> {
    if entry.path.symlink_metadata().is_ok() {
        return Ok(());
    }
    if let Some(parent) = entry.path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if !entry.is_dir {
        return touch(&entry.path);
    }
    match std::fs::create_dir(&entry.path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// Creates `path` empty unless something is there; never truncates.
fn touch(path: &Path) -> std::io::Result<()> {
    if path.symlink_metadata().is_ok() {
        return Ok(());
    }
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::PersonaAccess;
    use crate::workspace::protected::ProtectedFiles;

    fn ctx(memory: MemoryScope, persona: PersonaAccess) -> ToolContext {
        ToolContext { memory, persona, ..ToolContext::default() }
    }

    #[test]
    fn the_owners_chats_see_everything_and_may_change_the_persona() {
        let dir = tempfile::tempdir().unwrap();
        let confinement = Confinement::for_run(dir.path(), &ctx(MemoryScope::Owner, PersonaAccess::Editable)).unwrap();
        let closed = Some((dir.path().join("outbox"), None));
        assert_eq!(confinement, Confinement { outbox: closed, ..Confinement::default() });
    }

    #[test]
    fn a_group_keeps_its_own_file_and_sees_the_persona_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("SOUL.md"), "be kind").unwrap();
        let group = MemoryScope::Group { channel: "telegram".into(), chat_id: "-100".into() };
        let confinement = Confinement::for_run(root, &ctx(group.clone(), PersonaAccess::default())).unwrap();
        assert_eq!(group.file(), Some("memory/groups/telegram_-100.md".into()));
        let own = root.join("memory/groups/telegram_-100.md");
        assert_eq!(confinement.emptied, Some(root.join("memory")));
        assert_eq!(confinement.kept.as_deref(), Some(own.as_path()));
        assert!(own.is_file() && root.join("MEMORY.md").is_file() && root.join("USER.md").is_file());
        assert_eq!(confinement.hidden, [root.join("MEMORY.md"), root.join("USER.md")]);
        let persona = ["SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "HEARTBEAT.md", "BOOTSTRAP.md", "skills"];
        assert_eq!(confinement.read_only, persona.map(|name| root.join(name)), "the owner's memory is hidden instead");
        assert_eq!(std::fs::read_to_string(root.join("SOUL.md")).unwrap(), "be kind", "an existing file is kept");
        assert_eq!(std::fs::read_to_string(root.join("BOOTSTRAP.md")).unwrap(), "", "a missing one made empty");
        assert_eq!(std::fs::read_dir(root.join("skills")).unwrap().count(), 0, "an empty folder for `skills/`");
        let args: Vec<String> = confinement.args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let line = args.join(" ");
        let at = |needle: &str| line.find(needle).unwrap_or_else(|| panic!("{needle}: {line}"));
        assert!(at("--tmpfs") < at(&format!("--bind {}", own.display())), "{line}");
    }

    #[test]
    fn a_configured_path_missing_is_made_with_its_parents_and_a_link_to_nowhere_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("TOOLS.md")).unwrap();
        let protected = ProtectedFiles::new(&["rules/team/".into(), "policy/a.md".into(), "TOOLS.md".into()]);
        let run = ctx(MemoryScope::Owner, PersonaAccess::ReadOnly(std::sync::Arc::new(protected)));
        let confinement = Confinement::for_run(root, &run).unwrap();
        assert_eq!(confinement.read_only, [root.join("rules/team"), root.join("policy/a.md")]);
        assert!(root.join("rules/team").is_dir() && root.join("policy/a.md").is_file());
        assert!(!root.join("nowhere").exists(), "nothing made through the link");
    }

    #[test]
    fn the_outbox_is_the_runs_own_folder() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let folder = crate::workspace::outbox::run_folder("r1");
        let run = ToolContext { outbox: Some(folder.clone()), ..ctx(MemoryScope::Owner, PersonaAccess::Editable) };
        let confinement = Confinement::for_run(root, &run).unwrap();
        assert!(root.join(&folder).is_dir());
        let line = confinement.args().iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ");
        assert_eq!(line, format!("--bind {} {}", root.join(&folder).display(), root.join("outbox").display()));
    }
}
