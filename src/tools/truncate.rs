//! Cutting long text in the middle, keeping its head and tail, so the model sees how output
//! starts and how it ends (where errors usually are).

/// Returns `text` unchanged when it has at most `max_chars` characters; otherwise its head and
/// tail with a marker saying how much was left out.
pub fn truncate_middle(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_owned();
    }
    let omitted = total - max_chars;
    let head_chars = max_chars / 2;
    let tail_chars = max_chars - head_chars;
    let head_end = text.char_indices().nth(head_chars).map_or(text.len(), |(i, _)| i);
    let tail_start = text.char_indices().nth(total - tail_chars).map_or(text.len(), |(i, _)| i);
    format!("{}\n[… {omitted} characters cut …]\n{}", &text[..head_end], &text[tail_start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept() {
        assert_eq!(truncate_middle("hello", 5), "hello");
    }

    #[test]
    fn long_text_keeps_head_and_tail_and_says_what_was_cut() {
        let text: String = (0..100).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let cut = truncate_middle(&text, 10);
        assert!(cut.starts_with("abcde\n"), "{cut}");
        assert!(cut.ends_with("\nrstuv"), "{cut}");
        assert!(cut.contains("90 characters cut"), "{cut}");
    }

    #[test]
    fn multibyte_characters_are_not_split() {
        let cut = truncate_middle(&"é".repeat(50), 4);
        assert!(cut.starts_with("éé\n") && cut.ends_with("\néé"), "{cut}");
    }
}
