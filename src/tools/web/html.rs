//! A small HTML-to-text converter for `web_fetch`: good enough to read an article, not a
//! browser. It drops what is not content (`script`, `style`, `noscript`, `head`, `template`,
//! `svg`), turns block elements into line breaks and list items into "- " lines, optionally
//! keeps link targets as `text (url)`, decodes the common entities and collapses whitespace.
//! Malformed markup never fails: what cannot be read as a tag is text.

use reqwest::Url;

/// The readable content of a page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    pub title: Option<String>,
    pub text: String,
}

/// Elements whose content is raw text up to their end tag (never markup).
const RAW_TEXT: &[&str] = &["script", "style", "textarea", "xmp"];
/// Elements whose content is not shown.
const HIDDEN: &[&str] = &["head", "noscript", "template", "svg", "iframe", "object"];
/// Elements that start and end a line.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "header",
    "footer",
    "nav",
    "main",
    "aside",
    "blockquote",
    "pre",
    "ul",
    "ol",
    "dl",
    "table",
    "form",
    "fieldset",
    "figure",
    "figcaption",
    "address",
    "details",
    "summary",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "body",
    "html",
    "caption",
];
/// Elements that start and end a line but, unlike blocks, leave no blank line between them.
const LINES: &[&str] = &["li", "tr", "dt", "dd"];

/// Converts an HTML document. `base` resolves relative links; `links` keeps their targets.
pub fn to_text(html: &str, base: Option<&Url>, links: bool) -> Page {
    let mut conv = Converter { base, links, ..Converter::default() };
    conv.run(html);
    Page { title: conv.title, text: conv.out.finish() }
}

/// Plain text of an HTML fragment (search result snippets with `<strong>` and entities).
pub fn strip_tags(fragment: &str) -> String {
    to_text(fragment, None, false).text.replace('\n', " ")
}

#[derive(Default)]
struct Converter<'a> {
    base: Option<&'a Url>,
    links: bool,
    out: Output,
    title: Option<String>,
    /// Depth inside hidden elements; text is dropped while above zero.
    hidden: usize,
    /// Depth inside `svg`.
    svg: usize,
    /// Depth inside `pre`, where whitespace is kept.
    pre: usize,
    /// The target of the link being read, when links are kept.
    href: Option<String>,
}

/// One tag as read from the source.
struct Tag<'s> {
    name: String,
    closing: bool,
    attrs: &'s str,
}

impl<'a> Converter<'a> {
    fn run(&mut self, html: &str) {
        let mut rest = html;
        while let Some(lt) = rest.find('<') {
            self.text(&rest[..lt]);
            rest = &rest[lt..];
            rest = self.markup(rest);
        }
        self.text(rest);
    }

