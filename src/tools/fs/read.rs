//! `read_file`: a text file of the workspace, or a range of its lines.

use std::io::{BufRead, BufReader, Read};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{FsSettings, as_text, blocking, open_regular};
use crate::tools::{Tool, ToolContext, ToolError, optional_positive, required_str};

/// Reads a UTF-8 text file, at most `max_read_bytes` per call, whole lines at a time.
pub struct ReadFile {
    settings: FsSettings,
}

impl ReadFile {
    pub fn new(settings: FsSettings) -> Self {
        Self { settings }
    }
}

/// Which lines to read: `first` is 1-based.
#[derive(Debug, Clone, Copy)]
struct Range {
    first: u64,
    limit: Option<u64>,
}

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Reads a UTF-8 text file in the workspace. Paths are relative to the workspace. Long files are \
         cut at a line boundary with a note saying how to read on (offset = first line to read, \
         1-based; limit = number of lines)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace"},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based); default 1"},
                "limit": {"type": "integer", "minimum": 1, "description": "Most lines to read; default: as many as fit"}
            },
            "required": ["path"]
        })
    }

    async fn execute(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = required_str(&arguments, "path")?.to_owned();
        let range = Range {
            first: optional_positive(&arguments, "offset")?.unwrap_or(1),
            limit: optional_positive(&arguments, "limit")?,
        };
        let workspace = self.settings.workspace(ctx)?;
        let max_bytes = self.settings.max_read_bytes;
        blocking(move || read(&workspace.resolve(&path)?, range, max_bytes)).await
    }
}

fn read(resolved: &super::Resolved, range: Range, max_bytes: usize) -> Result<String, ToolError> {
    let shown = &resolved.shown;
    let (file, metadata) = open_regular(resolved)?;
    let io = |e: std::io::Error| super::workspace::io_error("read", shown, &e);
    let mut reader = BufReader::new(file);
    let skipped = skip_lines(&mut reader, range.first - 1).map_err(io)?;
    if skipped < range.first - 1 {
        return Err(ToolError::InvalidArguments(format!(
            "`{shown}` has only {skipped} lines; offset {} is past its end",
            range.first
        )));
    }
    let chunk = read_lines(&mut reader, range.limit, max_bytes).map_err(io)?;
    let more = chunk.over_budget || !reader.fill_buf().map_err(io)?.is_empty();
    let text = as_text(chunk.bytes, shown)?;
    if text.is_empty() {
        return Ok(match range.first {
            1 => format!("(`{shown}` is empty)"),
            first => format!("(`{shown}` has {} lines; nothing from line {first} on)", first - 1),
        });
    }
    if !more {
        return Ok(text);
    }
    let last = range.first + chunk.lines.saturating_sub(1);
    let note = if chunk.cut_line {
        format!(
            "[read_file: line {last} is longer than {max_bytes} bytes, only its start is shown; the file has {} bytes]",
            metadata.len()
        )
    } else {
        format!(
            "[read_file: showed lines {}–{last} of a {}-byte file; to read on, call read_file with offset={}]",
            range.first,
            metadata.len(),
            last + 1
        )
    };
    let separator = if text.ends_with('\n') { "" } else { "\n" };
    Ok(format!("{text}{separator}{note}"))
}

/// Skips `count` lines without keeping them; returns how many there were.
fn skip_lines(reader: &mut impl BufRead, count: u64) -> std::io::Result<u64> {
    let mut skipped = 0;
    while skipped < count {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            break;
        }
        let (used, ended_line) = match buffer.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buffer.len(), false),
        };
        reader.consume(used);
        // A last line without a newline ends at the end of the file.
        if ended_line || reader.fill_buf()?.is_empty() {
            skipped += 1;
        }
    }
    Ok(skipped)
}

/// Lines read, within the byte budget.
struct Chunk {
    bytes: Vec<u8>,
    lines: u64,
    /// The first line alone was over the budget and was cut.
    cut_line: bool,
    /// Reading stopped at the byte budget, with more of the file left.
    over_budget: bool,
}

