//! The HTML converter on small documents.

use super::*;

fn text(html: &str) -> String {
    to_text(html, None, false).text
}

#[test]
fn drops_head_scripts_styles_and_comments() {
    let html = r#"<!DOCTYPE html><html><head><title> The  Title </title><style>p { color: red }</style>
        <script>var x = "<p>not text</p>";</script></head>
        <body><!-- a comment <p>hidden</p> --><noscript>Enable JS</noscript><p>Visible</p>
        <SCRIPT type="text/javascript">alert(1)</SCRIPT><template><p>later</p></template></body></html>"#;
    let page = to_text(html, None, false);
    assert_eq!(page.title.as_deref(), Some("The Title"));
    assert_eq!(page.text, "Visible");
}

#[test]
fn blocks_become_lines_and_whitespace_collapses() {
    let html = "<h1>Head</h1><p>One\n   two\tthree</p><div>Four<br>Five</div><h3>Sub</h3>six <b>bold</b> seven";
    assert_eq!(text(html), "# Head\n\nOne two three\n\nFour\nFive\n\n### Sub\n\nsix bold seven");
}

#[test]
fn lists_and_tables() {
    let html = "<p>Items:</p><ul><li>one</li><li><p>two</p></li><li>three<ul><li>nested</li></ul></li></ul>\
                <table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>";
    assert_eq!(text(html), "Items:\n\n- one\n- two\n\n- three\n\n- nested\n\na | b\n1 | 2");
}

#[test]
fn entities_are_decoded() {
    let html = "<p>a &amp; b &lt;c&gt; &quot;d&quot; &#39;e&#39; f&nbsp;g &#233; &#xE9; &#X1F600; &mdash; &bogus; AT&T &#0;</p>";
    assert_eq!(text(html), "a & b <c> \"d\" 'e' f g é é 😀 — &bogus; AT&T \u{fffd}");
}

#[test]
fn links_are_kept_when_asked() {
    let base = Url::parse("https://example.com/dir/page").unwrap();
    let html = r##"<p>See <a href="/docs?a=1&amp;b=2">the docs</a>, <a href='other'>other</a>,
        <a href=#top>top</a> and <a href="javascript:alert(1)">this</a>.</p>"##;
    let page = to_text(html, Some(&base), true);
    assert_eq!(
        page.text,
        "See the docs (https://example.com/docs?a=1&b=2), other (https://example.com/dir/other), top and this."
    );
    assert_eq!(to_text(html, Some(&base), false).text, "See the docs, other, top and this.");
}

#[test]
fn pre_keeps_its_whitespace() {
    let html = "<p>code:</p><pre>fn main() {\n    println!(\"&lt;hi&gt;\");\n}</pre><p>after</p>";
    assert_eq!(text(html), "code:\n\nfn main() {\n    println!(\"<hi>\");\n}\n\nafter");
}

#[test]
fn malformed_markup_is_read_as_text() {
    assert_eq!(text("1 < 2 and 3 > 2 <p>ok"), "1 < 2 and 3 > 2\n\nok");
    assert_eq!(text("<p title=\"a > b\">quoted</p>"), "quoted");
    assert_eq!(text("unclosed <b"), "unclosed <b");
    assert_eq!(text("<script>never closed"), "");
    assert_eq!(text("<!-- never closed"), "");
    assert_eq!(text("<svg><title>icon</title><path d='M0'/></svg>Text"), "Text");
}

#[test]
fn strip_tags_flattens_a_snippet() {
    assert_eq!(strip_tags("The <strong>Rust</strong> book &amp; more<br>next"), "The Rust book & more next");
}
