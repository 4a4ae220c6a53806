//! What a model wrote, cleaned before a chat sees it.
//!
//! Models leak their scaffolding: tool calls written as text when the server did not parse
//! them (as XML, JSON or bracketed text), reasoning inside `<think>`, `<thought>` or
//! `<antThinking>` tags, echoed tool results, `<final>` wrappers, echoes of the system prompt, a
//! paragraph repeated twice. None of it is meant for the user, and if it stayed in the
//! transcript the model would read it back next turn and write more of it. `NO_REPLY` is the
//! model's way of choosing silence (a group chat it was not addressed in, a heartbeat with
//! nothing to say); such a reply, or one that is empty once cleaned, is suppressed.
//!
//! Matching is ASCII case-insensitive: the patterns are written in lower case and run on an
//! ASCII-lowercased copy, which has the same byte offsets as the original. (The `regex`
//! build has no Unicode case tables, so `(?i)` is not available.)

use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

#[cfg(test)]
pub(super) mod tests;

/// A cleaned reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sanitized {
    /// What the chat sees (empty when suppressed).
    pub text: String,
    /// Nothing is to be delivered: the model said `NO_REPLY`, or nothing was left.
    pub suppressed: bool,
    /// What was taken out, by kind, each kind once, in the order first found.
    pub removed: Vec<&'static str>,
}

/// The word a model answers with to stay silent.
const NO_REPLY: &str = "no_reply";

/// A leaked format, removed whole with the label reported in [`Sanitized::removed`]. The
/// pattern runs on the lowercased text (`(?s)` where a block spans lines). The rest tells the
/// stream cleaner (`hygiene::stream`) what to hold back while a reply streams: `openers` are
/// how every match begins (lowercase; after the line's indentation when `line_start`), `reach`
/// how far the text must have come before the pattern can decide.
pub(super) struct Leak {
    pub label: &'static str,
    pub pattern: &'static str,
    pub openers: &'static [&'static str],
    /// The pattern matches only at the start of a line (`^[ \t]*`).
    pub line_start: bool,
    pub reach: Reach,
}

/// What must have arrived after a leak's opener before its pattern decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reach {
    /// Its closing tag: a match is the whole block; until it comes, it may still come.
    Closer,
    /// Its closing mark, which does not come after a blank line.
    CloserInParagraph,
    /// The end of its line: a match then is final, and no match means it is none.
    Line,
    /// It runs on over the lines of its paragraph: a match is final at a blank line; the
    /// opener's line decides whether it is one.
    Paragraph,
    /// The end of the reply (a call cut off mid-way: all that follows goes).
    End,
}

const fn leak(label: &'static str, pattern: &'static str, openers: &'static [&'static str], reach: Reach) -> Leak {
    Leak { label, pattern, openers, line_start: false, reach }
}

/// [`leak`] at the start of a line only.
const fn line_leak(label: &'static str, pattern: &'static str, openers: &'static [&'static str], reach: Reach) -> Leak {
    Leak { label, pattern, openers, line_start: true, reach }
}

