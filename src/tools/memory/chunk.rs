//! Cutting a memory file into chunks for the index, and a question into search terms.
//!
//! A chunk is a paragraph: lines up to a blank line, a Markdown heading starting a new one,
//! at most [`MAX_LINES`] lines and [`MAX_CHARS`] characters. A single line longer than that
//! is cut into several chunks that all carry its line number. Line numbers are 1-based, so a
//! hit can be read with `memory_get` or `read_file`.

use crate::store::memory_index::MemoryChunk;

/// Lines in one chunk at most.
pub const MAX_LINES: usize = 20;
/// Characters in one chunk at most.
pub const MAX_CHARS: usize = 2_000;
/// Words of a question used at most; the rest are ignored.
pub const MAX_TERMS: usize = 16;

/// The chunks of `text`, in file order. Blank lines belong to no chunk.
pub fn chunks(text: &str) -> Vec<MemoryChunk> {
    let mut builder = Builder::default();
    for (index, line) in text.lines().enumerate() {
        let number = u32::try_from(index + 1).unwrap_or(u32::MAX);
        if line.trim().is_empty() {
            builder.flush();
            continue;
        }
        let chars = line.chars().count();
        if chars > MAX_CHARS {
            builder.flush();
            builder.long_line(number, line);
            continue;
        }
        let full = builder.lines == MAX_LINES || builder.chars + chars + 1 > MAX_CHARS;
        if full || line.trim_start().starts_with('#') {
            builder.flush();
        }
        builder.push(number, line, chars);
    }
    builder.flush();
    builder.done
}

/// The words of `query` as the index matches them: runs of letters and digits, lowercased,
/// each once, at most [`MAX_TERMS`]. Punctuation and operators mean nothing.
pub fn terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()) {
        let word = word.to_lowercase();
        if !terms.contains(&word) {
            terms.push(word);
        }
        if terms.len() == MAX_TERMS {
            break;
        }
    }
    terms
}

#[derive(Default)]
struct Builder {
    start: u32,
    end: u32,
    text: String,
    lines: usize,
    chars: usize,
    done: Vec<MemoryChunk>,
}

impl Builder {
    fn push(&mut self, number: u32, line: &str, chars: usize) {
        if self.lines == 0 {
            self.start = number;
        } else {
            self.text.push('\n');
            self.chars += 1;
        }
        self.text.push_str(line);
        self.chars += chars;
        self.lines += 1;
        self.end = number;
    }

    fn flush(&mut self) {
        if self.lines > 0 {
            let text = std::mem::take(&mut self.text);
            self.done.push(MemoryChunk { start_line: self.start, end_line: self.end, text });
        }
        self.lines = 0;
        self.chars = 0;
    }

    fn long_line(&mut self, number: u32, line: &str) {
        let characters: Vec<char> = line.chars().collect();
        for piece in characters.chunks(MAX_CHARS) {
            let text = piece.iter().collect();
            self.done.push(MemoryChunk { start_line: number, end_line: number, text });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(text: &str) -> Vec<(u32, u32)> {
        chunks(text).iter().map(|chunk| (chunk.start_line, chunk.end_line)).collect()
    }

    #[test]
    fn paragraphs_and_headings_make_chunks_with_their_lines() {
        let text = "# Family\nAnna likes tea.\nBen is 7.\n\n\n## Work\nStandup at 9.\n- item\n";
        assert_eq!(ranges(text), [(1, 3), (6, 8)]);
        let all = chunks(text);
        assert_eq!(all[0].text, "# Family\nAnna likes tea.\nBen is 7.");
        assert_eq!(all[1].text, "## Work\nStandup at 9.\n- item");
        assert_eq!(ranges("a\n# b\nc"), [(1, 1), (2, 3)]);
        assert!(chunks("\n \n\t\n").is_empty());
        assert_eq!(ranges("one\r\ntwo\r\n\r\nthree"), [(1, 2), (4, 4)]);
    }

    #[test]
    fn long_paragraphs_and_lines_are_bounded() {
        let text: String = (1..=45).map(|i| format!("fact {i}\n")).collect();
        assert_eq!(ranges(&text), [(1, 20), (21, 40), (41, 45)]);
        let wide: String = (1..=30).map(|_| format!("{}\n", "x".repeat(199))).collect();
        let wide_chunks = chunks(&wide);
        assert!(wide_chunks.iter().all(|chunk| chunk.text.chars().count() <= MAX_CHARS));
        assert_eq!(wide_chunks[0].end_line, 10);
        let huge = format!("before\n{}\nafter", "é".repeat(MAX_CHARS * 2 + 5));
        let huge_chunks = chunks(&huge);
        assert_eq!(ranges(&huge), [(1, 1), (2, 2), (2, 2), (2, 2), (3, 3)]);
        assert_eq!(huge_chunks[3].text.chars().count(), 5);
    }

    #[test]
    fn terms_are_words_without_operators() {
        assert_eq!(
            terms("Where's the ZEBRA code? zebra \"OR\" NEAR(x*)"),
            ["where", "s", "the", "zebra", "code", "or", "near", "x"]
        );
        assert_eq!(terms("Müller-Lüdenscheidt 2024"), ["müller", "lüdenscheidt", "2024"]);
        assert!(terms(" -- ?? ").is_empty());
        assert_eq!(terms(&"w ".repeat(40)).len(), 1);
        let many: String = (0..40).map(|i| format!("w{i} ")).collect();
        assert_eq!(terms(&many).len(), MAX_TERMS);
    }
}
