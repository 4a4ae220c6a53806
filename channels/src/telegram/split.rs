//! Cutting text into pieces of bounded UTF-16 length on the most natural boundary available.

use std::ops::Range;

/// Boundaries to cut at, most preferred first: paragraph, line, word.
const SEPARATORS: [&str; 3] = ["\n\n", "\n", " "];

/// Splits text that is sent without parse mode (plain) into parts of at most `limit` units,
/// on paragraph, then line, then word boundaries.
pub fn split_plain(text: &str, limit: usize) -> Vec<String> {
    piece_ranges(text, limit).into_iter().map(|range| text[range].to_owned()).collect()
}

/// Byte ranges of the pieces of `text`, each at most `limit` UTF-16 units (or one char, when a
/// single char is wider than `limit`), trimmed and non-empty, in order.
pub(super) fn piece_ranges(text: &str, limit: usize) -> Vec<Range<usize>> {
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let window_end = window_end(text, start, limit);
        let (cut, resume) =
            if window_end == text.len() { (window_end, window_end) } else { cut_point(text, start, window_end) };
        let piece = trim_range(text, start..cut);
        if !piece.is_empty() {
            pieces.push(piece);
        }
        start = resume;
    }
    pieces
}

/// Narrows `range` to drop leading blank lines and all trailing whitespace. Leading spaces are
/// kept: they may be a code line's indentation.
pub(super) fn trim_range(text: &str, range: Range<usize>) -> Range<usize> {
    let slice = &text[range.clone()];
    let without_leading = slice.trim_start_matches(['\n', '\r']);
    let start = range.start + (slice.len() - without_leading.len());
    let end = start + without_leading.trim_end().len();
    start..end
}

/// The furthest byte index from `start` whose text fits in `limit` units; at least one char
/// further, so that splitting always makes progress.
fn window_end(text: &str, start: usize, limit: usize) -> usize {
    let mut units = 0;
    let mut end = start;
    for ch in text[start..].chars() {
        units += ch.len_utf16();
        if units > limit {
            break;
        }
        end += ch.len_utf8();
    }
    if end == start { start + text[start..].chars().next().map_or(0, char::len_utf8) } else { end }
}

/// Where to end the piece that starts at `start` and may reach `window_end`, and where the next
/// piece starts (after the separator cut at, which is dropped).
fn cut_point(text: &str, start: usize, window_end: usize) -> (usize, usize) {
    // One char past the window, so a separator right after a piece that fits exactly is found.
    let search_end = window_end + text[window_end..].chars().next().map_or(0, char::len_utf8);
    let search = &text[start..search_end];
    // A preferred boundary only wins if it leaves the piece at least half full; otherwise a
    // paragraph break near the start would make a tiny part.
    let half = (window_end - start) / 2;
    let found = SEPARATORS
        .iter()
        .find_map(|separator| search.rfind(separator).filter(|at| *at >= half).map(|at| (at, separator.len())))
        .or_else(|| {
            SEPARATORS
                .iter()
                .find_map(|separator| search.rfind(separator).filter(|at| *at > 0).map(|at| (at, separator.len())))
        });
    match found {
        Some((at, separator_len)) => (start + at, start + at + separator_len),
        None => (window_end, window_end),
    }
}
