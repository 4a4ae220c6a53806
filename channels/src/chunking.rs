//! Splitting Markdown for platforms that render it natively (Discord) and cap a message's
//! length: parts break between paragraphs where they can, then between lines, then between
//! words; a code block that must be split is closed at the end of one part and reopened, with
//! its language, at the start of the next, so every part renders on its own.

/// Splits `text` into parts of at most `limit` characters (Unicode scalar values), in order.
pub fn split_markdown(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(1);
    let mut packer = Packer { limit, parts: Vec::new(), current: String::new() };
    for segment in segments(text) {
        packer.add(segment);
    }
    packer.finish()
}

/// A paragraph of prose, or a fenced code block.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Prose(String),
    Code { open: String, lines: Vec<String>, close: Option<String> },
}

impl Segment {
    fn render(&self) -> String {
        match self {
            Segment::Prose(text) => text.clone(),
            Segment::Code { open, lines, close } => {
                let mut out = open.clone();
                for line in lines {
                    out.push('\n');
                    out.push_str(line);
                }
                if let Some(close) = close {
                    out.push('\n');
                    out.push_str(close);
                }
                out
            }
        }
    }
}

/// Cuts the text into paragraphs (separated by blank lines) and whole code blocks.
fn segments(text: &str) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut prose: Vec<&str> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(fence) = fence_of(line) {
            flush_prose(&mut prose, &mut segments);
            let mut body = Vec::new();
            let mut close = None;
            for inner in lines.by_ref() {
                if closes(inner, &fence) {
                    close = Some(inner.to_owned());
                    break;
                }
                body.push(inner.to_owned());
            }
            segments.push(Segment::Code { open: line.to_owned(), lines: body, close });
        } else if line.trim().is_empty() {
            flush_prose(&mut prose, &mut segments);
        } else {
            prose.push(line);
        }
    }
    flush_prose(&mut prose, &mut segments);
    segments
}

fn flush_prose(prose: &mut Vec<&str>, segments: &mut Vec<Segment>) {
    if !prose.is_empty() {
        segments.push(Segment::Prose(prose.join("\n")));
        prose.clear();
    }
}

/// The fence (``` or ~~~, three or more) a line opens a code block with, if it does.
fn fence_of(line: &str) -> Option<String> {
    let trimmed = line.trim_start();
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run: String = trimmed.chars().take_while(|c| *c == marker).collect();
    (run.chars().count() >= 3).then_some(run)
}

fn closes(line: &str, fence: &str) -> bool {
    let trimmed = line.trim();
    let marker = fence.chars().next().unwrap_or('`');
    trimmed.chars().count() >= fence.chars().count() && trimmed.chars().all(|c| c == marker)
}

fn len(text: &str) -> usize {
    text.chars().count()
}

struct Packer {
    limit: usize,
    parts: Vec<String>,
    current: String,
}

impl Packer {
    fn add(&mut self, segment: Segment) {
        let text = segment.render();
        let joined = if self.current.is_empty() { len(&text) } else { len(&self.current) + 2 + len(&text) };
        if joined <= self.limit {
            if !self.current.is_empty() {
                self.current.push_str("\n\n");
            }
            self.current.push_str(&text);
            return;
        }
        self.flush();
        if len(&text) <= self.limit {
            self.current = text;
            return;
        }
        let mut pieces = match segment {
            Segment::Prose(text) => split_prose(&text, self.limit),
            Segment::Code { open, lines, close } => split_code(&open, &lines, close.as_deref(), self.limit),
        };
        // The last piece may share its part with what follows.
        self.current = pieces.pop().unwrap_or_default();
        self.parts.extend(pieces);
    }

    fn flush(&mut self) {
        if !self.current.is_empty() {
            self.parts.push(std::mem::take(&mut self.current));
        }
    }

    fn finish(mut self) -> Vec<String> {
        self.flush();
        self.parts
    }
}

/// A paragraph longer than the limit: by lines, then words, then characters.
fn split_prose(text: &str, limit: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    for unit in text.split_inclusive(['\n', ' ']) {
        if len(&current) + len(unit) > limit {
            push_trimmed(&mut pieces, std::mem::take(&mut current));
        }
        if len(unit) > limit {
            pieces.extend(hard_split(unit.trim_end(), limit).into_iter().filter(|piece| !piece.trim().is_empty()));
        } else {
            current.push_str(unit);
        }
    }
    push_trimmed(&mut pieces, current);
    pieces
}

fn push_trimmed(pieces: &mut Vec<String>, piece: String) {
    let trimmed = piece.trim_end();
    if !trimmed.is_empty() {
        pieces.push(trimmed.to_owned());
    }
}

