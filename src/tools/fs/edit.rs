//! `edit_file`: replaces one exact piece of text in a file of the workspace.

use std::io::Read;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::write::{atomic_write, check_size};
use super::{FsSettings, Resolved, as_text, blocking, open_regular};
use crate::tools::{Tool, ToolContext, ToolError, required_str};

/// Replaces `old_text` with `new_text` when `old_text` occurs exactly once.
pub struct EditFile {
    settings: FsSettings,
}

impl EditFile {
    pub fn new(settings: FsSettings) -> Self {
        Self { settings }
    }
}

#[async_trait]
impl Tool for EditFile {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Replaces old_text with new_text in a text file of the workspace. old_text must match the \
         file exactly (whitespace and line breaks included) and occur exactly once: include enough \
         surrounding lines to make it unique. Read the file first."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace"},
                "old_text": {"type": "string", "description": "Exact text to replace; must occur once"},
                "new_text": {"type": "string", "description": "Replacement text (may be empty)"}
            },
            "required": ["path", "old_text", "new_text"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = required_str(&arguments, "path")?.to_owned();
        let old_text = required_str(&arguments, "old_text")?.to_owned();
        let new_text = required_str(&arguments, "new_text")?.to_owned();
        if old_text.is_empty() {
            return Err(ToolError::InvalidArguments(
                "`old_text` must not be empty; to write a whole file use write_file".into(),
            ));
        }
        let workspace = self.settings.workspace(ctx)?;
        let max_bytes = self.settings.max_write_bytes;
        blocking(move || {
            let resolved = workspace.resolve_to_change(&path)?;
            let text = read_whole(&resolved, max_bytes)?;
            let edited = replace_once(&text, &old_text, &new_text, &resolved.shown)?;
            check_size(edited.len(), max_bytes)?;
            atomic_write(&resolved, edited.as_bytes())?;
            Ok(format!("edited `{}`: replaced 1 occurrence ({} → {} bytes)", resolved.shown, text.len(), edited.len()))
        })
        .await
    }
}

/// The file's text, refusing files too big to write back.
fn read_whole(resolved: &Resolved, max_bytes: usize) -> Result<String, ToolError> {
    let (file, metadata) = open_regular(resolved)?;
    if metadata.len() > max_bytes as u64 {
        return Err(ToolError::Refused(format!(
            "`{}` is {} bytes, over the {max_bytes}-byte limit for editing (tools.fs.max_write_bytes)",
            resolved.shown,
            metadata.len()
        )));
    }
    let mut bytes = Vec::new();
    // The limit also holds if the file grows after the size check.
    file.take(max_bytes as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| super::workspace::io_error("read", &resolved.shown, &e))?;
    as_text(bytes, &resolved.shown)
}

fn replace_once(text: &str, old_text: &str, new_text: &str, shown: &str) -> Result<String, ToolError> {
    match text.matches(old_text).count() {
        1 => Ok(text.replacen(old_text, new_text, 1)),
        0 => Err(ToolError::Failed(format!(
            "old_text was not found in `{shown}`; read the file again and copy the text exactly, \
             including whitespace and line breaks"
        ))),
        n => Err(ToolError::Failed(format!(
            "old_text occurs {n} times in `{shown}`; include more surrounding lines so it occurs exactly once"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::Sandbox;
    use super::*;

    #[tokio::test]
    async fn replaces_exactly_one_occurrence() {
        let sandbox = Sandbox::new();
        std::fs::write(sandbox.ws().join("f.rs"), "fn a() {}\nfn b() {}\n").unwrap();
        let edit = EditFile::new(FsSettings::default());
        let args = json!({"path": "f.rs", "old_text": "fn b() {}", "new_text": "fn c() {}"});
        let out = sandbox.call(&edit, args).await.unwrap();
        assert!(out.starts_with("edited `f.rs`"), "{out}");
        assert_eq!(std::fs::read_to_string(sandbox.ws().join("f.rs")).unwrap(), "fn a() {}\nfn c() {}\n");
    }

    #[tokio::test]
    async fn missing_and_ambiguous_text_fail_clearly_and_change_nothing() {
        let sandbox = Sandbox::new();
        std::fs::write(sandbox.ws().join("f.txt"), "x = 1\nx = 1\nx = 1\n").unwrap();
        let edit = EditFile::new(FsSettings::default());
        let err = sandbox.call(&edit, json!({"path": "f.txt", "old_text": "y", "new_text": "z"})).await.unwrap_err();
        assert!(err.to_string().contains("not found"), "{err}");
        let err =
            sandbox.call(&edit, json!({"path": "f.txt", "old_text": "x = 1", "new_text": "z"})).await.unwrap_err();
        assert!(err.to_string().contains("occurs 3 times"), "{err}");
        let err = sandbox.call(&edit, json!({"path": "f.txt", "old_text": "", "new_text": "z"})).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(_)), "{err}");
        assert_eq!(std::fs::read_to_string(sandbox.ws().join("f.txt")).unwrap(), "x = 1\nx = 1\nx = 1\n");
    }

    #[tokio::test]
    async fn files_over_the_write_limit_are_refused() {
        let sandbox = Sandbox::new();
        std::fs::write(sandbox.ws().join("big.txt"), "a".repeat(100)).unwrap();
        let edit = EditFile::new(FsSettings { max_write_bytes: 10, ..FsSettings::default() });
        let err = sandbox.call(&edit, json!({"path": "big.txt", "old_text": "a", "new_text": "b"})).await.unwrap_err();
        assert!(matches!(&err, ToolError::Refused(m) if m.contains("max_write_bytes")), "{err}");
    }
}
