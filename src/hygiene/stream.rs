//! The reply cleaner for text as it streams, so that what a chat shows while the model writes
//! (Telegram's draft, the web chat, the API's stream) never shows a leaked block that the
//! final reply will not have.
//!
//! It knows the leaked formats from the sanitizer's table ([`super::sanitize::LEAKS`]): where
//! a piece could begin one (a `<`, `[` or `{` that starts, or may still start, one of their
//! openers) the text is held back until the format's pattern decides. A complete leaked block
//! is dropped, text that turns out to be none is released. Whitespace is held until more text
//! follows it, and shaped as the sanitizer shapes it (no leading blank lines, no trailing
//! whitespace, at most one blank line where a block was cut). Inside a fenced code block
//! nothing is held, as the sanitizer leaves it alone.
//!
//! The rules that need the whole reply stay the final reply's: reasoning closed by a
//! `</think>` without an opener, `<final>` wrappers, a repeated paragraph, `NO_REPLY`. So what
//! streams is what the final reply starts with, up to those; the final reply replaces it.
//!
//! Most pieces contain no opener's first character: they pass with one scan and no regex.

use std::sync::{Mutex, PoisonError};

use super::sanitize::{COMPILED, Reach, is_fence};

#[cfg(test)]
mod tests;

/// Cleans the pieces of one streamed model answer, in order.
#[derive(Debug, Default)]
pub struct StreamCleaner {
    /// Everything received; `lower` is its ASCII-lowercased copy (the same byte offsets).
    raw: String,
    lower: String,
    /// Everything before it is decided: shown, in `space`, or dropped.
    pos: usize,
    /// Whitespace kept but not shown yet (trailing whitespace is never shown).
    space: String,
    shown_any: bool,
    cut_any: bool,
    /// A leak's opener is complete and its pattern undecided: only a piece with one of these
    /// characters can settle it (see [`wakes`]), so only such a piece is worth looking again.
    waiting_for: Option<&'static [char]>,
    fence: FenceScan,
}

impl StreamCleaner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next piece of the model's text; returns what may be shown now (maybe empty).
    pub fn push(&mut self, piece: &str) -> String {
        self.raw.push_str(piece);
        self.lower.push_str(&piece.to_ascii_lowercase());
        if self.waiting_for.is_some_and(|wakes| !piece.contains(wakes)) {
            return String::new();
        }
        self.waiting_for = None;
        let mut shown = String::new();
        self.advance(&mut shown);
        shown
    }

    fn advance(&mut self, shown: &mut String) {
        loop {
            let rest = &self.raw[self.pos..];
            let plain = rest.find(|c: char| c.is_whitespace() || may_open(c)).unwrap_or(rest.len());
            if plain > 0 {
                let (from, to) = (self.pos, self.pos + plain);
                self.show_space(shown);
                shown.push_str(&self.raw[from..to]);
                self.shown_any = true;
                self.pos = to;
            }
            let Some(next) = self.raw[self.pos..].chars().next() else { return };
            if next.is_whitespace() {
                self.space.push(next);
                self.pos += next.len_utf8();
                continue;
            }
            match self.leak_at(self.pos) {
                Found::Nothing => {
                    self.show_space(shown);
                    shown.push(next);
                    self.shown_any = true;
                    self.pos += next.len_utf8();
                }
                Found::Leak { start, end } => {
                    // A leak from its line's start takes the indentation held before it.
                    if self.space.ends_with(&self.raw[start..self.pos]) {
                        self.space.truncate(self.space.len() - (self.pos - start));
                    }
                    self.pos = end;
                    self.cut_any = true;
                }
                Found::Undecided { waiting_for } => {
                    self.waiting_for = waiting_for;
                    return;
                }
            }
        }
    }

    /// What begins at `pos`, a character that may open a leak: the first leak in the table's
    /// order whose opener is there and whose pattern matches or may still match decides.
    fn leak_at(&mut self, pos: usize) -> Found {
        if self.fence.inside(&self.raw, pos) {
            return Found::Nothing;
        }
        let line_start = self.line_start(pos);
        for (leak, regex) in &COMPILED.blocks {
            let start = match (leak.line_start, line_start) {
                (false, _) => pos,
                (true, Some(start)) => start,
                (true, None) => continue,
            };
            match opener(&self.lower[pos..], leak.openers) {
                Opener::No => continue,
                Opener::Partial => return Found::Undecided { waiting_for: None },
                Opener::Full => {}
            }
            let held = &self.lower[start..];
            let (settles_match, settles_miss) = settling(leak.reach);
            match regex.find(held).filter(|found| found.start() == 0) {
                Some(found) if settles_match.reached(&held[found.end()..]) => {
                    return Found::Leak { start, end: start + found.end() };
                }
                Some(_) => return Found::Undecided { waiting_for: Some(wakes(leak.reach)) },
                None if settles_miss.reached(held) => continue,
                None => return Found::Undecided { waiting_for: Some(wakes(leak.reach)) },
            }
        }
        Found::Nothing
    }

    /// The start of `pos`'s line when only spaces and tabs come before `pos` on it.
    fn line_start(&self, pos: usize) -> Option<usize> {
        let start = self.raw[..pos].rfind('\n').map_or(0, |newline| newline + 1);
        self.raw[start..pos].bytes().all(|byte| byte == b' ' || byte == b'\t').then_some(start)
    }

    /// Shows the held whitespace as the sanitizer leaves it: leading blank lines dropped, and
    /// once a block was cut, line ends trimmed and at most one blank line.
    fn show_space(&mut self, shown: &mut String) {
        if self.space.is_empty() {
            return;
        }
        let space = self.space.replace("\r\n", "\n");
        let newlines = space.matches('\n').count();
        let last_line = space.rfind('\n').map_or(space.as_str(), |newline| &space[newline + 1..]);
        if !self.shown_any {
            shown.push_str(last_line);
        } else if self.cut_any && newlines > 0 {
            shown.push_str(if newlines == 1 { "\n" } else { "\n\n" });
            shown.push_str(last_line);
        } else {
            shown.push_str(&space);
        }
        self.space.clear();
    }
}

