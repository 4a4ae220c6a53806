//! Whether `HEARTBEAT.md` asks for anything. A heartbeat with nothing to do is skipped
//! before any model call, so the file the workspace template creates (a heading and an HTML
//! comment) must read as "no tasks".

/// True when `text` has a line that asks for something: any text, an open task (`- [ ] …`)
/// or a bullet with text. Blank lines, Markdown headings, HTML comments (also over several
/// lines), bullets without text and checked-off tasks (`- [x] …`) ask for nothing.
pub fn has_active_tasks(text: &str) -> bool {
    without_comments(text).lines().any(is_active_line)
}

/// `text` with every `<!-- … -->` removed; an unclosed comment runs to the end.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        match rest[start + 4..].find("-->") {
            // A newline in its place keeps the lines around the comment apart.
            Some(end) => {
                out.push('\n');
                rest = &rest[start + 4 + end + 3..];
            }
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

fn is_active_line(line: &str) -> bool {
    let line = line.trim();
    if line.is_empty() || is_heading(line) {
        return false;
    }
    let item = list_item(line).unwrap_or(line);
    let (checked, body) = match checkbox(item) {
        Some((checked, body)) => (checked, body),
        None => (false, item),
    };
    !checked && !body.trim().is_empty()
}

/// `# Title` … `###### Title`, or a lone `#`.
fn is_heading(line: &str) -> bool {
    let hashes = line.chars().take_while(|&c| c == '#').count();
    (1..=6).contains(&hashes) && line[hashes..].chars().next().is_none_or(char::is_whitespace)
}

/// The text after a list marker (`-`, `*`, `+`, `1.`, `1)`), if the line is a list item.
fn list_item(line: &str) -> Option<&str> {
    let after_marker = if let Some(rest) = line.strip_prefix(['-', '*', '+']) {
        rest
    } else {
        let digits = line.chars().take_while(char::is_ascii_digit).count();
        line[digits..].strip_prefix(['.', ')']).filter(|_| digits > 0)?
    };
    (after_marker.is_empty() || after_marker.starts_with(char::is_whitespace)).then_some(after_marker.trim_start())
}

/// `[ ] text` → (false, text), `[x] text` → (true, text).
fn checkbox(item: &str) -> Option<(bool, &str)> {
    let rest = item.strip_prefix('[')?;
    let mut chars = rest.chars();
    let mark = chars.next()?;
    let body = chars.as_str().strip_prefix(']')?;
    match mark {
        ' ' => Some((false, body)),
        'x' | 'X' => Some((true, body)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::BOOTSTRAP_FILES;

    #[test]
    fn nothing_to_do() {
        for text in [
            "",
            "\n  \n\t\n",
            "# Heartbeat checklist\n\n## Daily\n",
            "<!-- a note -->",
            "# Tasks\n<!-- first line\n  - Check the inbox every morning\n-->\n",
            "-\n*\n+ \n1.\n",
            "- [x] Renew the certificate\n* [X] Done too\n",
            "- [ ]\n",
        ] {
            assert!(!has_active_tasks(text), "{text:?}");
        }
    }

    #[test]
    fn something_to_do() {
        for text in [
            "Check the inbox.",
            "# Tasks\n- [ ] Renew the certificate\n",
            "- Summarise new files in inbox/",
            "1. Water the plants",
            "<!-- note --> Check the build",
            "<!-- a\nb -->\nCheck the build",
            "#hashtag is text, not a heading",
            "- [x] done\n- [ ] not done\n",
        ] {
            assert!(has_active_tasks(text), "{text:?}");
        }
    }

    #[test]
    fn the_workspace_template_has_no_active_tasks() {
        let template = BOOTSTRAP_FILES.iter().find(|file| file.name == "HEARTBEAT.md").unwrap().template;
        assert!(!has_active_tasks(template), "{template}");
    }
}
