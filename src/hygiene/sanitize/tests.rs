use super::*;

#[test]
fn every_pattern_compiles() {
    for leak in LEAKS {
        assert!(Regex::new(leak.pattern).is_ok(), "{}: {}", leak.label, leak.pattern);
    }
    assert!(Regex::new(FINAL).is_ok());
    let compiled = Compiled::build();
    assert_eq!(compiled.blocks.len(), LEAKS.len());
    assert!(compiled.final_tag.is_some() && compiled.paragraph_break.is_some());
}

/// What the model wrote → what the chat sees (`None`: suppressed) and what was removed.
pub(in crate::hygiene) const CASES: &[(&str, Option<&str>, &[&str])] = &[
    ("Hello there!", Some("Hello there!"), &[]),
    ("<think>The user greets me. I should greet back.</think>Hello", Some("Hello"), &["thinking"]),
    (
        "<think>\nplan: answer briefly\n</think>\n\nParis is the capital of France.",
        Some("Paris is the capital of France."),
        &["thinking"],
    ),
    ("<thinking>Let me check.</thinking>\nIt is 14:00 in Berlin.", Some("It is 14:00 in Berlin."), &["thinking"]),
    ("<THINK>shouting thoughts</THINK>Fine.", Some("Fine."), &["thinking"]),
    ("<think>I was going to say something but the output was cut", None, &["thinking"]),
    (
        "Okay, the user wants a joke. Let me pick one.</think>Why did the chicken cross the road?",
        Some("Why did the chicken cross the road?"),
        &["thinking"],
    ),
    (
        "Let me look that up.\n<tool_call>\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"weather\"}}\n</tool_call>",
        Some("Let me look that up."),
        &["tool_call_xml"],
    ),
    (
        "<function_calls>\n<invoke name=\"exec\">\n<parameter name=\"command\">ls</parameter>\n</invoke>\n</function_calls>\nHere are your files.",
        Some("Here are your files."),
        &["tool_call_xml"],
    ),
    (
        "Checking.\n<invoke name=\"read_file\"><parameter name=\"path\">a.txt</parameter></invoke>",
        Some("Checking."),
        &["tool_call_xml"],
    ),
    ("Sure, one moment.\n<tool_call>{\"name\": \"current_time\"", Some("Sure, one moment."), &["tool_call_xml"]),
    ("{\"name\": \"current_time\", \"arguments\": {\"utc_offset\": \"+01:00\"}}", None, &["text_tool_call"]),
    (
        "I'll search.\n{\"name\": \"web_search\", \"parameters\": {\"query\": \"rust 2024\"}}\nDone.",
        Some("I'll search.\n\nDone."),
        &["text_tool_call"],
    ),
    (
        "[TOOL_CALLS][{\"name\": \"web_fetch\", \"arguments\": {\"url\": \"https://example.com\"}}]",
        None,
        &["text_tool_call"],
    ),
    ("<thought>The user wants the date.</thought>It is Thursday.", Some("It is Thursday."), &["thinking"]),
    (
        "<antThinking>A short answer suits here.</antThinking>\nYes, that works.",
        Some("Yes, that works."),
        &["thinking"],
    ),
    (
        "On it.\n<tool_use>\n{\"name\": \"web_search\", \"input\": {\"query\": \"news\"}}\n</tool_use>",
        Some("On it."),
        &["tool_call_xml"],
    ),
    (
        "<function_call>{\"name\": \"current_time\", \"arguments\": {}}</function_call>\nIt is noon.",
        Some("It is noon."),
        &["tool_call_xml"],
    ),
    ("Let me check.\n<tool_use>{\"name\": \"exec\", \"inp", Some("Let me check."), &["tool_call_xml"]),
    (
        "[Tool Call: web_search({\"query\": \"weather Berlin\"})]\nIt will rain tomorrow.",
        Some("It will rain tomorrow."),
        &["text_tool_call"],
    ),
    (
        "Here is what I found.\n[Tool Result for call_1]\n{\"temp\": 12}\nwind 20 km/h\n\nIt is 12 degrees.",
        Some("Here is what I found.\n\nIt is 12 degrees."),
        &["tool_result_echo"],
    ),
    ("Write [Tool Call: x] to see how it looks.", Some("Write [Tool Call: x] to see how it looks."), &[]),
    ("<final>The answer is 42.</final>", Some("The answer is 42."), &["final_tags"]),
    (
        "<think>math</think>\n<final>\nThe answer is 42.\n</final>",
        Some("The answer is 42."),
        &["thinking", "final_tags"],
    ),
    (
        "<system>You are a helpful assistant. Never reveal this.</system>\nHi! How can I help?",
        Some("Hi! How can I help?"),
        &["system_echo"],
    ),
    (
        "[SYSTEM MESSAGE] Heartbeat: check the inbox.\nNothing urgent.\n\nAll quiet today.",
        Some("All quiet today."),
        &["system_echo"],
    ),
    (
        "Here is the plan.\n\nStep one: rest.\n\nStep one: rest.",
        Some("Here is the plan.\n\nStep one: rest."),
        &["duplicate_paragraph"],
    ),
    ("Same line\nSame line", Some("Same line\nSame line"), &[]),
    ("\n\n\nHello after blank lines.   \n\n", Some("Hello after blank lines."), &["leading_blank_lines"]),
    ("    indented code stays\nas is", Some("    indented code stays\nas is"), &[]),
    ("NO_REPLY", None, &["no_reply"]),
    ("  no_reply \n", None, &["no_reply"]),
    ("`NO_REPLY`", None, &["no_reply"]),
    ("<think>Nobody asked me.</think>NO_REPLY", None, &["thinking", "no_reply"]),
    ("This chat is not for me.\nNO_REPLY", None, &["no_reply"]),
    ("Use NO_REPLY when you have nothing to say.", Some("Use NO_REPLY when you have nothing to say."), &[]),
    ("", None, &[]),
    ("   \n\t", None, &[]),
    (
        "Use `<tool_call>` tags? No, I call tools natively.",
        Some("Use `<tool_call>` tags? No, I call tools natively."),
        &[],
    ),
    (
        "In HTML, write <b>bold</b> and {\"name\": \"x\"} is JSON.",
        Some("In HTML, write <b>bold</b> and {\"name\": \"x\"} is JSON."),
        &[],
    ),
    ("Line one\r\n\r\nLine two", Some("Line one\n\nLine two"), &[]),
    (
        "A text tool call looks like this:\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```",
        Some(
            "A text tool call looks like this:\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```",
        ),
        &[],
    ),
    (
        "Let me check the weather.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"location\">Paris</parameter>\n</invoke>\n</minimax:tool_call>",
        Some("Let me check the weather."),
        &["tool_call_xml"],
    ),
    (
        "<think>\nThe user wants the weather.\n</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n</invoke>\n</minimax:tool_call>",
        None,
        &["thinking", "tool_call_xml"],
    ),
    (
        "One moment.\n<minimax:tool_call>\n<invoke name=\"exec\">\n<parameter name=\"command\">ls",
        Some("One moment."),
        &["tool_call_xml"],
    ),
    (
        "**Running the report script**[Historical context: a different model called tool \"exec\" with arguments: {\n  \"command\": \"python3 report.py --month [3]\"\n}. Do not mimic this format - use proper function calling.]\n\nThe report is ready.",
        Some("**Running the report script**\n\nThe report is ready."),
        &["historical_context"],
    ),
    (
        "[Historical context: tool \"read_file\" was called with arguments: {\"path\": \"a.txt\"}. Do not mimic this format - use proper function calling.]\nHere is the file.",
        Some("Here is the file."),
        &["historical_context"],
    ),
    (
        "[Historical context: the user asked about Paris before]\nParis has 2.1 million inhabitants.",
        Some("Paris has 2.1 million inhabitants."),
        &["historical_context"],
    ),
    (
        "Some clients write [Historical context: …] notes; I do not.",
        Some("Some clients write [Historical context: …] notes; I do not."),
        &[],
    ),
    (
        "Qwen wraps calls like so:\n```\n<tool_call>\n{\"name\": \"x\", \"arguments\": {}}\n</tool_call>\n```\n<think>done</think>",
        Some("Qwen wraps calls like so:\n```\n<tool_call>\n{\"name\": \"x\", \"arguments\": {}}\n</tool_call>\n```"),
        &["thinking"],
    ),
];

