//! Markdown from the model to Telegram's HTML parse mode, and splitting into messages that fit
//! Telegram's length limit.
//!
//! Markdown is first rendered to top-level blocks of runs, each run a piece of visible text with
//! the stack of tags around it. Splitting works on that visible text, so a cut can never land
//! inside a tag or an escape, and every part re-renders its runs with the tags closed at its end
//! and reopened at the start of the next part.

use std::ops::Range;

use super::split;

mod markdown;
#[cfg(test)]
mod tests;

pub use split::split_plain;

/// One message's worth of rendered text: `html` for parse_mode HTML, and `plain`, the same
/// visible text without markup, to resend when Telegram rejects the HTML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub html: String,
    pub plain: String,
}

/// Telegram's limit on a message's visible text, in UTF-16 code units.
pub const MESSAGE_LIMIT: usize = 4096;

/// What separates two top-level blocks packed into the same part.
const BLOCK_GAP: &str = "\n\n";

/// Renders the model's Markdown to Telegram HTML.
pub fn render_html(markdown: &str) -> String {
    let mut runs = Vec::new();
    for block in markdown::blocks(markdown) {
        if !runs.is_empty() {
            runs.push(Run::untagged(BLOCK_GAP));
        }
        runs.extend(block);
    }
    runs_to_html(&runs)
}

/// Renders and splits into parts whose visible text is at most `limit` UTF-16 units each, in order.
///
/// A single character wider than `limit` (only possible for limits below 2) still gets a part of
/// its own, so the output always covers the whole text.
pub fn render_parts(markdown: &str, limit: usize) -> Vec<Part> {
    let mut packer = Packer::new(limit);
    for block in markdown::blocks(markdown) {
        packer.add(block);
    }
    packer.finish()
}

/// Visible length in UTF-16 code units of a plain string.
pub fn visible_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// A Telegram HTML tag, with its attribute where it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tag {
    Bold,
    Italic,
    Strike,
    Pre,
    Code { language: Option<String> },
    Link { href: String },
    Blockquote,
}

impl Tag {
    fn write_open(&self, html: &mut String) {
        match self {
            Tag::Bold => html.push_str("<b>"),
            Tag::Italic => html.push_str("<i>"),
            Tag::Strike => html.push_str("<s>"),
            Tag::Pre => html.push_str("<pre>"),
            Tag::Code { language: None } => html.push_str("<code>"),
            Tag::Code { language: Some(language) } => {
                html.push_str("<code class=\"language-");
                escape_into(html, language);
                html.push_str("\">");
            }
            Tag::Link { href } => {
                html.push_str("<a href=\"");
                escape_into(html, href);
                html.push_str("\">");
            }
            Tag::Blockquote => html.push_str("<blockquote>"),
        }
    }

    fn close(&self) -> &'static str {
        match self {
            Tag::Bold => "</b>",
            Tag::Italic => "</i>",
            Tag::Strike => "</s>",
            Tag::Pre => "</pre>",
            Tag::Code { .. } => "</code>",
            Tag::Link { .. } => "</a>",
            Tag::Blockquote => "</blockquote>",
        }
    }
}

/// Visible text with the tags around it, outermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    text: String,
    tags: Vec<Tag>,
}

impl Run {
    fn untagged(text: &str) -> Run {
        Run { text: text.to_owned(), tags: Vec::new() }
    }
}

/// Writes runs as HTML, closing only the tags that differ from one run to the next so that
/// adjacent runs share their common outer tags.
fn runs_to_html(runs: &[Run]) -> String {
    let mut html = String::new();
    let mut open: Vec<&Tag> = Vec::new();
    for run in runs {
        let shared = open.iter().zip(&run.tags).take_while(|(open, wanted)| **open == *wanted).count();
        close_down_to(&mut html, &mut open, shared);
        for tag in &run.tags[shared..] {
            tag.write_open(&mut html);
            open.push(tag);
        }
        escape_into(&mut html, &run.text);
    }
    close_down_to(&mut html, &mut open, 0);
    html
}

fn close_down_to(html: &mut String, open: &mut Vec<&Tag>, depth: usize) {
    while open.len() > depth {
        if let Some(tag) = open.pop() {
            html.push_str(tag.close());
        }
    }
}

/// Escapes text for Telegram HTML; `"` too, so the same function serves attribute values.
pub(crate) fn escape_into(html: &mut String, text: &str) {
    for ch in text.chars() {
        match ch {
            '&' => html.push_str("&amp;"),
            '<' => html.push_str("&lt;"),
            '>' => html.push_str("&gt;"),
            '"' => html.push_str("&quot;"),
            _ => html.push(ch),
        }
    }
}

fn plain_text(runs: &[Run]) -> String {
    runs.iter().map(|run| run.text.as_str()).collect()
}

/// The runs covering `range`, a byte range of their concatenated text on char boundaries.
fn slice_runs(runs: &[Run], range: Range<usize>) -> Vec<Run> {
    let mut sliced = Vec::new();
    let mut run_start = 0;
    for run in runs {
        let run_end = run_start + run.text.len();
        let from = range.start.max(run_start);
        let to = range.end.min(run_end);
        if from < to {
            sliced.push(Run { text: run.text[from - run_start..to - run_start].to_owned(), tags: run.tags.clone() });
        }
        run_start = run_end;
    }
    sliced
}

/// Drops leading blank lines and trailing whitespace, wherever in the runs they fall.
fn trim_runs(runs: &[Run]) -> Vec<Run> {
    let plain = plain_text(runs);
    slice_runs(runs, split::trim_range(&plain, 0..plain.len()))
}

/// Packs top-level blocks into parts, splitting the blocks too long for one part.
struct Packer {
    limit: usize,
    parts: Vec<Part>,
    current: Vec<Run>,
    current_len: usize,
}

impl Packer {
    fn new(limit: usize) -> Packer {
        Packer { limit, parts: Vec::new(), current: Vec::new(), current_len: 0 }
    }

    fn add(&mut self, block: Vec<Run>) {
        let block_len = visible_len(&plain_text(&block));
        if block_len == 0 {
            return;
        }
        let gap_len = visible_len(BLOCK_GAP);
        if !self.current.is_empty() && self.current_len + gap_len + block_len <= self.limit {
            self.current.push(Run::untagged(BLOCK_GAP));
            self.current.extend(block);
            self.current_len += gap_len + block_len;
            return;
        }
        self.flush();
        if block_len <= self.limit {
            self.current = block;
            self.current_len = block_len;
            return;
        }
        let mut pieces = split_block(&block, self.limit);
        // The last piece stays open so that the blocks after it can share its part.
        if let Some(last) = pieces.pop() {
            pieces.into_iter().for_each(|piece| self.emit(&piece));
            self.current_len = visible_len(&plain_text(&last));
            self.current = last;
        }
    }

    fn flush(&mut self) {
        let current = std::mem::take(&mut self.current);
        self.current_len = 0;
        self.emit(&current);
    }

    fn emit(&mut self, runs: &[Run]) {
        let runs = trim_runs(runs);
        if runs.is_empty() {
            return;
        }
        self.parts.push(Part { html: runs_to_html(&runs), plain: plain_text(&runs) });
    }

    fn finish(mut self) -> Vec<Part> {
        self.flush();
        self.parts
    }
}

/// Splits one block's runs on line, then word, then char boundaries of its visible text.
fn split_block(block: &[Run], limit: usize) -> Vec<Vec<Run>> {
    let plain = plain_text(block);
    split::piece_ranges(&plain, limit).into_iter().map(|range| slice_runs(block, range)).collect()
}
