//! Walks pulldown-cmark's events into top-level blocks of tagged runs.

use std::fmt::Write as _;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag as MdTag, TagEnd};

use super::{Run, Tag, trim_runs};

/// The Markdown's top-level blocks (paragraphs, code blocks, lists, quotes, …), each trimmed
/// and non-empty.
pub(super) fn blocks(markdown: &str) -> Vec<Vec<Run>> {
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
    let mut walker = Walker::default();
    for event in Parser::new_ext(markdown, options) {
        walker.event(event);
    }
    walker.finish()
}

#[derive(Default)]
struct Walker {
    blocks: Vec<Vec<Run>>,
    current: Vec<Run>,
    /// One entry per open Markdown element that may carry a tag; `None` where it renders none
    /// (an unsafe link, a nested quote, superscript), so every end pops exactly one entry.
    tags: Vec<Option<Tag>>,
    /// Open block quotes, lists and tables: a top-level block ends only when this is zero.
    containers: usize,
    /// One entry per open list: the next number of an ordered list, `None` for bullets.
    lists: Vec<Option<u64>>,
    pending_newlines: usize,
    /// A list item's marker, written with the item's first text so a task box can replace it.
    item_marker: Option<String>,
    /// Per open link or image: its URL and the bytes written before it, to show the URL when
    /// the link has no text of its own.
    links: Vec<(String, usize)>,
    written: usize,
    table: Option<Table>,
}

#[derive(Default)]
struct Table {
    rows: Vec<Vec<String>>,
    header_rows: usize,
}

