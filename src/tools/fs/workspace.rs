//! Resolving a path the model names to a real path, and refusing the ones that would leave
//! the workspace.
//!
//! Two steps, both needed: `..` is resolved lexically first (so `a/../../etc` is seen as
//! outside before anything touches the disk), then the deepest existing ancestor is
//! canonicalized, which follows every symbolic link on the way; the result must still be
//! inside the canonical workspace. The caller then works on the resolved path, so the OS never
//! re-interprets `..` or a link that was checked.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::tools::{PersonaAccess, ToolContext, ToolError};
use crate::workspace::memory::{MemoryScope, Reach, Target, check_real_path};
use crate::workspace::protected::ProtectedFiles;

/// A workspace directory and how strictly paths are confined to it.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The workspace as configured (absolute or relative to the process's directory).
    configured: PathBuf,
    /// Its canonical form: symlinks resolved, so prefix checks compare like with like.
    root: PathBuf,
    allow_outside: bool,
    /// The memory scope the paths are checked against; `None`: not checked (`exec`, which
    /// no path check could confine anyway).
    memory: Option<(MemoryScope, Reach)>,
    /// The protected files, when the run may not change them (see [`PersonaAccess`]).
    protected: Option<Arc<ProtectedFiles>>,
}

/// A path the model named, resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The real path to work on: symlinks in existing parts resolved.
    pub path: PathBuf,
    /// How to name it back to the model: relative to the workspace when inside.
    pub shown: String,
}

impl Workspace {
    /// Opens the workspace at `dir`, creating it if missing.
    pub fn open(dir: &Path, allow_outside: bool) -> Result<Self, ToolError> {
        if dir.as_os_str().is_empty() {
            return Err(ToolError::Failed("no workspace directory is configured (agent.workspace)".into()));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| ToolError::Failed(format!("cannot create the workspace {}: {e}", dir.display())))?;
        let root = dir
            .canonicalize()
            .map_err(|e| ToolError::Failed(format!("cannot open the workspace {}: {e}", dir.display())))?;
        let configured = std::path::absolute(dir).unwrap_or_else(|_| root.clone());
        Ok(Self { configured: normalize(&configured), root, allow_outside, memory: None, protected: None })
    }

    /// The workspace of the run `ctx`, its paths checked against the run's memory scope.
    pub fn for_run(ctx: &ToolContext, allow_outside: bool) -> Result<Self, ToolError> {
        let workspace = Self::open(&ctx.workspace, allow_outside)?;
        let protected = match &ctx.persona {
            PersonaAccess::Editable => None,
            PersonaAccess::ReadOnly(protected) => Some(Arc::clone(protected)),
        };
        Ok(Self { memory: Some((ctx.memory.clone(), ctx.memory_reach)), protected, ..workspace })
    }

    /// The canonical workspace directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `requested` (relative to the workspace, or absolute) as a file to read or
    /// write, and checks it stays inside the workspace unless that is allowed, and within the
    /// run's memory scope.
    pub fn resolve(&self, requested: &str) -> Result<Resolved, ToolError> {
        self.resolve_as(requested, Target::File)
    }

    /// Like [`Workspace::resolve`], for a file to write, edit or delete: a protected file is
    /// refused unless the run may change them.
    pub fn resolve_to_change(&self, requested: &str) -> Result<Resolved, ToolError> {
        let resolved = self.resolve(requested)?;
        if let Some(protected) = &self.protected
            && let Ok(relative) = resolved.path.strip_prefix(&self.root)
            && protected.protects(relative)
        {
            return Err(ToolError::Refused(format!(
                "`{requested}` is one of the files every chat of this agent runs under ({}); only the \
                 owner or an admin can change them. Reading them is fine; tell the person to ask the owner",
                protected.listed()
            )));
        }
        Ok(resolved)
    }

    /// Like [`Workspace::resolve`], for a directory to list.
    pub fn resolve_dir(&self, requested: &str) -> Result<Resolved, ToolError> {
        self.resolve_as(requested, Target::Dir)
    }

