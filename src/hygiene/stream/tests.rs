use super::*;
use crate::hygiene::sanitize::sanitize_reply;
use crate::hygiene::sanitize::tests::CASES;

/// What a chat is shown of `pieces`, streamed in order.
fn streamed<'a>(pieces: impl IntoIterator<Item = &'a str>) -> String {
    let mut cleaner = StreamCleaner::new();
    pieces.into_iter().map(|piece| cleaner.push(piece)).collect()
}

/// `text` cut at every character boundary into two pieces, and into single characters.
fn splits(text: &str) -> Vec<Vec<&str>> {
    let mut all: Vec<Vec<&str>> = text.char_indices().map(|(at, _)| vec![&text[..at], &text[at..]]).collect();
    all.push(text.char_indices().map(|(at, c)| &text[at..at + c.len_utf8()]).collect());
    all
}

/// However `raw` is cut into pieces, what streams is the cleaned reply.
fn streams_as_cleaned(raw: &str) {
    let clean = sanitize_reply(raw).text;
    for pieces in splits(raw) {
        assert_eq!(streamed(pieces.iter().copied()), clean, "{raw:?} as {pieces:?}");
    }
}

/// Replies with leaked blocks the stream must never show, as models write them.
const LEAKED: &[&str] = &[
    "<think>\nThe user wants the weather. I should call the tool.\n</think>\n\nIt is sunny in Paris.",
    "Let me check.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n</invoke>\n</minimax:tool_call>\nIt is sunny.",
    "**Running the script**[Historical context: a different model called tool \"exec\" with arguments: {\n  \"command\": \"ls [a-z]*\"\n}. Do not mimic this format - use proper function calling.]\n\nDone: 3 files.",
    "[Historical context: the user asked about Paris]\nParis has 2.1 million inhabitants.",
    "Sure.\n  [Tool Call: web_search({\"query\": \"rust\"})]\nRust 1.95 is out.",
    "Found it.\n[Tool Result for call_1]\n{\"temp\": 12}\n\nIt is 12 degrees.",
    "I'll search.\n{\"name\": \"web_search\", \"arguments\": {\"query\": \"news\"}}\nNothing new today.",
    "<thought>plan</thought>A <b>bold</b> claim: x < y and [a](b) {ok}.",
    "Code:\n```\n<tool_call>{\"name\": \"x\"}</tool_call>\n```\n<think>done</think>\n\nThat is how it looks.",
    "Grüße <think>überlegen…</think>aus Köln 🌧️",
];

#[test]
fn a_leaked_block_split_anywhere_never_shows_and_the_rest_is_the_cleaned_reply() {
    for raw in LEAKED {
        streams_as_cleaned(raw);
    }
}

/// Rules that need the whole reply are the final reply's (see the module docs).
const WHOLE_REPLY_ONLY: &[&str] = &[
    // A closer without an opener: what came before was reasoning.
    "Okay, the user wants a joke. Let me pick one.</think>Why did the chicken cross the road?",
    "<final>The answer is 42.</final>",
    "<think>math</think>\n<final>\nThe answer is 42.\n</final>",
    "Here is the plan.\n\nStep one: rest.\n\nStep one: rest.",
    "NO_REPLY",
    "  no_reply \n",
    "`NO_REPLY`",
    "<think>Nobody asked me.</think>NO_REPLY",
    "This chat is not for me.\nNO_REPLY",
];

/// An opener inside a sentence that never closes: what follows it is held, in case it is a
/// leak, to the end of the reply (or of the paragraph).
const HELD: &[&str] = &[
    "Use `<tool_call>` tags? No, I call tools natively.",
    "Some clients write [Historical context: …] notes; I do not.",
];

#[test]
fn every_sanitizer_case_streams_as_its_cleaned_reply() {
    let streamable = |raw: &&str| !WHOLE_REPLY_ONLY.contains(raw) && !HELD.contains(raw);
    for (raw, _, _) in CASES.iter().filter(|(raw, _, _)| streamable(raw)) {
        streams_as_cleaned(raw);
    }
}

#[test]
fn text_held_in_case_it_is_a_leak_is_where_the_final_reply_goes_on() {
    for raw in HELD {
        let clean = sanitize_reply(raw).text;
        for pieces in splits(raw) {
            let shown = streamed(pieces.iter().copied());
            assert!(clean.starts_with(&shown) && shown.len() < clean.len(), "{shown:?} for {raw:?} as {pieces:?}");
        }
    }
}

#[test]
fn plain_text_shows_as_it_comes_but_for_trailing_whitespace() {
    let mut cleaner = StreamCleaner::new();
    assert_eq!(cleaner.push("Hello "), "Hello");
    assert_eq!(cleaner.push("world, "), " world,");
    assert_eq!(cleaner.push("x <"), " x");
    // `<` then a space opens nothing: shown with what follows.
    assert_eq!(cleaner.push(" y"), " < y");
    assert_eq!(cleaner.push("\n\nNext"), "\n\nNext");
}

#[test]
fn the_answer_after_a_long_thought_shows_with_the_piece_that_closes_it() {
    let mut cleaner = StreamCleaner::new();
    assert_eq!(cleaner.push("<think>"), "");
    for _ in 0..500 {
        assert_eq!(cleaner.push("still thinking about it "), "");
    }
    assert_eq!(cleaner.push("</think>\n\nThe answer"), "The answer");
    assert_eq!(cleaner.push(" is 42."), " is 42.");
}

#[test]
fn a_fenced_block_shows_its_tags_at_once() {
    let mut cleaner = StreamCleaner::new();
    assert_eq!(cleaner.push("```xml\n<tool_call>"), "```xml\n<tool_call>");
}

#[test]
fn the_cleaning_wrapper_emits_only_what_there_is_to_show() {
    let emitted = Mutex::new(Vec::new());
    let chunk = cleaning(|text: &str| emitted.lock().unwrap().push(text.to_owned()));
    for piece in ["<minimax:tool_call>\n<invoke name=\"x\">", "</invoke>\n</minimax:tool_call>", "Hi"] {
        chunk(piece);
    }
    assert_eq!(*emitted.lock().unwrap(), ["Hi"]);
}