/// Reads whole lines while they fit in `max_bytes` (and `limit`, if any). A first line longer
/// than the budget is cut, at a character boundary, so the model gets something.
fn read_lines(reader: &mut impl BufRead, limit: Option<u64>, max_bytes: usize) -> std::io::Result<Chunk> {
    let mut chunk = Chunk { bytes: Vec::new(), lines: 0, cut_line: false, over_budget: false };
    while limit.is_none_or(|limit| chunk.lines < limit) {
        let budget = max_bytes - chunk.bytes.len();
        let mut line = Vec::new();
        // One byte over the budget tells a line that fits from one that does not.
        let read = reader.by_ref().take(budget as u64 + 1).read_until(b'\n', &mut line)?;
        if read == 0 {
            break;
        }
        if line.len() > budget {
            chunk.over_budget = true;
            if chunk.lines == 0 {
                line.truncate(utf8_prefix(&line[..budget]));
                chunk.bytes = line;
                chunk.lines = 1;
                chunk.cut_line = true;
            }
            break;
        }
        chunk.bytes.extend_from_slice(&line);
        chunk.lines += 1;
    }
    Ok(chunk)
}

/// The length of the longest prefix of `bytes` that does not end inside a UTF-8 character.
fn utf8_prefix(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        // Invalid in the middle: keep it all; as_text will say it is not text.
        Err(_) => bytes.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::Sandbox;
    use super::*;

    fn tool(max_read_bytes: usize) -> ReadFile {
        ReadFile::new(FsSettings { max_read_bytes, ..FsSettings::default() })
    }

    #[tokio::test]
    async fn reads_a_file_and_ranges_of_it() {
        let sandbox = Sandbox::new();
        std::fs::write(sandbox.ws().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        let read = tool(1024);
        assert_eq!(sandbox.call(&read, json!({"path": "a.txt"})).await.unwrap(), "one\ntwo\nthree\n");
        let middle = sandbox.call(&read, json!({"path": "a.txt", "offset": 2, "limit": 1})).await.unwrap();
        assert!(middle.starts_with("two\n[read_file: showed lines 2–2"), "{middle}");
        assert!(middle.contains("offset=3"), "{middle}");
        let tail = sandbox.call(&read, json!({"path": "a.txt", "offset": 3})).await.unwrap();
        assert_eq!(tail, "three\n");
        std::fs::write(sandbox.ws().join("b.txt"), "one\ntwo").unwrap();
        let last = sandbox.call(&read, json!({"path": "b.txt", "offset": 2})).await.unwrap();
        assert_eq!(last, "two");
        let past = sandbox.call(&read, json!({"path": "a.txt", "offset": 9})).await.unwrap_err();
        assert!(past.to_string().contains("only 3 lines"), "{past}");
    }

    #[tokio::test]
    async fn long_files_are_cut_at_a_line_with_a_note() {
        let sandbox = Sandbox::new();
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(sandbox.ws().join("long.txt"), &text).unwrap();
        let out = sandbox.call(&tool(50), json!({"path": "long.txt"})).await.unwrap();
        let (shown, note) = out.split_once("\n[read_file").unwrap();
        assert!(shown.len() <= 50 && shown.ends_with("line 7"), "{out}");
        assert!(note.contains("offset=8"), "{out}");
    }

    #[tokio::test]
    async fn a_single_huge_line_is_cut_not_refused() {
        let sandbox = Sandbox::new();
        std::fs::write(sandbox.ws().join("one.txt"), "é".repeat(100)).unwrap();
        let out = sandbox.call(&tool(11), json!({"path": "one.txt"})).await.unwrap();
        assert!(out.starts_with("ééééé\n[read_file: line 1 is longer than 11 bytes"), "{out}");
    }

    #[tokio::test]
    async fn binary_and_empty_files_say_so() {
        let sandbox = Sandbox::new();
        std::fs::write(sandbox.ws().join("bin"), [0x7f, b'E', b'L', b'F', 0, 1]).unwrap();
        std::fs::write(sandbox.ws().join("latin1"), [b'c', 0xe9, b'\n']).unwrap();
        std::fs::write(sandbox.ws().join("empty"), "").unwrap();
        for name in ["bin", "latin1"] {
            let err = sandbox.call(&tool(1024), json!({"path": name})).await.unwrap_err();
            assert!(err.to_string().contains("not a UTF-8 text file"), "{err}");
        }
        let out = sandbox.call(&tool(1024), json!({"path": "empty"})).await.unwrap();
        assert!(out.contains("is empty"), "{out}");
    }

    #[tokio::test]
    async fn missing_files_and_directories_are_clear_errors() {
        let sandbox = Sandbox::new();
        let err = sandbox.call(&tool(1024), json!({"path": "nope.txt"})).await.unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        let err = sandbox.call(&tool(1024), json!({"path": "."})).await.unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
        let err = sandbox.call(&tool(1024), json!({"path": "x", "offset": 0})).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(_)), "{err}");
    }
}