impl Walker {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Code(code) => self.write_tagged(&code, Tag::Code { language: None }),
            Event::SoftBreak | Event::HardBreak => self.line_break(),
            Event::Rule => {
                self.start_block();
                self.write("———");
                self.end_block();
            }
            Event::TaskListMarker(done) => self.task_marker(done),
            // Raw HTML is shown as the text it is; nothing from the model reaches Telegram as markup.
            Event::Text(text)
            | Event::Html(text)
            | Event::InlineHtml(text)
            | Event::InlineMath(text)
            | Event::DisplayMath(text)
            | Event::FootnoteReference(text) => self.write(&text),
        }
    }

    fn start(&mut self, tag: MdTag<'_>) {
        match tag {
            MdTag::Heading { .. } => self.open_block_with(Some(Tag::Bold)),
            MdTag::BlockQuote(_) => {
                self.start_block();
                self.containers += 1;
                // Telegram cannot nest quotes; an inner quote just stays inside the outer one.
                let nested = self.tags.contains(&Some(Tag::Blockquote));
                self.tags.push((!nested).then_some(Tag::Blockquote));
            }
            MdTag::CodeBlock(kind) => {
                self.open_block_with(Some(Tag::Pre));
                self.tags.push(Some(Tag::Code { language: code_language(&kind) }));
            }
            MdTag::List(first_number) => {
                if !self.lists.is_empty() {
                    self.request_newlines(1);
                }
                self.write_item_marker();
                self.flush_newlines(false);
                self.containers += 1;
                self.lists.push(first_number);
            }
            MdTag::Item => self.start_item(),
            MdTag::Table(_) => {
                self.start_block();
                self.containers += 1;
                self.table = Some(Table::default());
            }
            MdTag::TableHead | MdTag::TableRow => self.table_mut(|table| table.rows.push(Vec::new())),
            MdTag::TableCell => self.table_mut(|table| {
                if let Some(row) = table.rows.last_mut() {
                    row.push(String::new());
                }
            }),
            MdTag::Emphasis => self.tags.push(Some(Tag::Italic)),
            MdTag::Strong => self.tags.push(Some(Tag::Bold)),
            MdTag::Strikethrough => self.tags.push(Some(Tag::Strike)),
            MdTag::Superscript | MdTag::Subscript => self.tags.push(None),
            MdTag::Link { dest_url, .. } | MdTag::Image { dest_url, .. } => self.open_link(&dest_url),
            MdTag::Paragraph
            | MdTag::HtmlBlock
            | MdTag::FootnoteDefinition(_)
            | MdTag::DefinitionList
            | MdTag::DefinitionListTitle
            | MdTag::DefinitionListDefinition
            | MdTag::MetadataBlock(_) => self.start_block(),
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Heading(_) => {
                self.tags.pop();
                self.end_block();
            }
            TagEnd::BlockQuote(_) => {
                self.tags.pop();
                self.containers = self.containers.saturating_sub(1);
                self.end_block();
            }
            TagEnd::CodeBlock => {
                self.trim_trailing_newlines();
                self.tags.truncate(self.tags.len().saturating_sub(2));
                self.end_block();
            }
            TagEnd::List(_) => {
                self.lists.pop();
                self.containers = self.containers.saturating_sub(1);
                self.end_block();
            }
            TagEnd::Item => {
                self.write_item_marker();
                self.request_newlines(1);
            }
            TagEnd::Table => self.end_table(),
            TagEnd::TableHead => self.table_mut(|table| table.header_rows = table.rows.len()),
            TagEnd::TableRow | TagEnd::TableCell => {}
            TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough | TagEnd::Superscript | TagEnd::Subscript => {
                self.tags.pop();
            }
            TagEnd::Link | TagEnd::Image => self.close_link(),
            TagEnd::Paragraph
            | TagEnd::HtmlBlock
            | TagEnd::FootnoteDefinition
            | TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition
            | TagEnd::MetadataBlock(_) => self.end_block(),
        }
    }

    fn open_block_with(&mut self, tag: Option<Tag>) {
        self.start_block();
        self.tags.push(tag);
    }

    /// Writes the separation owed to what came before, with the tags still open around it.
    fn start_block(&mut self) {
        self.write_item_marker();
        self.flush_newlines(true);
    }

    /// Inside a list a line break waits, so the next line can be indented under its item.
    fn line_break(&mut self) {
        if self.lists.is_empty() {
            self.write("\n");
        } else {
            self.request_newlines(1);
        }
    }

    /// Ends a block: a top-level one goes to the output, a nested one asks for a gap before the
    /// next thing in its container.
    fn end_block(&mut self) {
        if self.containers == 0 {
            let block = trim_runs(&std::mem::take(&mut self.current));
            if !block.is_empty() {
                self.blocks.push(block);
            }
            self.pending_newlines = 0;
        } else {
            // Inside lists, blank lines between paragraphs would spread the list out.
            self.request_newlines(if self.lists.is_empty() { 2 } else { 1 });
        }
    }

    fn start_item(&mut self) {
        self.write_item_marker();
        // The item's marker carries its own indentation.
        self.flush_newlines(false);
        let indent = "  ".repeat(self.lists.len().saturating_sub(1));
        let marker = match self.lists.last_mut() {
            Some(Some(number)) => {
                let marker = format!("{number}. ");
                *number += 1;
                marker
            }
            _ => "• ".to_owned(),
        };
        self.item_marker = Some(indent + marker.as_str());
    }

    fn task_marker(&mut self, done: bool) {
        let checkbox = if done { "☑ " } else { "☐ " };
        let marker = self.item_marker.take().unwrap_or_default();
        let marker = match marker.strip_suffix("• ") {
            Some(indent) => format!("{indent}{checkbox}"),
            None => marker + checkbox,
        };
        self.item_marker = Some(marker);
    }

    fn write_item_marker(&mut self) {
        if let Some(marker) = self.item_marker.take() {
            self.flush_newlines(false);
            self.push_run(&marker);
        }
    }

    fn open_link(&mut self, url: &str) {
        self.links.push((url.to_owned(), self.written));
        // Telegram rejects a link inside a link, as an image inside a link would make.
        let inside_link = self.tags.iter().flatten().any(|tag| matches!(tag, Tag::Link { .. }));
        self.tags.push((is_safe_link(url) && !inside_link).then(|| Tag::Link { href: url.to_owned() }));
    }

    fn close_link(&mut self) {
        if let Some((url, written_before)) = self.links.pop()
            && written_before == self.written
        {
            self.write(&url);
        }
        self.tags.pop();
    }

    fn end_table(&mut self) {
        self.containers = self.containers.saturating_sub(1);
        if let Some(table) = self.table.take() {
            self.write_tagged(&table_text(&table.rows, table.header_rows), Tag::Pre);
        }
        self.end_block();
    }

    fn table_mut(&mut self, change: impl FnOnce(&mut Table)) {
        if let Some(table) = self.table.as_mut() {
            change(table);
        }
    }

    fn write_tagged(&mut self, text: &str, tag: Tag) {
        self.tags.push(Some(tag));
        self.write(text);
        self.tags.pop();
    }

    fn write(&mut self, text: &str) {
        if let Some(cell) = self.table.as_mut().and_then(|table| table.rows.last_mut()).and_then(|row| row.last_mut()) {
            cell.push_str(text);
            self.written += text.len();
            return;
        }
        self.write_item_marker();
        self.flush_newlines(true);
        self.push_run(text);
    }

    fn request_newlines(&mut self, count: usize) {
        self.pending_newlines = self.pending_newlines.max(count);
    }

    /// Writes pending newlines; with `continuation`, also the indentation that puts the next
    /// line under the text of the innermost list item.
    fn flush_newlines(&mut self, continuation: bool) {
        if self.pending_newlines > 0 && !self.current.is_empty() {
            let mut newlines = "\n".repeat(self.pending_newlines);
            if continuation {
                newlines.push_str(&"  ".repeat(self.lists.len()));
            }
            self.push_run(&newlines);
        }
        self.pending_newlines = 0;
    }

    fn push_run(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.written += text.len();
        let tags: Vec<Tag> = self.tags.iter().flatten().cloned().collect();
        match self.current.last_mut() {
            Some(last) if last.tags == tags => last.text.push_str(text),
            _ => self.current.push(Run { text: text.to_owned(), tags }),
        }
    }

    /// A code block's text ends with its last line's newline, which is not part of the code.
    fn trim_trailing_newlines(&mut self) {
        while let Some(last) = self.current.last_mut() {
            let kept = last.text.trim_end_matches('\n').len();
            last.text.truncate(kept);
            if !last.text.is_empty() {
                break;
            }
            self.current.pop();
        }
    }

    fn finish(mut self) -> Vec<Vec<Run>> {
        self.containers = 0;
        self.end_block();
        self.blocks
    }
}

