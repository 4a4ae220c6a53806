//! What a sandboxed command run for a chat sees of the workspace: outside the owner's direct
//! chats, the memory of other scopes is not there, and for a run that may not change the
//! persona, the protected files are read-only. The file tools check the same rules path by
//! path; here the mounts do it, so a shell cannot step around them.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use crate::tools::ToolContext;
use crate::workspace::memory::{MEMORY_DIR, MemoryScope, OWNER_MEMORY, OWNER_PROFILE};
use crate::workspace::outbox::OUTBOX_DIR;

/// Mounts over the workspace, in the order bubblewrap must make them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    /// Mounted as an empty directory: `memory/`, which holds every scope's file.
    pub emptied: Option<PathBuf>,
    /// Mounted back inside the emptied directory, read-write: the scope's own memory file.
    pub kept: Option<PathBuf>,
    /// Replaced by an unreadable node: the owner's `MEMORY.md` and `USER.md`.
    pub hidden: Vec<PathBuf>,
    /// Mounted read-only: the protected files that exist.
    pub read_only: Vec<PathBuf>,
    /// The workspace's `outbox/` and what is mounted over it: the run's own folder, or an
    /// empty directory for a run without a reply of its own.
    pub outbox: Option<(PathBuf, Option<PathBuf>)>,
}

impl Confinement {
    /// The mounts for a run of `ctx` in the workspace `root` (canonical). Creates what a mount
    /// needs to exist: the `memory/` folder, the scope's own (empty) memory file, and empty
    /// `MEMORY.md`/`USER.md` (else a command could create the owner's memory for them).
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
            let hidden = &confinement.hidden;
            let paths = protected.paths_in(root).into_iter();
            confinement.read_only = paths.filter(|path| path.exists() && !hidden.contains(path)).collect();
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
        assert_eq!(confinement.read_only, [root.join("SOUL.md")], "only the protected files that exist");
        let args: Vec<String> = confinement.args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let line = args.join(" ");
        let at = |needle: &str| line.find(needle).unwrap_or_else(|| panic!("{needle}: {line}"));
        assert!(at("--tmpfs") < at(&format!("--bind {}", own.display())), "{line}");
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
