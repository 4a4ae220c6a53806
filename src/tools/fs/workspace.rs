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
use crate::workspace::outbox::{OUTBOX_DIR, is_outbox_path, map_into};
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
    /// What `outbox/` is.
    outbox: Outbox,
}

/// What `outbox/` means to the paths of a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outbox {
    /// A folder like any other (`exec`, and workspaces opened outside a run).
    Plain,
    /// The run's own folder (relative to the workspace): every path under `outbox/` leads
    /// there, and the other runs' folders and the sent files cannot be reached.
    Run(PathBuf),
    /// A run without a reply of its own: `outbox/` is refused.
    Closed,
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
        let configured = normalize(&configured);
        Ok(Self { configured, root, allow_outside, memory: None, protected: None, outbox: Outbox::Plain })
    }

    /// The workspace of the run `ctx`, its paths checked against the run's memory scope.
    pub fn for_run(ctx: &ToolContext, allow_outside: bool) -> Result<Self, ToolError> {
        let workspace = Self::open(&ctx.workspace, allow_outside)?;
        let protected = match &ctx.persona {
            PersonaAccess::Editable => None,
            PersonaAccess::ReadOnly(protected) => Some(Arc::clone(protected)),
        };
        let outbox = ctx.outbox.clone().map_or(Outbox::Closed, Outbox::Run);
        Ok(Self { memory: Some((ctx.memory.clone(), ctx.memory_reach)), protected, outbox, ..workspace })
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

    /// Like [`Workspace::resolve`], for a directory to list. The run's outbox is made when
    /// listed before anything was written there: it exists, empty, from the run's start on.
    pub fn resolve_dir(&self, requested: &str) -> Result<Resolved, ToolError> {
        let resolved = self.resolve_as(requested, Target::Dir)?;
        if let Outbox::Run(folder) = &self.outbox
            && resolved.path == self.root.join(folder)
        {
            std::fs::create_dir_all(&resolved.path).map_err(|e| io_error("create", &resolved.shown, &e))?;
        }
        Ok(resolved)
    }

    /// A lexical path inside the workspace's `outbox/` taken to the run's own folder, or
    /// refused when the run has none.
    fn map_outbox(&self, lexical: PathBuf, requested: &str) -> Result<PathBuf, ToolError> {
        let Ok(relative) = lexical.strip_prefix(&self.root) else { return Ok(lexical) };
        if !is_outbox_path(relative) {
            return Ok(lexical);
        }
        match &self.outbox {
            Outbox::Plain => Ok(lexical),
            Outbox::Run(folder) => Ok(self.root.join(map_into(relative, folder))),
            Outbox::Closed => Err(ToolError::Refused(format!(
                "`{requested}`: {OUTBOX_DIR}/ holds the files that go with a chat's reply, and this run \
                 (a sub-agent or housekeeping) sends no reply of its own; write elsewhere"
            ))),
        }
    }

    /// Refuses a real path (links followed) in the outbox but outside the run's own folder:
    /// another run's files, or files already sent.
    fn check_outbox(&self, real: &Path, requested: &str) -> Result<(), ToolError> {
        let Ok(relative) = real.strip_prefix(&self.root) else { return Ok(()) };
        let own = match &self.outbox {
            Outbox::Plain => return Ok(()),
            Outbox::Run(folder) => relative.starts_with(folder),
            Outbox::Closed => false,
        };
        if own || !is_outbox_path(relative) {
            return Ok(());
        }
        Err(ToolError::Refused(format!(
            "`{requested}` leads into files of another run's {OUTBOX_DIR}/; only this run's own \
             {OUTBOX_DIR}/ can be used"
        )))
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
        let lexical = self.map_outbox(lexical, requested)?;
        let real = canonicalize_existing(&lexical, requested)?;
        self.check_outbox(&real, requested)?;
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
        // The run's folder is shown as the `outbox/` the run knows.
        if let Outbox::Run(folder) = &self.outbox
            && let Ok(rest) = real.strip_prefix(self.root.join(folder))
        {
            return match rest.as_os_str().is_empty() {
                true => OUTBOX_DIR.to_owned(),
                false => Path::new(OUTBOX_DIR).join(rest).display().to_string(),
            };
        }
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
    fn outbox_paths_lead_to_the_runs_own_folder_only() {
        let (_dir, ws) = workspace();
        let folder = crate::workspace::outbox::run_folder("r1");
        let ctx = |outbox| ToolContext { workspace: ws.root().to_owned(), outbox, ..ToolContext::default() };
        let run = Workspace::for_run(&ctx(Some(folder.clone())), false).unwrap();
        let resolved = run.resolve("outbox/report.csv").unwrap();
        assert_eq!(resolved.path, ws.root().join(&folder).join("report.csv"));
        assert_eq!(resolved.shown, "outbox/report.csv");
        let absolute = ws.root().join("outbox/runs/r2/x.csv");
        assert_eq!(
            run.resolve(absolute.to_str().unwrap()).unwrap().path,
            ws.root().join(&folder).join("runs/r2/x.csv")
        );
        assert_eq!(run.resolve_dir("outbox").unwrap().shown, "outbox");
        assert!(ws.root().join(&folder).is_dir(), "listing the outbox makes it");
        std::fs::create_dir_all(ws.root().join("outbox/sent/t")).unwrap();
        std::os::unix::fs::symlink(ws.root().join("outbox/sent/t"), ws.root().join("peek")).unwrap();
        let err = run.resolve("peek/file").unwrap_err();
        assert!(err.to_string().contains("another run"), "{err}");
        let closed = Workspace::for_run(&ctx(None), false).unwrap();
        let err = closed.resolve("outbox/a.txt").unwrap_err();
        assert!(err.to_string().contains("sends no reply of its own"), "{err}");
        assert!(ws.resolve("outbox/a.txt").is_ok(), "outside a run, a folder like any other");
    }

    #[test]
    fn workspace_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(&dir.path().join("new/ws"), false).unwrap();
        assert!(ws.root().is_dir());
    }
}