/// A code block longer than the limit: each piece is a complete block with the same opening
/// line (so the language is kept) and a closing fence.
fn split_code(open: &str, lines: &[String], close: Option<&str>, limit: usize) -> Vec<String> {
    let fence = fence_of(open).unwrap_or_else(|| "```".to_owned());
    let closing = close.map_or(fence, str::to_owned);
    // Room for the body once the opening and closing lines (and their line breaks) are in.
    let Some(room) = limit.checked_sub(len(open) + len(&closing) + 2).filter(|room| *room > 0) else {
        // No room for a body between fences: the block as written, closing fence included.
        let whole = std::iter::once(open).chain(lines.iter().map(String::as_str)).chain(close);
        let pieces = hard_split(&whole.collect::<Vec<_>>().join("\n"), limit);
        return pieces.into_iter().filter(|piece| !piece.trim().is_empty()).collect();
    };
    let mut bodies: Vec<String> = Vec::new();
    let mut body = String::new();
    for line in lines.iter().flat_map(|line| hard_split_keep_empty(line, room)) {
        let added = if body.is_empty() { len(&line) } else { len(&body) + 1 + len(&line) };
        if added > room && !body.is_empty() {
            bodies.push(std::mem::take(&mut body));
        } else if !body.is_empty() {
            body.push('\n');
        }
        body.push_str(&line);
    }
    bodies.push(body);
    let last = bodies.len() - 1;
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let close = if i < last { Some(closing.as_str()) } else { close };
            match close {
                Some(close) => format!("{open}\n{body}\n{close}"),
                None => format!("{open}\n{body}"),
            }
        })
        .collect()
}

fn hard_split(text: &str, limit: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(limit).map(|chunk| chunk.iter().collect()).collect()
}

fn hard_split_keep_empty(line: &str, limit: usize) -> Vec<String> {
    if line.is_empty() { vec![String::new()] } else { hard_split(line, limit) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(parts: &[String], limit: usize) {
        for part in parts {
            assert!(len(part) <= limit, "part of {} chars over {limit}: {part:?}", len(part));
            assert!(!part.trim().is_empty(), "empty part");
            let fences = part.lines().filter(|line| fence_of(line).is_some()).count();
            assert_eq!(fences % 2, 0, "unbalanced fences in {part:?}");
        }
    }

    #[test]
    fn short_text_is_one_part() {
        assert_eq!(split_markdown("hello **there**", 2000), ["hello **there**"]);
    }

    #[test]
    fn paragraphs_are_packed_and_split_between() {
        let paragraph = "word ".repeat(60).trim_end().to_owned(); // 299 chars
        let text = vec![paragraph.clone(); 10].join("\n\n");
        let parts = split_markdown(&text, 1000);
        check(&parts, 1000);
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0], vec![paragraph.clone(); 3].join("\n\n"));
        assert_eq!(parts.join("\n\n"), text);
    }

    #[test]
    fn a_long_code_block_is_closed_and_reopened_with_its_language() {
        let body: Vec<String> = (0..300).map(|i| format!("let x{i} = {i};")).collect();
        let text = format!("Here:\n\n```rust\n{}\n```\n\nDone.", body.join("\n"));
        let parts = split_markdown(&text, 2000);
        check(&parts, 2000);
        assert!(parts.len() >= 3, "{}", parts.len());
        assert_eq!(parts[0], "Here:");
        for part in &parts[1..parts.len() - 1] {
            assert!(part.starts_with("```rust\n") && part.ends_with("\n```"), "{part}");
        }
        assert!(parts.last().unwrap().ends_with("```\n\nDone."));
        let code: Vec<&str> =
            parts.iter().flat_map(|part| part.lines()).filter(|line| line.starts_with("let ")).collect();
        assert_eq!(code.len(), 300, "no code line lost or repeated");
    }

    #[test]
    fn long_lines_and_words_split_hard() {
        let word = "x".repeat(4500);
        let parts = split_markdown(&word, 2000);
        assert_eq!(parts.iter().map(|p| len(p)).collect::<Vec<_>>(), [2000, 2000, 500]);
        let long_code_line = format!("```\n{}\n```", "y".repeat(3000));
        let parts = split_markdown(&long_code_line, 2000);
        check(&parts, 2000);
        assert_eq!(parts.iter().map(|p| p.matches('y').count()).sum::<usize>(), 3000);
    }

    #[test]
    fn counts_characters_not_bytes_and_keeps_unclosed_blocks_as_written() {
        let text = "é".repeat(2500);
        let parts = split_markdown(&text, 2000);
        assert_eq!(parts.len(), 2);
        let unclosed = format!("```py\n{}", "print(1)\n".repeat(400));
        let parts = split_markdown(&unclosed, 2000);
        assert!(parts.len() >= 2);
        for part in &parts[..parts.len() - 1] {
            assert!(part.ends_with("\n```"), "{part}");
        }
        assert!(!parts.last().unwrap().ends_with("```"), "the model's unclosed block stays unclosed");
    }

    #[test]
    fn a_limit_too_small_for_fences_keeps_the_closing_fence() {
        // The hard split used to drop the closing `~~~` (the chunking fuzz target checks this).
        let parts = split_markdown("~~~\nab\n~~~", 5);
        assert_eq!(parts, ["~~~\na", "b\n~~~"]);
    }

    #[test]
    fn a_long_run_of_whitespace_makes_no_blank_part() {
        // Found by fuzzing: a word of 64 carriage returns was cut into parts of nothing but them.
        let text = format!("[l{}ink]", "\r".repeat(64));
        let parts = split_markdown(&text, 32);
        assert!(parts.iter().all(|part| !part.trim().is_empty()), "{parts:?}");
        assert_eq!(parts.concat().replace('\r', ""), "[link]");
    }

    #[test]
    fn tilde_fences_and_indented_fences_are_code_too() {
        let text = format!("~~~\n{}\n~~~", "a b c\n".repeat(500));
        let parts = split_markdown(&text, 1000);
        check(&parts, 1000);
        assert!(parts.iter().all(|part| part.starts_with("~~~\n") && part.ends_with("\n~~~")));
    }
}
