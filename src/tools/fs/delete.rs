//! `delete_file`: removes one file of the workspace (never a directory, so one call cannot
//! take a tree with it). What the agent uses to end onboarding by removing `BOOTSTRAP.md`.

use std::io::ErrorKind;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::workspace::io_error;
use super::{FsSettings, blocking};
use crate::tools::{Tool, ToolContext, ToolError, required_str};

pub struct DeleteFile {
    settings: FsSettings,
}

impl DeleteFile {
    pub fn new(settings: FsSettings) -> Self {
        Self { settings }
    }
}

#[async_trait]
impl Tool for DeleteFile {
    fn name(&self) -> &str {
        "delete_file"
    }

    fn description(&self) -> &str {
        "Deletes one file of the workspace (not a directory). Paths are relative to the workspace."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "File path relative to the workspace"}},
            "required": ["path"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = required_str(&arguments, "path")?.to_owned();
        let workspace = self.settings.workspace(ctx)?;
        blocking(move || {
            let resolved = workspace.resolve_to_change(&path)?;
            match resolved.path.symlink_metadata() {
                Ok(metadata) if metadata.is_file() => {}
                Ok(metadata) if metadata.is_dir() => {
                    return Err(ToolError::Refused(format!(
                        "`{}` is a directory; delete_file removes files only",
                        resolved.shown
                    )));
                }
                Ok(_) => return Err(ToolError::Refused(format!("`{}` is not a regular file", resolved.shown))),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return Err(ToolError::Failed(format!("`{}` does not exist", resolved.shown)));
                }
                Err(e) => return Err(io_error("inspect", &resolved.shown, &e)),
            }
            std::fs::remove_file(&resolved.path).map_err(|e| io_error("delete", &resolved.shown, &e))?;
            Ok(format!("deleted `{}`", resolved.shown))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::Sandbox;
    use super::*;

    #[tokio::test]
    async fn deletes_a_file_but_not_a_directory_or_anything_outside() {
        let sandbox = Sandbox::new();
        std::fs::write(sandbox.ws().join("BOOTSTRAP.md"), "hi").unwrap();
        std::fs::create_dir(sandbox.ws().join("notes")).unwrap();
        std::fs::write(sandbox.ws().join("../outside.txt"), "keep").unwrap();
        let tool = DeleteFile::new(FsSettings::default());
        let done = sandbox.call(&tool, json!({"path": "BOOTSTRAP.md"})).await.unwrap();
        assert_eq!(done, "deleted `BOOTSTRAP.md`");
        assert!(!sandbox.ws().join("BOOTSTRAP.md").exists());
        let again = sandbox.call(&tool, json!({"path": "BOOTSTRAP.md"})).await.unwrap_err();
        assert!(again.to_string().contains("does not exist"), "{again}");
        let dir = sandbox.call(&tool, json!({"path": "notes"})).await.unwrap_err();
        assert!(matches!(dir, ToolError::Refused(_)), "{dir}");
        let outside = sandbox.call(&tool, json!({"path": "../outside.txt"})).await.unwrap_err();
        assert!(matches!(outside, ToolError::Refused(_)), "{outside}");
        assert!(sandbox.ws().join("../outside.txt").exists());
    }
}