    fn resolve_as(&self, requested: &str, target: Target) -> Result<Resolved, ToolError> {
        let resolved = self.resolve_path(requested)?;
        if let Some((scope, reach)) = &self.memory
            && let Err(refusal) = check_real_path(scope, &self.root, &resolved.path, target, *reach)
        {
            let own = match scope.file_shown() {
                Some(file) => format!("this chat's memory file is `{file}`"),
                None => "this run has no memory file".to_owned(),
            };
            return Err(ToolError::Refused(format!("`{requested}` is not available here: {refusal}; {own}")));
        }
        Ok(resolved)
    }

    /// Whether an entry found by listing a directory (its real path, not followed) may be
    /// shown: other scopes' memory files are not even named.
    pub fn shows(&self, entry: &Path) -> bool {
        let Some((scope, reach)) = &self.memory else { return true };
        let Ok(relative) = entry.strip_prefix(&self.root) else { return true };
        scope.reach(relative, Target::File, *reach) || scope.reach(relative, Target::Dir, *reach)
    }

    fn resolve_path(&self, requested: &str) -> Result<Resolved, ToolError> {
        if requested.contains('\0') {
            return Err(ToolError::InvalidArguments("the path contains a NUL byte".into()));
        }
        let requested_path = Path::new(requested);
        let joined =
            if requested_path.is_absolute() { requested_path.to_path_buf() } else { self.root.join(requested_path) };
        let lexical = normalize(&joined);
        // An absolute path may name the workspace by its configured (non-canonical) path.
        let lexical = match lexical.strip_prefix(&self.configured) {
            Ok(rest) if !lexical.starts_with(&self.root) => self.root.join(rest),
            _ => lexical,
        };
        if !self.allow_outside && !lexical.starts_with(&self.root) {
            return Err(outside(requested));
        }
        let real = canonicalize_existing(&lexical, requested)?;
        if !self.allow_outside && !real.starts_with(&self.root) {
            return Err(ToolError::Refused(format!(
                "`{requested}` leads through a symbolic link to {}, which is outside the workspace; \
                 only paths inside the workspace can be used",
                real.display()
            )));
        }
        Ok(Resolved { shown: self.show(&real, requested), path: real })
    }

    fn show(&self, real: &Path, requested: &str) -> String {
        match real.strip_prefix(&self.root) {
            Ok(rest) if rest.as_os_str().is_empty() => ".".to_owned(),
            Ok(rest) => rest.display().to_string(),
            Err(_) => requested.to_owned(),
        }
    }
}

fn outside(requested: &str) -> ToolError {
    ToolError::Refused(format!(
        "`{requested}` is outside the workspace; use a path relative to the workspace (for example \
         `notes/todo.md`), without `..` leading out of it"
    ))
}

/// Resolves `.` and `..` of an absolute path without touching the disk (`/..` is `/`, as for
/// the kernel).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push(Component::RootDir),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
        }
    }
    out
}

/// Canonicalizes the longest existing prefix of `path` (following symlinks) and appends the
/// rest. A dangling symlink is refused: writing through it would create its target, wherever
/// that is.
fn canonicalize_existing(path: &Path, requested: &str) -> Result<PathBuf, ToolError> {
    let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
    let mut current = path;
    loop {
        match current.canonicalize() {
            Ok(real) => {
                let mut real = real;
                real.extend(missing.iter().rev());
                return Ok(real);
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                if current.symlink_metadata().is_ok() {
                    return Err(ToolError::Refused(format!(
                        "`{requested}` goes through a symbolic link whose target does not exist ({}); \
                         remove the link or use another path",
                        current.display()
                    )));
                }
                let (Some(parent), Some(name)) = (current.parent(), current.file_name()) else {
                    return Err(ToolError::Failed(format!("cannot resolve `{requested}`")));
                };
                missing.push(name);
                current = parent;
            }
            Err(e) => return Err(ToolError::Failed(format!("cannot resolve `{requested}`: {e}"))),
        }
    }
}