/// Wraps `emit`, which shows streamed text, so that every piece passes a [`StreamCleaner`]
/// first (one per streamed answer); a piece that leaves nothing to show is not emitted.
pub fn cleaning(emit: impl Fn(&str) + Send + Sync) -> impl Fn(&str) + Send + Sync {
    let cleaner = Mutex::new(StreamCleaner::new());
    move |piece: &str| {
        let shown = cleaner.lock().unwrap_or_else(PoisonError::into_inner).push(piece);
        if !shown.is_empty() {
            emit(&shown);
        }
    }
}

/// Whether `c` is the first character of some leak's opener (all are `<`, `[` or `{`).
fn may_open(c: char) -> bool {
    matches!(c, '<' | '[' | '{')
}

/// What the text at a position is.
enum Found {
    Nothing,
    /// A leaked block from `start` to `end`, to drop.
    Leak {
        start: usize,
        end: usize,
    },
    /// Not known before more text comes: any text (an opener not complete yet), or text with
    /// one of `waiting_for`.
    Undecided {
        waiting_for: Option<&'static [char]>,
    },
}

enum Opener {
    No,
    /// The text ends inside one.
    Partial,
    Full,
}

fn opener(text: &str, openers: &[&str]) -> Opener {
    if openers.iter().any(|opener| text.starts_with(opener)) {
        Opener::Full
    } else if openers.iter().any(|opener| opener.starts_with(text)) {
        Opener::Partial
    } else {
        Opener::No
    }
}

/// When a pattern's verdict is final, judged on the text after a match or after the opener.
#[derive(Debug, Clone, Copy)]
enum Settles {
    AtOnce,
    AtLineEnd,
    AtBlankLine,
    Never,
}

impl Settles {
    fn reached(self, after: &str) -> bool {
        match self {
            Settles::AtOnce => true,
            Settles::AtLineEnd => after.contains('\n'),
            Settles::AtBlankLine => has_blank_line(after),
            Settles::Never => false,
        }
    }
}

/// When a leak's match is final, and when its pattern not matching is.
fn settling(reach: Reach) -> (Settles, Settles) {
    match reach {
        Reach::Closer => (Settles::AtOnce, Settles::Never),
        Reach::CloserInParagraph => (Settles::AtOnce, Settles::AtBlankLine),
        Reach::Line => (Settles::AtLineEnd, Settles::AtLineEnd),
        Reach::Paragraph => (Settles::AtBlankLine, Settles::AtLineEnd),
        Reach::End => (Settles::Never, Settles::Never),
    }
}

/// The characters whose arrival may settle a leak of `reach` whose opener is complete: its
/// closer's last one, or the newline that ends a line (the end of the reply settles nothing
/// here: what is held then is the final reply's to decide).
fn wakes(reach: Reach) -> &'static [char] {
    match reach {
        Reach::Closer => &['>', ']'],
        Reach::CloserInParagraph => &['>', ']', '\n'],
        Reach::Line | Reach::Paragraph => &['\n'],
        Reach::End => &[],
    }
}

/// A line of only whitespace, ended by a newline, after a newline.
fn has_blank_line(text: &str) -> bool {
    let mut lines = text.split('\n');
    lines.next();
    let mut lines = lines.peekable();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() && lines.peek().is_some() {
            return true;
        }
    }
    false
}

/// Which lines open and close fenced code blocks (```` ``` ````), read once up to where asked.
#[derive(Debug, Default)]
struct FenceScan {
    /// The start of the first line not read yet.
    read_to: usize,
    open: bool,
}

impl FenceScan {
    /// Whether `pos` is in a fenced block as the sanitizer counts them: from an opening fence
    /// line to its closing one (an unclosed one to the end).
    fn inside(&mut self, raw: &str, pos: usize) -> bool {
        let line = raw[..pos].rfind('\n').map_or(0, |newline| newline + 1);
        while self.read_to < line {
            let end = raw[self.read_to..line].find('\n').map_or(line, |newline| self.read_to + newline + 1);
            self.open ^= is_fence(&raw[self.read_to..end]);
            self.read_to = end;
        }
        self.open || is_fence(&raw[line..])
    }
}