    /// Reads the markup at the start of `src` (which starts with `<`) and returns what follows.
    fn markup<'s>(&mut self, src: &'s str) -> &'s str {
        if let Some(after) = src.strip_prefix("<!--") {
            return after.find("-->").map_or("", |end| &after[end + 3..]);
        }
        if src.starts_with("<!") || src.starts_with("<?") {
            return src.find('>').map_or("", |end| &src[end + 1..]);
        }
        let Some((tag, after)) = read_tag(src) else {
            // A `<` that starts no tag ("a < b") is text.
            self.text("<");
            return &src[1..];
        };
        if tag.closing {
            self.end_tag(&tag.name);
            return after;
        }
        if tag.name == "title" || RAW_TEXT.contains(&tag.name.as_str()) {
            let (content, after) = raw_text(after, &tag.name);
            // An `<svg>` has titles of its own (icon names), not the page's.
            if tag.name == "title" && self.title.is_none() && self.svg == 0 {
                self.title = Some(collapse(&decode_entities(content))).filter(|t| !t.is_empty());
            } else if tag.name == "textarea" && self.hidden == 0 {
                self.text(content);
            }
            return after;
        }
        self.start_tag(&tag);
        after
    }

    fn start_tag(&mut self, tag: &Tag<'_>) {
        let name = tag.name.as_str();
        let void = matches!(name, "br" | "hr" | "img" | "meta" | "link" | "input" | "wbr") || tag.attrs.ends_with('/');
        if HIDDEN.contains(&name) && !void {
            self.hidden += 1;
            self.svg += usize::from(name == "svg");
        }
        if self.hidden > 0 {
            return;
        }
        match name {
            "br" => self.out.line_break(),
            "li" => {
                self.out.new_line();
                self.out.raw("- ");
            }
            "td" | "th" => self.out.cell(),
            "pre" => {
                self.out.block();
                self.pre += 1;
            }
            "a" if self.links => self.href = attribute(tag.attrs, "href").and_then(|h| self.link_target(&h)),
            _ if LINES.contains(&name) => self.out.new_line(),
            _ if BLOCKS.contains(&name) => {
                self.out.block();
                if let Some(level) = heading_level(name) {
                    self.out.raw(&"#".repeat(level));
                    self.out.raw(" ");
                }
            }
            _ => {}
        }
    }

    fn end_tag(&mut self, name: &str) {
        if HIDDEN.contains(&name) {
            self.hidden = self.hidden.saturating_sub(1);
            if name == "svg" {
                self.svg = self.svg.saturating_sub(1);
            }
            return;
        }
        if self.hidden > 0 {
            return;
        }
        match name {
            "pre" => {
                self.pre = self.pre.saturating_sub(1);
                self.out.block();
            }
            _ if LINES.contains(&name) => self.out.new_line(),
            "a" => {
                if let Some(href) = self.href.take() {
                    self.out.text(&format!(" ({href})"), false);
                }
            }
            _ if BLOCKS.contains(&name) => self.out.block(),
            _ => {}
        }
    }

    fn text(&mut self, text: &str) {
        if self.hidden == 0 && !text.is_empty() {
            self.out.text(&decode_entities(text), self.pre > 0);
        }
    }

    /// An absolute http(s) URL for a link, or `None` for anchors, `javascript:` and the like.
    fn link_target(&self, href: &str) -> Option<String> {
        let href = decode_entities(href.trim());
        if href.is_empty() || href.starts_with('#') {
            return None;
        }
        let url = match self.base {
            Some(base) => base.join(&href).ok()?,
            None => Url::parse(&href).ok()?,
        };
        matches!(url.scheme(), "http" | "https").then(|| url.to_string())
    }
}

/// Reads `<name attrs>` or `</name>` at the start of `src`, honouring quotes in attributes.
fn read_tag(src: &str) -> Option<(Tag<'_>, &str)> {
    let body = &src[1..];
    let (closing, body) = match body.strip_prefix('/') {
        Some(rest) => (true, rest),
        None => (false, body),
    };
    let name_len = body.find(|c: char| !c.is_ascii_alphanumeric() && c != '-').unwrap_or(body.len());
    if name_len == 0 || !body.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let end = tag_end(body)?;
    let tag = Tag { name: body[..name_len].to_ascii_lowercase(), closing, attrs: body[name_len..end].trim() };
    Some((tag, &body[end + 1..]))
}

/// The index of the `>` that ends the tag starting `body`, skipping quoted values.
fn tag_end(body: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in body.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

/// The content of a raw-text element up to its end tag, and what follows the end tag.
fn raw_text<'s>(src: &'s str, name: &str) -> (&'s str, &'s str) {
    // Compared in place rather than on a lowercased copy: a page may hold many scripts.
    let closes_here = |i: &usize| {
        src.as_bytes()
            .get(i + 2..i + 2 + name.len())
            .is_some_and(|candidate| candidate.eq_ignore_ascii_case(name.as_bytes()))
    };
    match src.match_indices("</").map(|(i, _)| i).find(closes_here) {
        Some(start) => {
            let after = &src[start..];
            (&src[..start], after.find('>').map_or("", |end| &after[end + 1..]))
        }
        None => (src, ""),
    }
}

/// The value of attribute `name` in `attrs` (`href="x"`, `href='x'` or `href=x`).
fn attribute(attrs: &str, name: &str) -> Option<String> {
    let mut rest = attrs;
    while !rest.is_empty() {
        rest = rest.trim_start();
        let key_len = rest.find(|c: char| c == '=' || c.is_whitespace()).unwrap_or(rest.len());
        let key = &rest[..key_len];
        rest = rest[key_len..].trim_start();
        let Some(value_src) = rest.strip_prefix('=') else {
            if key_len == 0 {
                rest = rest.get(1..).unwrap_or("");
            }
            continue;
        };
        let value_src = value_src.trim_start();
        let (value, after) = match value_src.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let inner = &value_src[1..];
                let end = inner.find(q).unwrap_or(inner.len());
                (&inner[..end], inner.get(end + 1..).unwrap_or(""))
            }
            _ => {
                let end = value_src.find(char::is_whitespace).unwrap_or(value_src.len());
                (&value_src[..end], &value_src[end..])
            }
        };
        if key.eq_ignore_ascii_case(name) {
            return Some(value.to_owned());
        }
        rest = after;
    }
    None
}

