//! File tools: `read_file`, `write_file`, `edit_file` and `list_dir`, confined to the agent's
//! workspace (see [`Workspace`] for how paths are resolved and checked).

mod delete;
mod edit;
mod list;
mod read;
pub(crate) mod workspace;
mod write;

use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;

pub use delete::DeleteFile;
pub use edit::EditFile;
pub use list::ListDir;
pub use read::ReadFile;
pub use workspace::{Resolved, Workspace};
pub use write::WriteFile;

use super::{ToolContext, ToolError};
use crate::config::FsToolsConfig;

/// Limits shared by the file tools (from `[tools.fs]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSettings {
    pub allow_outside_workspace: bool,
    pub max_read_bytes: usize,
    pub max_write_bytes: usize,
    pub max_list_entries: usize,
}

impl From<&FsToolsConfig> for FsSettings {
    fn from(config: &FsToolsConfig) -> Self {
        Self {
            allow_outside_workspace: config.allow_outside_workspace,
            max_read_bytes: config.max_read_bytes,
            max_write_bytes: config.max_write_bytes,
            max_list_entries: config.max_list_entries,
        }
    }
}

impl Default for FsSettings {
    fn default() -> Self {
        Self::from(&FsToolsConfig::default())
    }
}

impl FsSettings {
    fn workspace(&self, ctx: &ToolContext) -> Result<Workspace, ToolError> {
        Workspace::for_run(ctx, self.allow_outside_workspace)
    }
}

/// Runs blocking file work off the async threads.
async fn blocking<F>(work: F) -> Result<String, ToolError>
where
    F: FnOnce() -> Result<String, ToolError> + Send + 'static,
{
    tokio::task::spawn_blocking(work).await.map_err(|e| ToolError::Failed(format!("the file tool stopped: {e}")))?
}

/// Opens an existing regular file for reading. `O_NONBLOCK` so that a FIFO swapped in after
/// resolution cannot hang the open; `O_NOFOLLOW` so that a symlink swapped in for the last
/// component is not followed. The type is then checked on the open handle itself.
pub(crate) fn open_regular(resolved: &Resolved) -> Result<(File, Metadata), ToolError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(&resolved.path)
        .map_err(|e| workspace::io_error("open", &resolved.shown, &e))?;
    let metadata = file.metadata().map_err(|e| workspace::io_error("inspect", &resolved.shown, &e))?;
    workspace::refuse_special(metadata.file_type(), &resolved.shown)?;
    if metadata.is_dir() {
        return Err(ToolError::Failed(format!("`{}` is a directory; use list_dir to see its entries", resolved.shown)));
    }
    Ok((file, metadata))
}

/// Text of `bytes`, or an error saying the file is not text.
pub(crate) fn as_text(bytes: Vec<u8>, shown: &str) -> Result<String, ToolError> {
    let not_text = || {
        ToolError::Failed(format!(
            "`{shown}` is not a UTF-8 text file (binary data?); read_file and edit_file only handle text"
        ))
    };
    if bytes.contains(&0) {
        return Err(not_text());
    }
    String::from_utf8(bytes).map_err(|_| not_text())
}

#[cfg(test)]
pub(crate) mod test_support {
    use serde_json::Value;

    use super::*;
    use crate::tools::Tool;

    /// A temporary directory with a workspace inside it (`<tmp>/ws`), so tests can put things
    /// next to the workspace that must stay out of reach.
    pub struct Sandbox {
        _dir: tempfile::TempDir,
        pub ctx: ToolContext,
    }

    impl Sandbox {
        pub fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let workspace = dir.path().join("ws");
            std::fs::create_dir_all(&workspace).unwrap();
            // The mechanics of the tools, at a level that may change the persona too.
            let persona = crate::tools::PersonaAccess::Editable;
            Self { ctx: ToolContext { workspace, persona, ..ToolContext::default() }, _dir: dir }
        }

        pub fn ws(&self) -> std::path::PathBuf {
            self.ctx.workspace.clone()
        }

        pub async fn call(&self, tool: &dyn Tool, args: Value) -> Result<String, ToolError> {
            tool.execute(args, &self.ctx).await
        }
    }
}
