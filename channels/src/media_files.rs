//! File names for media the adapters download into the workspace.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_escape_the_directory() {
        assert_eq!(saved_file_name(5, 0, Some("../../etc/passwd"), "file"), PathBuf::from("5-0-_.._etc_passwd"));
        assert_eq!(saved_file_name(5, 1, Some("report 2026.pdf"), "file"), PathBuf::from("5-1-report_2026.pdf"));
        assert_eq!(saved_file_name(6, 0, None, "photo.jpg"), PathBuf::from("6-0-photo.jpg"));
        assert_eq!(saved_file_name(6, 0, Some("..."), "file"), PathBuf::from("6-0-file"));
    }
}
