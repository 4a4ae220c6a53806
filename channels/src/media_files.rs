//! File names for media the adapters download into the workspace, and the files runs send
//! from their outbox as the worker keeps them for the adapters and the API.

use std::path::PathBuf;

/// `<message>-<index>-<name>`: unique per message and attachment, keeping the sender's file
/// name made safe (letters, digits, `.`, `-`, `_`; no separators, no leading dots), or
/// `fallback` when nothing usable is left.
pub fn saved_file_name(
    message_id: impl std::fmt::Display,
    index: usize,
    name: Option<&str>,
    fallback: &str,
) -> PathBuf {
    let safe = name.map(safe_name).filter(|name| !name.is_empty());
    PathBuf::from(format!("{message_id}-{index}-{}", safe.as_deref().unwrap_or(fallback)))
}

/// `name` made safe as a file name: letters, digits, `.`, `-` and `_` (anything else becomes
/// `_`), at most 100 characters, no leading dots; may be empty.
pub fn safe_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c.is_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' })
        .take(100)
        .collect();
    cleaned.trim_start_matches('.').to_owned()
}

/// Length of the token naming a run's sent files: 128 bits in lowercase hex.
pub const TOKEN_CHARS: usize = 32;

/// Whether `text` looks like a token of sent files (what the API takes in a download URL).
pub fn is_token(text: &str) -> bool {
    text.len() == TOKEN_CHARS && text.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

/// What the worker writes as `<token>.json` beside the folder `<token>/` of a run's sent files:
/// the session they belong to, which the API checks before it serves one.
pub fn sent_label(session_key: &str, run_id: &str) -> String {
    serde_json::json!({ "session_key": session_key, "run_id": run_id }).to_string()
}

/// The session a label (see [`sent_label`]) names.
pub fn label_session(label: &[u8]) -> Option<String> {
    let label: serde_json::Value = serde_json::from_slice(label).ok()?;
    label.get("session_key")?.as_str().map(str::to_owned)
}

/// The line a chat gets instead of a file over the platform's upload limit: which file, how
/// large, and the limit (`whose` says whose: "Telegram accepts from bots").
pub fn too_large_note(name: &str, size: u64, limit: u64, whose: &str) -> String {
    format!("({name} was not sent: it is {}, more than the {} {whose})", shown_size(size), shown_size(limit))
}

/// A size as people read it: `62.4 MB`, `50 MB`, `312 KB` (1 MB = 1024 × 1024 bytes, as the
/// platforms count their limits).
pub fn shown_size(bytes: u64) -> String {
    const MB: u64 = 1024 * 1024;
    match bytes {
        b if b >= MB && b % MB == 0 => format!("{} MB", b / MB),
        b if b >= MB => format!("{:.1} MB", b as f64 / MB as f64),
        b => format!("{} KB", b.div_ceil(1024)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_too_large_is_named_with_its_size_and_the_limit() {
        let note = too_large_note("report.zip", 65_431_142, 50 * 1024 * 1024, "Telegram accepts from bots");
        assert_eq!(note, "(report.zip was not sent: it is 62.4 MB, more than the 50 MB Telegram accepts from bots)");
        assert_eq!(shown_size(2000), "2 KB");
    }

    #[test]
    fn names_cannot_escape_the_directory() {
        assert_eq!(saved_file_name(5, 0, Some("../../etc/passwd"), "file"), PathBuf::from("5-0-_.._etc_passwd"));
        assert_eq!(saved_file_name(5, 1, Some("report 2026.pdf"), "file"), PathBuf::from("5-1-report_2026.pdf"));
        assert_eq!(saved_file_name(6, 0, None, "photo.jpg"), PathBuf::from("6-0-photo.jpg"));
        assert_eq!(saved_file_name(6, 0, Some("..."), "file"), PathBuf::from("6-0-file"));
    }
}
