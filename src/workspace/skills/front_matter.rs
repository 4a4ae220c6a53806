//! The front matter of a `SKILL.md`: the YAML block between `---` lines at its top, of which a
//! skill needs `name` and `description`.
//!
//! Only the part of YAML that skill files use is read: top-level `key: value` pairs, with
//! values plain, single- or double-quoted, continued on indented lines, or written as a block
//! (`>` folded, `|` literal). Nested maps (`metadata:`) and lists are skipped. That keeps a
//! YAML library out of the build for two strings.

/// What the front matter gives, and the text after it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FrontMatter {
    pub name: Option<String>,
    pub description: Option<String>,
    /// The file after the closing `---`.
    pub body: String,
}

/// Splits `text` into its front matter and body; `None` when it does not start with `---`
/// or the block is never closed.
pub fn parse(text: &str) -> Option<FrontMatter> {
    let text = text.trim_start_matches('\u{feff}');
    let mut lines = text.split_inclusive('\n');
    if lines.next()?.trim_end() != "---" {
        return None;
    }
    let mut block = Vec::new();
    let mut consumed = text.split_inclusive('\n').next()?.len();
    let mut closed = false;
    for line in lines {
        consumed += line.len();
        let bare = line.trim_end();
        if bare == "---" || bare == "..." {
            closed = true;
            break;
        }
        block.push(bare);
    }
    if !closed {
        return None;
    }
    let mut matter = FrontMatter { body: text[consumed..].trim().to_owned(), ..FrontMatter::default() };
    for (key, value) in pairs(&block) {
        match key {
            "name" => matter.name = Some(value).filter(|v| !v.is_empty()),
            "description" => matter.description = Some(value).filter(|v| !v.is_empty()),
            _ => {}
        }
    }
    Some(matter)
}

/// The top-level `key: value` pairs of a block, each value with its continuation lines.
fn pairs<'a>(block: &[&'a str]) -> Vec<(&'a str, String)> {
    let mut pairs = Vec::new();
    let mut index = 0;
    while index < block.len() {
        let line = block[index];
        index += 1;
        let top_level = !line.starts_with([' ', '\t']) && !line.trim_start().starts_with('#');
        let Some((key, first)) = line.split_once(':').filter(|_| top_level) else { continue };
        // Indented lines that follow belong to this key.
        let start = index;
        while index < block.len() && (block[index].starts_with([' ', '\t']) || block[index].trim().is_empty()) {
            index += 1;
        }
        pairs.push((key.trim(), value(first.trim(), &block[start..index])));
    }
    pairs
}

/// One value from its first line and its indented continuation lines.
fn value(first: &str, rest: &[&str]) -> String {
    let rest: Vec<&str> = rest.iter().map(|line| line.trim()).collect();
    match first.chars().next() {
        Some('|') => rest.join("\n").trim().to_owned(),
        Some('>') => fold(&rest),
        Some('"') => unquote_double(&joined(first, &rest)),
        Some('\'') => unquote_single(&joined(first, &rest)),
        // A nested map or list: not a value a skill needs.
        None if rest.first().is_some_and(|line| line.starts_with('-') || line.contains(": ")) => String::new(),
        _ => joined(first, &rest),
    }
}

/// Lines folded into one, blank lines kept as line breaks (YAML's folding).
fn fold(lines: &[&str]) -> String {
    let mut text = String::new();
    for line in lines {
        if line.is_empty() {
            text.push('\n');
        } else {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push(' ');
            }
            text.push_str(line);
        }
    }
    text.trim().to_owned()
}

fn joined(first: &str, rest: &[&str]) -> String {
    let mut lines = vec![first];
    lines.extend_from_slice(rest);
    fold(&lines)
}

fn unquote_double(text: &str) -> String {
    let inner = text.strip_prefix('"').unwrap_or(text);
    let inner = inner.strip_suffix('"').unwrap_or(inner);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

fn unquote_single(text: &str) -> String {
    let inner = text.strip_prefix('\'').unwrap_or(text);
    let inner = inner.strip_suffix('\'').unwrap_or(inner);
    inner.replace("''", "'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plain_quoted_and_block_values_and_skips_the_rest() {
        let text = "---\nname: pdf-tools\ndescription: \"Fill in \\\"PDF\\\" forms: text, boxes\"\nlicense: MIT\n\
                    metadata:\n  version: 2\n  tags: [a, b]\n---\n\n# PDF tools\n\nStep one.\n";
        let matter = parse(text).unwrap();
        assert_eq!(matter.name.as_deref(), Some("pdf-tools"));
        assert_eq!(matter.description.as_deref(), Some("Fill in \"PDF\" forms: text, boxes"));
        assert_eq!(matter.body, "# PDF tools\n\nStep one.");

        let folded = "---\nname: 'it''s'\ndescription: >\n  Writes minutes\n  from notes.\n---\nbody";
        let matter = parse(folded).unwrap();
        assert_eq!(matter.name.as_deref(), Some("it's"));
        assert_eq!(matter.description.as_deref(), Some("Writes minutes from notes."));

        let continued = "---\r\ndescription: Long text\r\n  that goes on.\r\nname: x\r\n---\r\nbody";
        let matter = parse(continued).unwrap();
        assert_eq!(matter.description.as_deref(), Some("Long text that goes on."));
        assert_eq!(matter.name.as_deref(), Some("x"));
    }

    #[test]
    fn no_front_matter_or_an_unclosed_one_is_none() {
        assert_eq!(parse("# Just a heading\n"), None);
        assert_eq!(parse("---\nname: x\n"), None);
        let empty = parse("---\n---\n").unwrap();
        assert_eq!((empty.name, empty.description, empty.body.as_str()), (None, None, ""));
    }
}