/// The leaked formats, in the order they are applied (a later match starting inside an earlier
/// one's is dropped with it).
pub(super) const LEAKS: &[Leak] = &[
    leak("thinking", r"(?s)<think(?:ing)?>.*?</think(?:ing)?>", &["<think>", "<thinking>"], Reach::Closer),
    // Gemma-style and Claude-style reasoning tags.
    leak("thinking", r"(?s)<thought>.*?</thought>", &["<thought>"], Reach::Closer),
    leak("thinking", r"(?s)<antthinking>.*?</antthinking>", &["<antthinking>"], Reach::Closer),
    leak("tool_call_xml", r"(?s)<tool_call>.*?</tool_call>", &["<tool_call>"], Reach::Closer),
    leak("tool_call_xml", r"(?s)<tool_use>.*?</tool_use>", &["<tool_use>"], Reach::Closer),
    leak(
        "tool_call_xml",
        r"(?s)<function_calls?>.*?</function_calls?>",
        &["<function_call>", "<function_calls>"],
        Reach::Closer,
    ),
    // MiniMax M2: `<invoke name=…>` calls with `<parameter name=…>` values, in this wrapper.
    leak("tool_call_xml", r"(?s)<minimax:tool_call>.*?</minimax:tool_call>", &["<minimax:tool_call>"], Reach::Closer),
    leak("tool_call_xml", r#"(?s)<invoke name="[^"]*">.*?</invoke>"#, &["<invoke name=\""], Reach::Closer),
    // Cut off mid-call (the token limit): an opener at the start of a line, to the end. An
    // opener inside a sentence is someone talking about the tags, and stays.
    line_leak(
        "tool_call_xml",
        r"(?sm)^[ \t]*<(?:tool_call|tool_use|function_calls?|invoke name=|minimax:tool_call)[^\n]*.*\z",
        &["<tool_call", "<tool_use", "<function_call", "<invoke name=", "<minimax:tool_call"],
        Reach::End,
    ),
    // Mistral's marker, followed by a JSON array on the same line.
    leak("text_tool_call", r"\[tool_calls\][^\n]*", &["[tool_calls]"], Reach::Line),
    // Transcripts rendered as text and echoed back: `[Tool Call: name(args)]` lines, and a
    // `[Tool Result …]` header with the rest of its paragraph. Only at the start of a line.
    line_leak("text_tool_call", r"(?m)^[ \t]*\[tool call:[^\n]*", &["[tool call:"], Reach::Line),
    line_leak(
        "tool_result_echo",
        r"(?m)^[ \t]*\[tool result[^\]\n]*\][^\n]*(?:\n[ \t]*\S[^\n]*)*",
        &["[tool result"],
        Reach::Paragraph,
    ),
    // A JSON object alone on its line that is shaped like a tool call.
    line_leak(
        "text_tool_call",
        r#"(?m)^[ \t]*\{\s*"name"\s*:\s*"[^"\n]*"\s*,\s*"(?:arguments|parameters)"\s*:\s*\{[^\n]*\}\s*\}[ \t]*$"#,
        &["{\"name\"", "{ \"name\""],
        Reach::Line,
    ),
    // A tool call of an earlier model as some clients replay it to Gemini, which writes it
    // back: `[Historical context: a different model called tool "exec" with arguments: {…}. Do
    // not mimic this format - use proper function calling.]`. A line starting with one goes
    // whole, unless it ends opening the call's JSON (pretty-printed over several lines): then,
    // as when it follows text on its line, the note goes to its closing words.
    line_leak(
        "historical_context",
        r"(?m)^[ \t]*\[historical context:[^\n]*[^\s{\[][ \t]*$",
        &["[historical context:"],
        Reach::Line,
    ),
    leak(
        "historical_context",
        r"(?s)\[historical context:(?:[^\n]|\n[ \t]*\S)*?do not mimic this format[^\]\n]*\]",
        &["[historical context:"],
        Reach::CloserInParagraph,
    ),
    leak("system_echo", r"(?s)<system>.*?</system>", &["<system>"], Reach::Closer),
    // A bracketed system-message header and the rest of its paragraph.
    line_leak(
        "system_echo",
        r"(?m)^[ \t]*\[system message\][^\n]*(?:\n[ \t]*\S[^\n]*)*",
        &["[system message]"],
        Reach::Paragraph,
    ),
];

/// `<final>…</final>`: when present, only the inside is the answer.
const FINAL: &str = r"(?s)<final>(.*?)</final>";

/// The patterns compiled once. They are constants, so a failure is a bug that the tests
/// catch (`every_pattern_compiles`); in a release build a bad pattern is skipped rather
/// than taking the worker down.
pub(super) static COMPILED: LazyLock<Compiled> = LazyLock::new(Compiled::build);

pub(super) struct Compiled {
    pub blocks: Vec<(&'static Leak, Regex)>,
    final_tag: Option<Regex>,
    paragraph_break: Option<Regex>,
}

impl Compiled {
    fn build() -> Self {
        let blocks = LEAKS.iter().filter_map(|leak| Some((leak, Regex::new(leak.pattern).ok()?))).collect();
        Self { blocks, final_tag: Regex::new(FINAL).ok(), paragraph_break: Regex::new(r"\n[ \t]*\n\s*").ok() }
    }
}

/// Cleans a model's reply; see the module documentation.
pub fn sanitize_reply(raw: &str) -> Sanitized {
    let compiled = &*COMPILED;
    let mut removed = Vec::new();
    let mut text = raw.replace("\r\n", "\n");
    // Judged on what the model wrote: blank lines left by a removed block are not news.
    if text.find(|c: char| !c.is_whitespace()).is_some_and(|first| text[..first].contains('\n')) {
        note(&mut removed, "leading_blank_lines");
    }
    text = strip_blocks(&text, compiled, &mut removed);
    if let Some(inner) = final_inner(&text, compiled) {
        text = inner;
        note(&mut removed, "final_tags");
    }
    text = dedupe_paragraphs(&text, compiled, &mut removed);
    let text = trim_reply(&text);
    if is_no_reply(&text) {
        note(&mut removed, "no_reply");
        return Sanitized { text: String::new(), suppressed: true, removed };
    }
    let suppressed = text.is_empty();
    Sanitized { text, suppressed, removed }
}

fn note(removed: &mut Vec<&'static str>, label: &'static str) {
    if !removed.contains(&label) {
        removed.push(label);
    }
}

/// Removes every block pattern's matches; when something went, the blank lines it leaves
/// behind are collapsed so a removed block does not leave a hole in the reply.
fn strip_blocks(text: &str, compiled: &Compiled, removed: &mut Vec<&'static str>) -> String {
    if !may_hold_markup(text) {
        return text.to_owned();
    }
    let lower = text.to_ascii_lowercase();
    let mut cuts: Vec<Range<usize>> = Vec::new();
    let fenced = fenced_ranges(text);
    for (leak, regex) in &compiled.blocks {
        for found in regex.find_iter(&lower) {
            // Inside a code block the model is showing the syntax on purpose (asked how tool
            // calls look, say): leave it.
            if fenced.iter().any(|fence| fence.contains(&found.start())) {
                continue;
            }
            // Starts inside a block already cut (the JSON of a `<tool_call>`, the `<invoke>` of
            // a closed `<function_calls>`): already handled, and not an unclosed call.
            if cuts.iter().any(|cut| cut.contains(&found.start())) {
                continue;
            }
            cuts.push(found.range());
            note(removed, leak.label);
        }
    }
    if let Some(range) = unpaired_think(&lower) {
        cuts.push(range);
        note(removed, "thinking");
    }
    if cuts.is_empty() {
        return text.to_owned();
    }
    let kept = cut(text, cuts);
    collapse_blank_lines(&kept)
}

/// Whether `text` has a character that every leaked format and `<final>` begin with (after
/// blanks): most replies are plain prose and skip the patterns, a search of each per reply.
fn may_hold_markup(text: &str) -> bool {
    text.contains(['<', '[', '{'])
}

/// The byte ranges of fenced code blocks (```` ``` ```` lines), an unclosed one to the end.
fn fenced_ranges(text: &str) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut open: Option<usize> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if is_fence(line) {
            match open.take() {
                Some(start) => ranges.push(start..at + line.len()),
                None => open = Some(at),
            }
        }
        at += line.len();
    }
    ranges.extend(open.map(|start| start..text.len()));
    ranges
}

