use proptest::prelude::*;

use super::*;

const ALLOWED_TAGS: [&str; 9] = ["b", "i", "u", "s", "code", "pre", "a", "blockquote", "tg-spoiler"];

/// Checks that `html` is what Telegram accepts: only allowed tags, balanced and properly nested,
/// and no bare `<`, `>` or `&` in the text. Returns the visible text.
fn checked_visible_text(html: &str) -> String {
    let mut open: Vec<String> = Vec::new();
    let mut visible = String::new();
    let mut rest = html;
    while let Some(ch) = rest.chars().next() {
        match ch {
            '<' => {
                let end = rest.find('>').unwrap_or_else(|| panic!("unclosed tag in {html:?}"));
                let inside = &rest[1..end];
                if let Some(name) = inside.strip_prefix('/') {
                    assert_eq!(open.pop().as_deref(), Some(name), "misnested </{name}> in {html:?}");
                } else {
                    let name = inside.split(' ').next().unwrap_or_default();
                    assert!(ALLOWED_TAGS.contains(&name), "tag <{name}> not allowed in {html:?}");
                    assert!(!inside.contains('<'), "`<` inside a tag in {html:?}");
                    open.push(name.to_owned());
                }
                rest = &rest[end + 1..];
            }
            '&' => {
                let (entity, text) = [("&amp;", '&'), ("&lt;", '<'), ("&gt;", '>'), ("&quot;", '"')]
                    .into_iter()
                    .find(|(entity, _)| rest.starts_with(entity))
                    .unwrap_or_else(|| panic!("bare & in {html:?}"));
                visible.push(text);
                rest = &rest[entity.len()..];
            }
            '>' => panic!("bare > in {html:?}"),
            _ => {
                visible.push(ch);
                rest = &rest[ch.len_utf8()..];
            }
        }
    }
    assert!(open.is_empty(), "unclosed tags {open:?} in {html:?}");
    visible
}

/// Checks every part: well-formed, `plain` is the visible text, within the limit, non-empty and
/// trimmed.
fn assert_parts_valid(parts: &[Part], limit: usize) {
    assert!(!parts.is_empty());
    for part in parts {
        assert_eq!(checked_visible_text(&part.html), part.plain);
        assert!(visible_len(&part.plain) <= limit, "part of {} units over {limit}", visible_len(&part.plain));
        assert!(!part.plain.trim().is_empty());
        assert_eq!(part.plain.trim_end(), part.plain);
        assert!(!part.plain.starts_with('\n'));
    }
}

#[test]
fn renders_each_markdown_construct() {
    let cases = [
        ("Just a plain sentence, nothing more.", "Just a plain sentence, nothing more."),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("**bold** *italic* ~~gone~~ `x < y`", "<b>bold</b> <i>italic</i> <s>gone</s> <code>x &lt; y</code>"),
        ("***both***", "<i><b>both</b></i>"),
        ("**bold *and italic* here**", "<b>bold <i>and italic</i> here</b>"),
        ("# Title\n\ntext", "<b>Title</b>\n\ntext"),
        (
            "[site](https://example.com/?a=1&b=\"2\")",
            "<a href=\"https://example.com/?a=1&amp;b=&quot;2&quot;\">site</a>",
        ),
        ("[mail](mailto:me@example.com)", "<a href=\"mailto:me@example.com\">mail</a>"),
        ("[click](javascript:alert(1))", "click"),
        ("[rel](/relative/path)", "rel"),
        ("<https://example.com>", "<a href=\"https://example.com\">https://example.com</a>"),
        ("![a cat](https://example.com/cat.png)", "<a href=\"https://example.com/cat.png\">a cat</a>"),
        ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ("hi <b onclick=\"x\">there</b>", "hi &lt;b onclick=&quot;x&quot;&gt;there&lt;/b&gt;"),
        ("<div>\nblock html\n</div>", "&lt;div&gt;\nblock html\n&lt;/div&gt;"),
        ("line one\nline two", "line one\nline two"),
        ("hard  \nbreak", "hard\nbreak"),
        ("first\n\n\n\nsecond", "first\n\nsecond"),
        ("- one\n- two", "• one\n• two"),
        ("3. three\n4. four", "3. three\n4. four"),
        ("- a\n  - b\n    - c\n- d", "• a\n  • b\n    • c\n• d"),
        ("1. a\n   - b\n2. c", "1. a\n  • b\n2. c"),
        ("- [ ] todo\n- [x] done", "☐ todo\n☑ done"),
        ("- first line\n  continued\n\n  second paragraph", "• first line\n  continued\n  second paragraph"),
        ("> - a\n> - b\n\nafter", "<blockquote>• a\n• b</blockquote>\n\nafter"),
        ("> outer\n>\n> > inner", "<blockquote>outer\n\ninner</blockquote>"),
        ("> quoted\n> text", "<blockquote>quoted\ntext</blockquote>"),
        ("> one\n>\n> two", "<blockquote>one\n\ntwo</blockquote>"),
        ("above\n\n---\n\nbelow", "above\n\n———\n\nbelow"),
        (
            "```rust\nif a < b && c {\n}\n```",
            "<pre><code class=\"language-rust\">if a &lt; b &amp;&amp; c {\n}</code></pre>",
        ),
        ("```\nplain code\n```", "<pre><code>plain code</code></pre>"),
        ("    indented code\n    more", "<pre><code>indented code\nmore</code></pre>"),
        (
            "| a | long header |\n|---|---|\n| wide cell | x |",
            "<pre>a         | long header\n----------+------------\nwide cell | x</pre>",
        ),
        ("text   \n\n", "text"),
        ("[![logo](https://e.com/l.png)](https://e.com)", "<a href=\"https://e.com\">logo</a>"),
        ("[](https://example.com)", "<a href=\"https://example.com\">https://example.com</a>"),
        ("[chat](tg://resolve?domain=x)", "<a href=\"tg://resolve?domain=x\">chat</a>"),
    ];
    for (markdown, expected) in cases {
        let html = render_html(markdown);
        assert_eq!(html, expected, "for {markdown:?}");
        checked_visible_text(&html);
    }
}

