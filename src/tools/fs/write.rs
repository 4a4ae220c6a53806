//! `write_file`: creates or replaces a file of the workspace, atomically.

use std::fs::{OpenOptions, Permissions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::workspace::{io_error, refuse_special};
use super::{FsSettings, Resolved, blocking};
use crate::tools::{Tool, ToolContext, ToolError, required_str};
use crate::workspace::outbox::is_outbox_path;

/// Writes a whole file, creating parent directories inside the workspace.
pub struct WriteFile {
    settings: FsSettings,
}

impl WriteFile {
    pub fn new(settings: FsSettings) -> Self {
        Self { settings }
    }
}

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Creates or replaces a text file in the workspace with the given content (parent directories \
         are created). Paths are relative to the workspace. To change part of a file, use edit_file."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace"},
                "content": {"type": "string", "description": "The whole new content of the file"}
            },
            "required": ["path", "content"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = required_str(&arguments, "path")?.to_owned();
        let content = required_str(&arguments, "content")?.to_owned();
        check_size(content.len(), self.settings.max_write_bytes)?;
        let workspace = self.settings.workspace(ctx)?;
        blocking(move || {
            let resolved = workspace.resolve_to_change(&path)?;
            let existed = prepare_target(&resolved)?;
            atomic_write(&resolved, content.as_bytes())?;
            let verb = if existed { "replaced" } else { "created" };
            let sent = if is_outbox_path(Path::new(&resolved.shown)) { "; it goes with your reply" } else { "" };
            Ok(format!("{verb} `{}` ({} bytes){sent}", resolved.shown, content.len()))
        })
        .await
    }
}

/// Refuses content over the write limit.
pub(super) fn check_size(len: usize, max: usize) -> Result<(), ToolError> {
    if len > max {
        return Err(ToolError::Refused(format!(
            "the content is {len} bytes, over the {max}-byte limit for writing a file \
             (tools.fs.max_write_bytes); write smaller files"
        )));
    }
    Ok(())
}

/// Checks what is at the target now and creates its parent directories. Returns whether a
/// file is being replaced.
fn prepare_target(resolved: &Resolved) -> Result<bool, ToolError> {
    match resolved.path.symlink_metadata() {
        Ok(metadata) if metadata.is_dir() => {
            Err(ToolError::Failed(format!("`{}` is a directory; name a file inside it", resolved.shown)))
        }
        Ok(metadata) => refuse_special(metadata.file_type(), &resolved.shown).map(|()| true),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            // The resolved path's missing tail holds no symlinks (it does not exist yet), so the
            // directories created here are inside the workspace.
            if let Some(parent) = resolved.path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| io_error("create the directories of", &resolved.shown, &e))?;
            }
            Ok(false)
        }
        Err(e) => Err(io_error("inspect", &resolved.shown, &e)),
    }
}

/// Writes `bytes` to a new temporary file next to the target and renames it over the target,
/// so readers see the old or the new content, never half of it. An existing file keeps its
/// permissions.
pub(super) fn atomic_write(resolved: &Resolved, bytes: &[u8]) -> Result<(), ToolError> {
    let target = &resolved.path;
    let (Some(parent), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(ToolError::InvalidArguments(format!("`{}` does not name a file", resolved.shown)));
    };
    let permissions = target.metadata().ok().map(|m| m.permissions());
    let temp = parent.join(format!(".{}.{}.tmp", name.to_string_lossy(), unique_suffix()));
    let result = write_temp(&temp, bytes, permissions).and_then(|()| std::fs::rename(&temp, target));
    if let Err(e) = result {
        // Best effort: the temporary file is ours and useless now; the write error is what matters.
        let _ = std::fs::remove_file(&temp);
        return Err(io_error("write", &resolved.shown, &e));
    }
    Ok(())
}

fn write_temp(temp: &Path, bytes: &[u8], permissions: Option<Permissions>) -> std::io::Result<()> {
    // create_new + O_NOFOLLOW: never write through something that appeared at the temp name.
    let mut file = OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).open(temp)?;
    file.write_all(bytes)?;
    if let Some(permissions) = permissions {
        file.set_permissions(permissions)?;
    }
    file.sync_all()
}

/// Unique among concurrent writes of this process; the pid separates processes.
fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!("{}.{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::super::test_support::Sandbox;
    use super::*;

    fn tool(max_write_bytes: usize) -> WriteFile {
        WriteFile::new(FsSettings { max_write_bytes, ..FsSettings::default() })
    }

    #[tokio::test]
    async fn creates_parents_and_replaces_keeping_permissions() {
        let sandbox = Sandbox::new();
        let out = sandbox.call(&tool(100), json!({"path": "a/b/c.txt", "content": "hi"})).await.unwrap();
        assert_eq!(out, "created `a/b/c.txt` (2 bytes)");
        let file = sandbox.ws().join("a/b/c.txt");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "hi");
        std::fs::set_permissions(&file, Permissions::from_mode(0o600)).unwrap();
        let out = sandbox.call(&tool(100), json!({"path": "a/b/c.txt", "content": "again"})).await.unwrap();
        assert!(out.starts_with("replaced"), "{out}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "again");
        assert_eq!(file.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        let leftovers: Vec<_> = std::fs::read_dir(sandbox.ws().join("a/b")).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "a temporary file was left behind");
    }

    #[tokio::test]
    async fn oversized_content_is_refused_and_nothing_written() {
        let sandbox = Sandbox::new();
        let err = sandbox.call(&tool(4), json!({"path": "big.txt", "content": "12345"})).await.unwrap_err();
        assert!(matches!(&err, ToolError::Refused(m) if m.contains("max_write_bytes")), "{err}");
        assert!(!sandbox.ws().join("big.txt").exists());
    }

    #[tokio::test]
    async fn a_directory_is_not_overwritten() {
        let sandbox = Sandbox::new();
        std::fs::create_dir(sandbox.ws().join("d")).unwrap();
        let err = sandbox.call(&tool(100), json!({"path": "d", "content": "x"})).await.unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }

    #[tokio::test]
    async fn writing_through_a_symlink_inside_writes_its_target() {
        let sandbox = Sandbox::new();
        std::fs::write(sandbox.ws().join("real.txt"), "old").unwrap();
        std::os::unix::fs::symlink("real.txt", sandbox.ws().join("link.txt")).unwrap();
        sandbox.call(&tool(100), json!({"path": "link.txt", "content": "new"})).await.unwrap();
        assert_eq!(std::fs::read_to_string(sandbox.ws().join("real.txt")).unwrap(), "new");
        assert!(sandbox.ws().join("link.txt").symlink_metadata().unwrap().file_type().is_symlink());
    }
}