fn heading_level(name: &str) -> Option<usize> {
    match name.as_bytes() {
        [b'h', digit @ b'1'..=b'6'] => Some(usize::from(digit - b'0')),
        _ => None,
    }
}

/// Collapses runs of whitespace into one space and trims the ends.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Decodes the common named entities and numeric references; anything else is kept as written.
pub fn decode_entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        // Entity names are short; a `;` further away means this `&` is just an ampersand.
        let decoded =
            rest.bytes().take(12).position(|b| b == b';').and_then(|semi| Some((entity(&rest[1..semi])?, semi + 1)));
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn entity(name: &str) -> Option<char> {
    if let Some(number) = name.strip_prefix('#') {
        let code = match number.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => number.parse().ok()?,
        };
        // NUL and invalid code points become the replacement character, as browsers do.
        return Some(char::from_u32(code).filter(|&c| c != '\0').unwrap_or('\u{fffd}'));
    }
    let c = match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        // A plain space, so it collapses with its neighbours like any other.
        "nbsp" => ' ',
        "mdash" => '—',
        "ndash" => '–',
        "hellip" => '…',
        "lsquo" => '‘',
        "rsquo" => '’',
        "ldquo" => '“',
        "rdquo" => '”',
        "copy" => '©',
        "reg" => '®',
        "middot" => '·',
        "bull" => '•',
        _ => return None,
    };
    Some(c)
}

/// The text being written: collapses whitespace, and keeps at most one blank line between
/// blocks.
#[derive(Default)]
struct Output {
    text: String,
    /// A space is owed before the next word (collapsed whitespace).
    space: bool,
}

impl Output {
    fn text(&mut self, text: &str, keep_whitespace: bool) {
        if keep_whitespace {
            self.text.push_str(text);
            self.space = false;
            return;
        }
        for (i, word) in text.split(char::is_whitespace).enumerate() {
            if i > 0 {
                self.space = true;
            }
            if word.is_empty() {
                continue;
            }
            if self.space && !self.at_line_start() {
                self.text.push(' ');
            }
            self.space = false;
            self.text.push_str(word);
        }
    }

    /// Text written as is (list markers, heading marks).
    fn raw(&mut self, text: &str) {
        self.text.push_str(text);
        self.space = false;
    }

    fn at_line_start(&self) -> bool {
        self.text.is_empty() || self.text.ends_with('\n') || self.text.ends_with("- ") || self.text.ends_with("# ")
    }

    fn line_break(&mut self) {
        self.trim_line_end();
        self.text.push('\n');
        self.space = false;
    }

    /// Ends the current line, unless it is empty.
    fn new_line(&mut self) {
        self.trim_line_end();
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.text.push('\n');
        }
        self.space = false;
    }

    /// Ends the current block with a blank line, unless one is there already or the line holds
    /// only a list marker (`<li><p>…`).
    fn block(&mut self) {
        if self.text.rsplit('\n').next() == Some("- ") {
            return;
        }
        self.trim_line_end();
        if !self.text.is_empty() && !self.text.ends_with("\n\n") {
            let missing = if self.text.ends_with('\n') { 1 } else { 2 };
            self.text.push_str(&"\n".repeat(missing));
        }
        self.space = false;
    }

    /// Separates table cells on one line.
    fn cell(&mut self) {
        if !self.at_line_start() {
            self.trim_line_end();
            self.text.push_str(" | ");
        }
        self.space = false;
    }

    fn trim_line_end(&mut self) {
        let kept = self.text.trim_end_matches([' ', '\t']).len();
        self.text.truncate(kept);
    }

    fn finish(mut self) -> String {
        self.trim_line_end();
        self.text.trim().to_owned()
    }
}

#[cfg(test)]
mod tests;