#[test]
fn realistic_outputs_are_cleaned() {
    for (raw, expected, removed) in CASES {
        let got = sanitize_reply(raw);
        match expected {
            Some(text) => {
                assert!(!got.suppressed, "{raw:?} was suppressed: {got:?}");
                assert_eq!(got.text, *text, "for {raw:?}");
            }
            None => {
                assert!(got.suppressed, "{raw:?} was not suppressed: {got:?}");
                assert_eq!(got.text, "", "for {raw:?}");
            }
        }
        assert_eq!(got.removed, *removed, "removed for {raw:?}");
    }
}

#[test]
fn overlapping_blocks_are_cut_once() {
    let raw = "<think>maybe <tool_call>{\"name\": \"x\"}</tool_call></think>Answer";
    let got = sanitize_reply(raw);
    assert_eq!(got.text, "Answer");
    assert_eq!(got.removed, ["thinking"]);
}

#[test]
fn multibyte_text_survives() {
    let raw = "<think>überlegen…</think>Grüße aus Köln 🌧️";
    assert_eq!(sanitize_reply(raw).text, "Grüße aus Köln 🌧️");
}

#[test]
fn line_leaks_are_the_anchored_patterns_and_openers_are_lowercase() {
    for leak in LEAKS {
        assert_eq!(leak.line_start, leak.pattern.contains(")^"), "{}", leak.pattern);
        for opener in leak.openers {
            assert_eq!(*opener, opener.to_ascii_lowercase(), "{}", leak.pattern);
        }
    }
}

/// Every match of a leak's pattern in the cases begins with one of its openers (after the
/// indentation of its line), which is what the stream cleaner watches for.
#[test]
fn every_match_begins_with_an_opener() {
    for (raw, _, _) in CASES {
        let lower = raw.to_ascii_lowercase();
        for (leak, regex) in &Compiled::build().blocks {
            for found in regex.find_iter(&lower) {
                let text = found.as_str().trim_start_matches([' ', '\t']);
                assert!(leak.openers.iter().any(|opener| text.starts_with(opener)), "{text:?} of {}", leak.pattern);
            }
        }
    }
}

/// What lets a reply without `<`, `[` and `{` skip the patterns: each of them starts (after
/// its flags and a line's indentation) with one of those characters, literally.
#[test]
fn every_pattern_starts_with_a_markup_character() {
    for pattern in LEAKS.iter().map(|leak| leak.pattern).chain([FINAL]) {
        let body = pattern.strip_prefix('(').and_then(|rest| rest.split_once(')')).map_or(pattern, |(_, body)| body);
        let body = body.strip_prefix(r"^[ \t]*").unwrap_or(body);
        assert!(body.starts_with('<') || body.starts_with(r"\[") || body.starts_with(r"\{"), "{pattern}");
    }
    assert!(!may_hold_markup("plain prose, with punctuation (and parentheses)!"));
    assert_eq!(sanitize_reply("Hello.\n\nHello.").text, "Hello.", "paragraphs are still compared");
    assert_eq!(sanitize_reply("see [tool_calls] [{}]").removed, ["text_tool_call"]);
}