/// Whether `line` opens or closes a fenced code block.
pub(super) fn is_fence(line: &str) -> bool {
    line.trim_start().starts_with("```")
}

/// Reasoning whose tags do not pair up: an opener at the very start that is never closed
/// (the reply was cut off while thinking: all of it is reasoning), or a closer without an
/// opener (the server put the opener in the prompt template: all before it is reasoning).
fn unpaired_think(lower: &str) -> Option<Range<usize>> {
    let open = lower.find("<think");
    let close = lower.find("</think");
    match (open, close) {
        (Some(open), None) if lower[..open].trim().is_empty() => Some(0..lower.len()),
        (None, Some(close)) | (Some(_), Some(close)) if open.is_none_or(|open| open > close) => {
            let end = lower[close..].find('>').map_or(lower.len(), |gt| close + gt + 1);
            Some(0..end)
        }
        _ => None,
    }
}

/// `text` without the byte ranges `cuts` (which may overlap).
fn cut(text: &str, mut cuts: Vec<Range<usize>>) -> String {
    cuts.sort_by_key(|range| range.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for range in cuts {
        if range.start > at {
            out.push_str(&text[at..range.start]);
        }
        at = at.max(range.end);
    }
    out.push_str(&text[at..]);
    out
}

fn collapse_blank_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in text.split('\n') {
        blank_run = if line.trim().is_empty() { blank_run + 1 } else { 0 };
        if blank_run <= 1 {
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

/// The inner text of the `<final>` blocks, joined, when there is at least one.
fn final_inner(text: &str, compiled: &Compiled) -> Option<String> {
    let regex = compiled.final_tag.as_ref().filter(|_| text.contains('<'))?;
    let lower = text.to_ascii_lowercase();
    let inner: Vec<&str> =
        regex.captures_iter(&lower).filter_map(|c| c.get(1)).map(|m| text[m.range()].trim()).collect();
    (!inner.is_empty()).then(|| inner.join("\n\n"))
}

/// Drops a paragraph that repeats the one before it (models sometimes loop once at the end).
fn dedupe_paragraphs(text: &str, compiled: &Compiled, removed: &mut Vec<&'static str>) -> String {
    // A paragraph break is two line breaks.
    let Some(breaks) = compiled.paragraph_break.as_ref().filter(|_| text.contains('\n')) else {
        return text.to_owned();
    };
    let mut out = String::with_capacity(text.len());
    let mut previous: Option<&str> = None;
    let mut at = 0;
    let mut dropped = false;
    let ends = breaks.find_iter(text).map(|m| (m.start(), m.end())).chain(std::iter::once((text.len(), text.len())));
    for (end, next) in ends {
        let paragraph = &text[at..end];
        let key = paragraph.trim();
        if !key.is_empty() && previous == Some(key) {
            dropped = true;
        } else {
            out.push_str(&text[at..next]);
            if !key.is_empty() {
                previous = Some(key);
            }
        }
        at = next;
    }
    if dropped {
        note(removed, "duplicate_paragraph");
        return out;
    }
    text.to_owned()
}

/// Without leading blank lines and trailing whitespace. Leading spaces on the first line are
/// kept (they may be an indented code line).
fn trim_reply(text: &str) -> String {
    let start = text
        .find(|c: char| !c.is_whitespace())
        .map_or(text.len(), |first| text[..first].rfind('\n').map_or(0, |newline| newline + 1));
    text[start..].trim_end().to_owned()
}

/// The whole reply, or its last line, is the no-reply token (in any case, maybe in
/// backticks or bold).
fn is_no_reply(text: &str) -> bool {
    let token = |line: &str| line.trim().trim_matches(['`', '*', '.']).eq_ignore_ascii_case(NO_REPLY);
    token(text) || text.lines().last().is_some_and(token)
}
