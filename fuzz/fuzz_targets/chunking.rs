//! Message splitting: Markdown for Discord (`chunking::split_markdown`, a limit in characters)
//! and plain text for Telegram (`split_plain`, a limit in UTF-16 units). Every part within the
//! limit and not blank; nothing lost, in order (Discord may add the fences that close and
//! reopen a split code block, nothing else).

#![no_main]

#[path = "../common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use switchboard_channels::chunking::split_markdown;
use switchboard_channels::telegram::format::{split_plain, visible_len};

fuzz_target!(|data: &[u8]| {
    let Some((&limit_byte, text)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(text) else { return };
    let limit = usize::from(limit_byte) + 1;
    let input = common::non_space(text);

    let parts = split_markdown(text, limit);
    for part in &parts {
        let len = part.chars().count();
        assert!(len <= limit, "Discord part of {len} chars over {limit}: {part:?}");
        assert!(!part.trim().is_empty(), "blank Discord part");
    }
    let output = common::non_space(&parts.concat());
    assert!(common::is_subsequence(&input, &output), "Discord split lost text: {parts:?}");
    if !text.contains(['`', '~']) {
        assert_eq!(output, input, "Discord split added text to prose without code blocks: {parts:?}");
    }

    let parts = split_plain(text, limit);
    for part in &parts {
        let len = visible_len(part);
        assert!(len <= limit || part.chars().count() == 1, "Telegram part of {len} units over {limit}: {part:?}");
        assert!(!part.trim().is_empty(), "blank Telegram part");
    }
    assert_eq!(common::non_space(&parts.concat()), input, "Telegram split lost or added text: {parts:?}");
});