fn code_language(kind: &CodeBlockKind<'_>) -> Option<String> {
    match kind {
        CodeBlockKind::Fenced(info) => info.split_whitespace().next().map(str::to_owned),
        CodeBlockKind::Indented => None,
    }
}

/// Whether a link target may become a clickable link: only schemes Telegram handles and that
/// cannot run code, so `javascript:` and friends stay plain text.
fn is_safe_link(url: &str) -> bool {
    let Some((scheme, _)) = url.trim().split_once(':') else {
        return false;
    };
    ["http", "https", "mailto", "tg"].iter().any(|allowed| scheme.eq_ignore_ascii_case(allowed))
}

/// Renders table rows as aligned text: columns padded to their widest cell, a rule under the
/// header rows.
fn table_text(rows: &[Vec<String>], header_rows: usize) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|column| rows.iter().filter_map(|row| row.get(column)).map(|cell| cell.chars().count()).max().unwrap_or(0))
        .collect();
    let mut lines = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (column, width) in widths.iter().enumerate() {
            let cell = row.get(column).map_or("", String::as_str);
            if column > 0 {
                line.push_str(" | ");
            }
            let _ = write!(line, "{cell:<width$}");
        }
        lines.push(line.trim_end().to_owned());
        if index + 1 == header_rows {
            lines.push(widths.iter().map(|width| "-".repeat(*width)).collect::<Vec<_>>().join("-+-"));
        }
    }
    lines.join("\n")
}