#[test]
fn render_parts_of_a_short_reply_is_one_part_with_its_plain_text() {
    let parts = render_parts("Hello **world** & <friends>", MESSAGE_LIMIT);
    assert_eq!(
        parts,
        vec![Part { html: "Hello <b>world</b> &amp; &lt;friends&gt;".into(), plain: "Hello world & <friends>".into() }]
    );
}

#[test]
fn empty_markdown_renders_to_nothing() {
    assert_eq!(render_html(""), "");
    assert!(render_parts("  \n\n ", MESSAGE_LIMIT).is_empty());
}

#[test]
fn long_reply_splits_between_paragraphs() {
    let paragraphs: Vec<String> =
        (0..60).map(|index| format!("Paragraph {index} {}", "words in a sentence ".repeat(9).trim_end())).collect();
    let markdown = paragraphs.join("\n\n");
    assert!(markdown.len() >= 10_000);
    let parts = render_parts(&markdown, MESSAGE_LIMIT);
    assert_parts_valid(&parts, MESSAGE_LIMIT);
    assert!(parts.len() >= 3);
    for part in &parts {
        assert!(part.plain.starts_with("Paragraph "), "split inside a paragraph: {:?}", &part.plain[..30]);
        assert!(part.plain.ends_with("sentence"));
    }
    let joined: Vec<String> = parts.iter().map(|part| part.plain.clone()).collect();
    assert_eq!(joined.join("\n\n"), markdown);
}

#[test]
fn long_code_block_reopens_its_tags_in_every_part() {
    let lines: Vec<String> = (0..200).map(|index| format!("let value_{index:03} = a < b && c; // ok")).collect();
    let code = lines.join("\n");
    assert!(code.len() >= 6000);
    let parts = render_parts(&format!("```rust\n{code}\n```"), MESSAGE_LIMIT);
    assert_parts_valid(&parts, MESSAGE_LIMIT);
    assert!(parts.len() >= 2);
    for part in &parts {
        assert!(part.html.starts_with("<pre><code class=\"language-rust\">"), "{}", &part.html[..40]);
        assert!(part.html.ends_with("</code></pre>"));
    }
    let code_lines: Vec<&str> =
        parts.iter().flat_map(|part| part.plain.lines()).filter(|line| line.starts_with("let")).collect();
    assert_eq!(code_lines, lines);
}

#[test]
fn text_before_a_block_too_long_for_one_part_goes_in_its_own_part() {
    let code = "let x = 1;\n".repeat(500);
    let parts = render_parts(&format!("Intro.\n\n```rust\n{code}```\n\nOutro."), MESSAGE_LIMIT);
    assert_parts_valid(&parts, MESSAGE_LIMIT);
    assert_eq!(parts[0].plain, "Intro.");
    assert!(parts[1].html.starts_with("<pre><code class=\"language-rust\">let x = 1;"));
    let last = parts.last().map(|part| part.html.as_str()).unwrap_or_default();
    assert!(last.ends_with("</code></pre>\n\nOutro."), "{last}");
}

#[test]
fn long_bold_quote_splits_on_words_and_keeps_its_formatting() {
    let markdown = format!("> **{}**", "bold quoted words ".repeat(400).trim_end());
    let parts = render_parts(&markdown, MESSAGE_LIMIT);
    assert_parts_valid(&parts, MESSAGE_LIMIT);
    assert_eq!(parts.len(), 2);
    for part in &parts {
        assert!(part.html.starts_with("<blockquote><b>") && part.html.ends_with("</b></blockquote>"));
    }
}