/// Refuses anything but regular files and directories: reading a FIFO blocks, reading a
/// device can be endless (`/dev/zero`) or harmful.
pub fn refuse_special(file_type: std::fs::FileType, shown: &str) -> Result<(), ToolError> {
    use std::os::unix::fs::FileTypeExt;
    let kind = if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "a device file"
    } else {
        return Ok(());
    };
    Err(ToolError::Refused(format!("`{shown}` is {kind}; file tools only work on regular files and directories")))
}

/// An I/O error for the model, naming the path.
pub fn io_error(action: &str, shown: &str, error: &std::io::Error) -> ToolError {
    match error.kind() {
        ErrorKind::NotFound => {
            ToolError::Failed(format!("`{shown}` does not exist; use list_dir to see what is there"))
        }
        ErrorKind::PermissionDenied => ToolError::Failed(format!("permission denied to {action} `{shown}`")),
        _ => ToolError::Failed(format!("cannot {action} `{shown}`: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(&dir.path().join("ws"), false).unwrap();
        (dir, ws)
    }

    #[test]
    fn relative_paths_resolve_inside() {
        let (_dir, ws) = workspace();
        let resolved = ws.resolve("a/./b/../c.txt").unwrap();
        assert_eq!(resolved.path, ws.root().join("a/c.txt"));
        assert_eq!(resolved.shown, "a/c.txt");
        assert_eq!(ws.resolve(".").unwrap().shown, ".");
    }

    #[test]
    fn dot_dot_out_is_refused_before_touching_the_disk() {
        let (_dir, ws) = workspace();
        for path in ["..", "../x", "a/../../x", "/etc/passwd"] {
            let err = ws.resolve(path).unwrap_err();
            assert!(matches!(&err, ToolError::Refused(m) if m.contains("outside the workspace")), "{path}: {err}");
        }
    }

    #[test]
    fn absolute_path_inside_is_allowed() {
        let (_dir, ws) = workspace();
        let inside = ws.root().join("x.txt");
        assert_eq!(ws.resolve(inside.to_str().unwrap()).unwrap().shown, "x.txt");
    }

    #[test]
    fn symlinks_out_are_refused_and_allowed_when_configured() {
        let (dir, ws) = workspace();
        std::os::unix::fs::symlink(dir.path(), ws.root().join("out")).unwrap();
        let err = ws.resolve("out/anything").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let open = Workspace::open(ws.root(), true).unwrap();
        assert!(open.resolve("out/anything").is_ok());
        assert!(open.resolve("/etc/hostname").is_ok());
    }

    #[test]
    fn dangling_symlink_is_refused() {
        let (dir, ws) = workspace();
        std::os::unix::fs::symlink(dir.path().join("nowhere"), ws.root().join("dangling")).unwrap();
        let err = ws.resolve("dangling").unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    #[test]
    fn protected_files_are_refused_to_change_below_admin_also_through_a_link() {
        let (_dir, ws) = workspace();
        std::fs::write(ws.root().join("SOUL.md"), "be kind").unwrap();
        std::os::unix::fs::symlink(ws.root().join("SOUL.md"), ws.root().join("notes.md")).unwrap();
        let ctx = |persona| ToolContext { workspace: ws.root().to_owned(), persona, ..ToolContext::default() };
        let read_only = Workspace::for_run(&ctx(PersonaAccess::default()), false).unwrap();
        for path in ["SOUL.md", "soul.md", "notes.md", "skills/new/SKILL.md", "./x/../AGENTS.md"] {
            let err = read_only.resolve_to_change(path).unwrap_err();
            assert!(err.to_string().contains("only the owner or an admin can change them"), "{path}: {err}");
        }
        assert!(read_only.resolve("SOUL.md").is_ok(), "reading stays open");
        assert!(read_only.resolve_to_change("todo.md").is_ok());
        let editable = Workspace::for_run(&ctx(PersonaAccess::Editable), false).unwrap();
        assert!(editable.resolve_to_change("SOUL.md").is_ok());
    }

    #[test]
    fn workspace_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(&dir.path().join("new/ws"), false).unwrap();
        assert!(ws.root().is_dir());
    }
}
