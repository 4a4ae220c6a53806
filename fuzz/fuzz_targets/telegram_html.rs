//! Markdown → Telegram HTML, whole and split into messages: only tags Telegram's HTML parse
//! mode allows, nested the way it accepts, balanced; every `&`, `<`, `>`, `"` of the text
//! escaped; each part's visible text is its `plain` text and within the limit; nothing is lost
//! by splitting but whitespace.

#![no_main]

#[path = "../common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use switchboard_channels::telegram::format::{MESSAGE_LIMIT, render_html, render_parts, visible_len};

/// Checks `html` and returns its visible text (tags removed, entities decoded).
fn visible_text(html: &str) -> String {
    let mut text = String::new();
    let mut open: Vec<&str> = Vec::new();
    let mut rest = html;
    while let Some(ch) = rest.chars().next() {
        match ch {
            '<' => {
                let end = rest.find('>').unwrap_or_else(|| panic!("unterminated tag in {html:?}"));
                let tag = &rest[1..end];
                check_tag(tag, &mut open, html);
                rest = &rest[end + 1..];
            }
            '&' => {
                let (entity, decoded) = [("&amp;", '&'), ("&lt;", '<'), ("&gt;", '>'), ("&quot;", '"')]
                    .into_iter()
                    .find(|(entity, _)| rest.starts_with(entity))
                    .unwrap_or_else(|| panic!("bare & in {html:?}"));
                text.push(decoded);
                rest = &rest[entity.len()..];
            }
            '>' | '"' => panic!("unescaped {ch:?} in {html:?}"),
            _ => {
                text.push(ch);
                rest = &rest[ch.len_utf8()..];
            }
        }
    }
    assert!(open.is_empty(), "tags {open:?} left open in {html:?}");
    text
}

fn check_tag<'a>(tag: &'a str, open: &mut Vec<&'a str>, html: &str) {
    if let Some(name) = tag.strip_prefix('/') {
        assert_eq!(open.pop(), Some(name), "</{name}> does not close the innermost tag in {html:?}");
        return;
    }
    let name = match tag {
        "b" | "i" | "s" | "pre" | "code" | "blockquote" => tag,
        _ if tag.starts_with("code class=\"language-") && tag.ends_with('"') => "code",
        _ if tag.starts_with("a href=\"") && tag.ends_with('"') => "a",
        _ => panic!("tag <{tag}> is not one Telegram allows, in {html:?}"),
    };
    if name != "b" && name != "i" && name != "s" {
        // An attribute value is one quoted string with its quotes escaped.
        let value = tag.split_once('"').map_or("", |(_, value)| value.trim_end_matches('"'));
        assert!(!value.contains(['"', '<']), "attribute in <{tag}> not escaped, in {html:?}");
    }
    let parent = open.last().copied();
    assert_ne!(parent, Some("code"), "<{name}> inside <code> in {html:?}");
    if parent == Some("pre") {
        assert_eq!(name, "code", "<{name}> inside <pre> in {html:?}");
    }
    if name == "a" || name == "blockquote" || name == "pre" {
        assert!(!open.contains(&name), "<{name}> nested in itself in {html:?}");
    }
    open.push(name);
}

fuzz_target!(|data: &[u8]| {
    let Some((&limit_byte, markdown)) = data.split_first() else { return };
    let Ok(markdown) = std::str::from_utf8(markdown) else { return };
    // Small limits split often; 255 stands for Telegram's own.
    let limit = if limit_byte == 255 { MESSAGE_LIMIT } else { usize::from(limit_byte) + 1 };
    let whole = visible_text(&render_html(markdown));
    let parts = render_parts(markdown, limit);
    let mut kept = String::new();
    for part in &parts {
        assert_eq!(visible_text(&part.html), part.plain, "part's HTML and plain text differ");
        let len = visible_len(&part.plain);
        assert!(len <= limit || part.plain.chars().count() == 1, "part of {len} units over {limit}: {part:?}");
        assert!(!part.plain.trim().is_empty(), "empty part");
        kept.push_str(&part.plain);
    }
    assert_eq!(common::non_space(&kept), common::non_space(&whole), "splitting lost or added text");
});
