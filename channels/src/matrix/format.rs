//! Replies as Matrix shows them: the model's Markdown as `formatted_body` HTML (the
//! `org.matrix.custom.html` format every client renders) beside the plain `body`, split so each
//! event stays well under the homeserver's 65,536-byte limit, encrypted (about a third larger
//! once base64-encoded) or not.

use pulldown_cmark::{Event, Options, Parser, html};

use crate::chunking::split_markdown;

/// Characters of Markdown per event at most: most answers fit in one.
pub(crate) const PART_CHARS: usize = 6000;
/// Bytes of `body` and `formatted_body` together per event at most: with the rest of the event
/// and encryption's base64, well under 65,536.
pub(crate) const PART_BYTES: usize = 40_000;

/// One message of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    /// The Markdown as written: what clients without HTML show, and what notifications quote.
    pub body: String,
    /// The rendered HTML, when the Markdown has any formatting.
    pub html: Option<String>,
}

/// `markdown` as the parts of a reply, in order (none for blank text).
pub(crate) fn parts(markdown: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    for chunk in split_markdown(markdown.trim(), PART_CHARS) {
        push_fitting(&chunk, PART_CHARS, &mut parts);
    }
    parts
}

/// Adds `chunk` as one part, or, when its HTML makes it too large (text that escapes badly,
/// such as a table of `&`s), as smaller ones.
fn push_fitting(chunk: &str, limit: usize, parts: &mut Vec<Part>) {
    if chunk.trim().is_empty() {
        return;
    }
    let part = render(chunk);
    let bytes = part.body.len() + part.html.as_ref().map_or(0, String::len);
    if bytes <= PART_BYTES || limit <= 64 {
        parts.push(part);
        return;
    }
    for smaller in split_markdown(chunk, limit / 2) {
        push_fitting(&smaller, limit / 2, parts);
    }
}

/// One chunk of Markdown with its HTML; no HTML when it renders as a plain paragraph.
pub(crate) fn render(markdown: &str) -> Part {
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
    let mut rendered = String::with_capacity(markdown.len() * 5 / 4);
    // HTML the model wrote is shown as the text it is, never rendered: an answer cannot hide
    // a link or an image behind markup.
    let events = Parser::new_ext(markdown, options).map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        event => event,
    });
    html::push_html(&mut rendered, events);
    let rendered = rendered.trim_end().to_owned();
    let plain = format!("<p>{}</p>", escape(markdown.trim()));
    let html = (rendered != plain).then_some(rendered);
    Part { body: markdown.trim().to_owned(), html }
}

/// The text with HTML's special characters escaped, as the renderer escapes body text.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_goes_without_html_and_markdown_with_it() {
        assert_eq!(
            parts("just \"words\", no marks"),
            vec![Part { body: "just \"words\", no marks".into(), html: None }]
        );
        let [part] = parts("**bold** and `code`\n\n- one\n- two").try_into().unwrap();
        assert_eq!(part.body, "**bold** and `code`\n\n- one\n- two");
        let html = part.html.unwrap();
        assert!(html.contains("<strong>bold</strong>") && html.contains("<code>code</code>"), "{html}");
        assert!(html.contains("<li>one</li>"), "{html}");
        assert!(parts("  \n ").is_empty());
    }

    #[test]
    fn html_in_the_answer_is_shown_as_text_not_rendered() {
        let part = render("a <b>tag</b> & more");
        assert_eq!(part.html, None, "escaped as a plain paragraph: {part:?}");
        let part = render("*x* <img src=\"mxc://evil/1\">\n\n<div>block</div>");
        let html = part.html.unwrap();
        assert!(html.contains("<em>x</em> &lt;img src=\"mxc://evil/1\"&gt;"), "{html}");
        assert!(html.contains("&lt;div&gt;block&lt;/div&gt;") && !html.contains("<div>"), "{html}");
    }

    #[test]
    fn a_long_answer_is_split_into_events_under_the_limit() {
        let paragraph = "A sentence of an answer that goes on for a while. ".repeat(40);
        let text = vec![paragraph.as_str(); 20].join("\n\n");
        let parts = parts(&text);
        assert!(parts.len() >= 7, "{} parts", parts.len());
        for part in &parts {
            assert!(part.body.chars().count() <= PART_CHARS);
        }
        let joined: String = parts.iter().map(|part| part.body.replace(['\n', ' '], "")).collect();
        assert_eq!(joined, text.replace(['\n', ' '], ""), "nothing lost or repeated");
    }

    #[test]
    fn text_whose_html_escapes_badly_is_split_smaller() {
        // A table of `<`: about 53 bytes of HTML for every 8 characters.
        let text = format!("|a|b|c|\n|-|-|-|\n{}", "|<|<|<|\n".repeat(PART_CHARS / 8));
        let parts = parts(&text);
        assert!(parts.len() > 1);
        for part in &parts {
            let bytes = part.body.len() + part.html.as_ref().map_or(0, String::len);
            assert!(bytes <= PART_BYTES, "{bytes}");
        }
    }
}
