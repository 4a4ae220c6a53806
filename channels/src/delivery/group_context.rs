//! Recent unaddressed group messages, kept so that the next message that addresses the bot
//! can carry them as context ("what do you think of Bob's idea?"). Bounded per chat and in
//! the number of chats; kept in memory only, since it is context, not work to be done.
//!
//! Both chat adapters keep it the same way: a place is the session key of the conversation
//! (`telegram:-100123:topic:7`, `discord:55:thread:9`), which each adapter forms with
//! [`crate::contract::session_key`].

use std::collections::{HashMap, VecDeque};

use chrono::{DateTime, Duration, Utc};

/// Lines older than this are not worth showing.
const MAX_AGE: Duration = Duration::hours(6);
/// Chats remembered at most; the least recently active is forgotten first.
const MAX_CHATS: usize = 1000;
/// One line's text is cut to this many characters.
const MAX_LINE_CHARS: usize = 500;

/// The conversation lines are kept for: a chat and its topic or thread, as a session key.
pub(crate) type Place = String;

#[derive(Debug, Clone)]
struct Line {
    author: String,
    text: String,
    at: DateTime<Utc>,
}

/// Per-chat buffers of recent unaddressed messages.
#[derive(Debug, Default)]
pub(crate) struct GroupContext {
    per_chat: HashMap<Place, (DateTime<Utc>, VecDeque<Line>)>,
    per_chat_limit: usize,
}

impl GroupContext {
    /// Keeps at most `per_chat_limit` lines per chat; 0 keeps nothing.
    pub fn new(per_chat_limit: usize) -> Self {
        Self { per_chat: HashMap::new(), per_chat_limit }
    }

    /// Remembers an unaddressed message.
    pub fn remember(&mut self, place: Place, author: &str, text: &str, at: DateTime<Utc>) {
        if self.per_chat_limit == 0 || text.trim().is_empty() {
            return;
        }
        if !self.per_chat.contains_key(&place) && self.per_chat.len() >= MAX_CHATS {
            self.forget_least_recent();
        }
        let (touched, lines) = self.per_chat.entry(place).or_default();
        *touched = at;
        if lines.len() == self.per_chat_limit {
            lines.pop_front();
        }
        let text: String = text.chars().take(MAX_LINE_CHARS).collect();
        lines.push_back(Line { author: author.to_owned(), text, at });
    }

    /// The lines kept for `place`, formatted as a block to put before the addressed message;
    /// `None` when there is nothing recent.
    pub fn peek(&self, place: &str, now: DateTime<Utc>) -> Option<String> {
        let (_, lines) = self.per_chat.get(place)?;
        let recent: Vec<String> = lines
            .iter()
            .filter(|line| now - line.at <= MAX_AGE)
            .map(|line| format!("{}: {}", line.author, line.text))
            .collect();
        if recent.is_empty() {
            return None;
        }
        Some(format!(
            "[Recent messages in this chat, not addressed to you, for context]\n{}\n[End of recent messages]",
            recent.join("\n")
        ))
    }

    /// `content` with the lines kept for `place` before it, if there are any recent ones.
    pub fn before(&self, place: &str, content: String, now: DateTime<Utc>) -> String {
        match self.peek(place, now) {
            Some(block) => format!("{block}\n\n{content}"),
            None => content,
        }
    }

    /// Forgets the lines of `place` once they were shown to the agent.
    pub fn clear(&mut self, place: &str) {
        self.per_chat.remove(place);
    }

    fn forget_least_recent(&mut self) {
        let oldest = self.per_chat.iter().min_by_key(|(_, (touched, _))| *touched).map(|(place, _)| place.clone());
        if let Some(place) = oldest {
            self.per_chat.remove(&place);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl GroupContext {
        fn take(&mut self, place: &str, now: DateTime<Utc>) -> Option<String> {
            let block = self.peek(place, now);
            self.clear(place);
            block
        }
    }

    const CHAT: &str = "telegram:-1";

    #[test]
    fn keeps_the_last_lines_of_a_chat_and_shows_them_once() {
        let mut context = GroupContext::new(2);
        let now = Utc::now();
        for (i, text) in ["one", "two", "three"].iter().enumerate() {
            context.remember(CHAT.into(), &format!("user{i}"), text, now);
        }
        context.remember("telegram:-2".into(), "other", "elsewhere", now);
        let block = context.take(CHAT, now).unwrap();
        assert!(!block.contains("one"), "{block}");
        assert!(block.contains("user1: two\nuser2: three"), "{block}");
        assert_eq!(context.take(CHAT, now), None);
        assert!(context.take("telegram:-2", now).unwrap().contains("other: elsewhere"));
    }

    #[test]
    fn topics_are_separate_and_old_lines_are_dropped() {
        let mut context = GroupContext::new(10);
        let now = Utc::now();
        context.remember("telegram:-1:topic:5".into(), "a", "in topic five", now);
        context.remember("telegram:-1:topic:6".into(), "b", "stale", now - Duration::hours(7));
        assert_eq!(context.take(CHAT, now), None);
        assert!(context.take("telegram:-1:topic:5", now).unwrap().contains("in topic five"));
        assert_eq!(context.take("telegram:-1:topic:6", now), None);
    }

    #[test]
    fn the_block_goes_before_the_addressed_message() {
        let mut context = GroupContext::new(10);
        let now = Utc::now();
        assert_eq!(context.before(CHAT, "hi".into(), now), "hi");
        context.remember(CHAT.into(), "Bob", "six?", now);
        let expected = "[Recent messages in this chat, not addressed to you, for context]\nBob: six?\n\
                        [End of recent messages]\n\nhi";
        assert_eq!(context.before(CHAT, "hi".into(), now), expected);
    }

    #[test]
    fn zero_limit_keeps_nothing_and_chats_are_bounded() {
        let mut off = GroupContext::new(0);
        off.remember(CHAT.into(), "a", "x", Utc::now());
        assert_eq!(off.take(CHAT, Utc::now()), None);
        let mut context = GroupContext::new(1);
        let start = Utc::now();
        for chat in 0..(MAX_CHATS as i64 + 10) {
            context.remember(format!("telegram:{}", -chat), "a", "x", start + Duration::seconds(chat));
        }
        assert_eq!(context.per_chat.len(), MAX_CHATS);
        assert_eq!(context.take("telegram:0", start + Duration::hours(1)), None, "the oldest chat was forgotten");
    }
}