#[test]
fn a_single_long_word_splits_hard() {
    let word = "x".repeat(5000);
    let parts = render_parts(&word, MESSAGE_LIMIT);
    assert_parts_valid(&parts, MESSAGE_LIMIT);
    assert_eq!(parts.iter().map(|part| part.plain.len()).collect::<Vec<_>>(), vec![4096, 904]);
    assert_eq!(split_plain(&word, MESSAGE_LIMIT).concat(), word);
}

#[test]
fn hard_splits_never_cut_an_escape() {
    let text = "&".repeat(5000);
    let parts = render_parts(&text, MESSAGE_LIMIT);
    assert_parts_valid(&parts, MESSAGE_LIMIT);
    assert_eq!(parts[0].html, "&amp;".repeat(4096));
}

#[test]
fn emoji_count_as_two_units_and_are_never_cut() {
    let emoji = "😀".repeat(3000);
    assert_eq!(visible_len(&emoji), 6000);
    let parts = render_parts(&emoji, MESSAGE_LIMIT);
    assert_parts_valid(&parts, MESSAGE_LIMIT);
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].plain.chars().count(), 2048);
    assert_eq!(split_plain(&emoji, MESSAGE_LIMIT).len(), 2);
}

#[test]
fn cjk_counts_one_unit_per_char() {
    let text = "漢".repeat(5000);
    let parts = render_parts(&text, MESSAGE_LIMIT);
    assert_parts_valid(&parts, MESSAGE_LIMIT);
    assert_eq!(parts[0].plain.chars().count(), 4096);
}

#[test]
fn split_plain_prefers_paragraphs_then_lines_then_words() {
    assert_eq!(split_plain("aaaa\n\nbbbb", 8), vec!["aaaa", "bbbb"]);
    assert_eq!(split_plain("aaaa bb\ncc", 8), vec!["aaaa bb", "cc"]);
    assert_eq!(split_plain("aaa bbb ccc", 8), vec!["aaa bbb", "ccc"]);
    assert_eq!(split_plain("short", 8), vec!["short"]);
    assert_eq!(split_plain("\n\n  \n", 8), Vec::<String>::new());
}

#[test]
fn small_blocks_pack_together_until_the_limit() {
    let parts = render_parts("one\n\ntwo\n\nthree", 10);
    assert_parts_valid(&parts, 10);
    assert_eq!(parts.iter().map(|part| part.plain.as_str()).collect::<Vec<_>>(), vec!["one\n\ntwo", "three"]);
}

#[test]
fn a_long_list_splits_between_items() {
    let markdown: String = (0..300).map(|index| format!("- item number {index} with **bold** text\n")).collect();
    let parts = render_parts(&markdown, MESSAGE_LIMIT);
    assert_parts_valid(&parts, MESSAGE_LIMIT);
    assert!(parts.len() >= 2);
    assert!(parts.iter().all(|part| part.plain.starts_with("• item") && part.plain.ends_with("text")));
}

#[test]
fn tiny_limits_still_cover_the_text() {
    let parts = render_parts("😀 ab", 1);
    assert_eq!(parts.iter().map(|part| part.plain.as_str()).collect::<Vec<_>>(), vec!["😀", "a", "b"]);
}

/// Markdown-ish text built from pieces that exercise formatting, escapes and wide chars.
fn markdownish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("word ".to_owned()),
        Just("**bold words** ".to_owned()),
        Just("*it* ".to_owned()),
        Just("a < b & c ".to_owned()),
        Just("😀漢 ".to_owned()),
        Just("\n\n".to_owned()),
        Just("\n- item ".to_owned()),
        Just("\n> quote ".to_owned()),
        Just("\n```py\nx = 1 < 2\n```\n".to_owned()),
        Just("[l](https://e.com/?a&b) ".to_owned()),
        Just("`co<de` ".to_owned()),
        "[a-z]{1,30}",
    ];
    proptest::collection::vec(piece, 0..200).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_part_is_well_formed_and_within_the_limit(markdown in markdownish(), limit in 20usize..300) {
        let parts = render_parts(&markdown, limit);
        for part in &parts {
            prop_assert_eq!(checked_visible_text(&part.html), part.plain.clone());
            prop_assert!(visible_len(&part.plain) <= limit);
            prop_assert!(!part.plain.is_empty());
        }
        let whole = checked_visible_text(&render_html(&markdown));
        let words = |text: &str| text.split_whitespace().map(str::to_owned).collect::<Vec<_>>().concat();
        let parts_text: String = parts.iter().map(|part| part.plain.as_str()).collect();
        prop_assert_eq!(words(&parts_text), words(&whole));
    }

    #[test]
    fn split_plain_keeps_every_non_blank_char(text in "[a-z \n😀]{0,400}", limit in 1usize..50) {
        let parts = split_plain(&text, limit);
        for part in &parts {
            prop_assert!(visible_len(part) <= limit.max(2));
            prop_assert!(!part.trim().is_empty());
        }
        let strip = |text: &str| text.chars().filter(|ch| !ch.is_whitespace()).collect::<String>();
        prop_assert_eq!(strip(&parts.concat()), strip(&text));
    }
}
