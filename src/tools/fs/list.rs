//! `list_dir`: the entries of a workspace directory, with their type and size.

use std::fs::DirEntry;
use std::os::unix::fs::FileTypeExt;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::workspace::io_error;
use super::{FsSettings, Resolved, Workspace, blocking};
use crate::tools::{Tool, ToolContext, ToolError};

/// Lists a directory, sorted by name, at most `max_list_entries` entries.
pub struct ListDir {
    settings: FsSettings,
}

impl ListDir {
    pub fn new(settings: FsSettings) -> Self {
        Self { settings }
    }
}

#[async_trait]
impl Tool for ListDir {
    fn name(&self) -> &str {
        "list_dir"
    }

    fn description(&self) -> &str {
        "Lists a directory of the workspace (default: the workspace itself): one entry per line with \
         its type (dir, file, link, other) and, for files, its size in bytes."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory relative to the workspace; default \".\""}
            }
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = match arguments.get("path") {
            None | Some(Value::Null) => ".".to_owned(),
            Some(Value::String(path)) if path.is_empty() => ".".to_owned(),
            Some(Value::String(path)) => path.clone(),
            Some(_) => return Err(ToolError::InvalidArguments("`path` must be a string".into())),
        };
        let workspace = self.settings.workspace(ctx)?;
        let max_entries = self.settings.max_list_entries;
        blocking(move || list(&workspace, &workspace.resolve_dir(&path)?, max_entries)).await
    }
}

fn list(workspace: &Workspace, resolved: &Resolved, max_entries: usize) -> Result<String, ToolError> {
    let shown = &resolved.shown;
    let metadata = resolved.path.metadata().map_err(|e| io_error("list", shown, &e))?;
    if !metadata.is_dir() {
        return Err(ToolError::Failed(format!("`{shown}` is not a directory; use read_file for files")));
    }
    let mut entries = std::fs::read_dir(&resolved.path)
        .and_then(|dir| dir.collect::<Result<Vec<_>, _>>())
        .map_err(|e| io_error("list", shown, &e))?;
    entries.retain(|entry| workspace.shows(&entry.path()));
    if entries.is_empty() {
        return Ok(format!("`{shown}` is empty"));
    }
    entries.sort_by_key(DirEntry::file_name);
    let total = entries.len();
    let mut out = format!("`{shown}` ({total} entries):\n");
    for entry in entries.iter().take(max_entries) {
        out.push_str(&describe(entry));
        out.push('\n');
    }
    if total > max_entries {
        out.push_str(&format!("… and {} more entries not shown (tools.fs.max_list_entries)\n", total - max_entries));
    }
    Ok(out)
}

/// One line: type, name, and size or link target. Symlinks are not followed.
fn describe(entry: &DirEntry) -> String {
    let name = entry.file_name().to_string_lossy().into_owned();
    let Ok(file_type) = entry.file_type() else {
        return format!("?     {name}");
    };
    if file_type.is_dir() {
        format!("dir   {name}/")
    } else if file_type.is_file() {
        match entry.metadata() {
            Ok(metadata) => format!("file  {name}  {} bytes", metadata.len()),
            Err(_) => format!("file  {name}"),
        }
    } else if file_type.is_symlink() {
        match std::fs::read_link(entry.path()) {
            Ok(target) => format!("link  {name} -> {}", target.display()),
            Err(_) => format!("link  {name}"),
        }
    } else {
        let kind = if file_type.is_fifo() {
            "fifo"
        } else if file_type.is_socket() {
            "socket"
        } else {
            "device"
        };
        format!("other {name} ({kind})")
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::Sandbox;
    use super::*;

    #[tokio::test]
    async fn lists_sorted_with_types_and_sizes() {
        let sandbox = Sandbox::new();
        let ws = sandbox.ws();
        std::fs::write(ws.join("b.txt"), "12345").unwrap();
        std::fs::create_dir(ws.join("a")).unwrap();
        std::os::unix::fs::symlink("b.txt", ws.join("c")).unwrap();
        let out = sandbox.call(&ListDir::new(FsSettings::default()), json!({})).await.unwrap();
        assert_eq!(out, "`.` (3 entries):\ndir   a/\nfile  b.txt  5 bytes\nlink  c -> b.txt\n");
    }

    #[tokio::test]
    async fn caps_the_count_and_says_how_many_were_left_out() {
        let sandbox = Sandbox::new();
        for i in 0..5 {
            std::fs::write(sandbox.ws().join(format!("f{i}")), "").unwrap();
        }
        let list = ListDir::new(FsSettings { max_list_entries: 2, ..FsSettings::default() });
        let out = sandbox.call(&list, json!({"path": ""})).await.unwrap();
        assert!(out.contains("f0") && out.contains("f1") && !out.contains("f2"), "{out}");
        assert!(out.contains("3 more entries not shown"), "{out}");
    }

    #[tokio::test]
    async fn empty_directories_and_files_say_so() {
        let sandbox = Sandbox::new();
        std::fs::create_dir(sandbox.ws().join("e")).unwrap();
        std::fs::write(sandbox.ws().join("f"), "").unwrap();
        let list = ListDir::new(FsSettings::default());
        assert_eq!(sandbox.call(&list, json!({"path": "e"})).await.unwrap(), "`e` is empty");
        let err = sandbox.call(&list, json!({"path": "f"})).await.unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }
}
