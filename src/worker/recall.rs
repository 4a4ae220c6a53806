//! Recall (`[memory] recall`): before a person's turn, the new message is searched for in the
//! memory of the run's scope, and the best hits go with the message, after its context line,
//! for this turn only (the system prompt stays the same from turn to turn, and the transcript
//! keeps the message without them), so the model sees what it was told long ago without having
//! to ask (see docs/memory.md, "Recall").

use switchboard_channels::contract::{InboundKind, InboundMessage};

use super::TurnRunner;
use crate::agent::Agent;
use crate::config::MemoryConfig;
use crate::store::memory_index::{CONVERSATION_PREFIX, MemoryHit};
use crate::tools::memory::{place, terms};
use crate::tools::{ToolContext, untrusted};

/// Words that say nothing about what to recall; a message of only these recalls nothing.
const COMMON_WORDS: &[&str] = &[
    "the", "and", "for", "are", "but", "not", "you", "your", "all", "any", "can", "has", "have", "had", "was", "were",
    "what", "when", "where", "who", "why", "how", "this", "that", "these", "those", "with", "from", "about", "into",
    "our", "out", "they", "them", "then", "there", "their", "its", "his", "her", "she", "him", "did", "does", "doing",
    "just", "please", "thanks", "thank", "yes", "okay", "tell", "know", "let", "would", "could", "should", "will",
    "also", "some", "more", "very", "much", "one", "get", "got",
];

/// Recall as the worker applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecallSettings {
    /// Hits put into the prompt at most; 0 = no recall.
    pub results: usize,
    /// Characters of recalled text at most.
    pub max_chars: usize,
}

impl From<&MemoryConfig> for RecallSettings {
    fn from(config: &MemoryConfig) -> Self {
        Self { results: config.recall, max_chars: config.recall_max_chars }
    }
}

/// What the new message recalls, as the model reads it; `None` when recall is off, the run is
/// not a person's message, nothing matches, or the search fails (logged: a turn is not lost
/// for want of recall).
/// `text` is what the model reads of `msg`; `tool_context` makes the tools' view of the turn
/// (its scope), only when there is something to recall.
pub(super) async fn recall(
    turns: &TurnRunner,
    agent: &Agent,
    msg: &InboundMessage,
    text: &str,
    tool_context: impl FnOnce() -> ToolContext,
) -> Option<String> {
    let settings = turns.settings.recall;
    if settings.results == 0 || msg.kind != InboundKind::User {
        return None;
    }
    let searcher = agent.memory()?;
    let terms = telling_terms(text);
    if terms.is_empty() {
        return None;
    }
    let ctx = &tool_context();
    // Hits the history still shows are not recalled again: only rows older than its oldest.
    let visible_from = match turns.store.history_rows(&ctx.session_key, turns.settings.history_limit).await {
        Ok(rows) => rows.first().map_or(i64::MAX, |(id, _)| *id),
        Err(err) => {
            tracing::warn!(%err, "cannot read the history for recall; recalling nothing");
            return None;
        }
    };
    // More than asked for, as hits the history shows and the agent's own are dropped.
    let found = match searcher.find(ctx, text, &terms, settings.results * 3 + 5).await {
        Ok(found) => found,
        Err(err) => {
            tracing::warn!(%err, "memory search for recall failed; recalling nothing");
            return None;
        }
    };
    let current = format!("{CONVERSATION_PREFIX}{}", ctx.session_key);
    let shown =
        |hit: &MemoryHit| hit.path == current && i64::try_from(hit.start_line).unwrap_or(i64::MAX) >= visible_from;
    // What the agent said itself is left out: recalled, a wrong answer would be taken for a
    // fact and repeated (seen with a small local model); memory_search still finds it.
    let hits: Vec<&MemoryHit> =
        found.hits.iter().filter(|hit| !shown(hit) && !hit.by_agent).take(settings.results).collect();
    section(&hits, settings.max_chars)
}

/// The query words of `text` that can tell one memory from another: three letters or more,
/// not among [`COMMON_WORDS`].
fn telling_terms(text: &str) -> Vec<String> {
    terms(text).into_iter().filter(|term| term.chars().count() >= 3 && !COMMON_WORDS.contains(&term.as_str())).collect()
}

/// The recalled hits as a block of the message, marked as untrusted (a group's memory holds
/// what its members said), cut to `max_chars` of hit text.
fn section(hits: &[&MemoryHit], max_chars: usize) -> Option<String> {
    let mut lines = Vec::new();
    let mut used = 0;
    for hit in hits {
        let text = hit.snippet.replace("**", "");
        let text = text.lines().map(str::trim).collect::<Vec<_>>().join(" / ");
        let line = format!("- {}: {text}", place(hit));
        if used + line.chars().count() > max_chars {
            break;
        }
        used += line.chars().count();
        lines.push(line);
    }
    if lines.is_empty() {
        return None;
    }
    let body = untrusted::wrap("memory recalled for the new message", &lines.join("\n"));
    Some(format!(
        "Recalled from memory: parts of this chat's memory that match this message (they may be out of date; \
         memory_get reads more):\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(path: &str, line: u64, snippet: &str) -> MemoryHit {
        let (chunk_id, path, snippet) = (i64::try_from(line).unwrap(), path.into(), snippet.into());
        MemoryHit { chunk_id, path, start_line: line, end_line: line, snippet, score: 1.0, by_agent: false }
    }

    #[test]
    fn only_telling_words_are_looked_for() {
        assert_eq!(telling_terms("What is my passport number?"), ["passport", "number"]);
        assert!(telling_terms("Hi! How are you?").is_empty());
    }

    #[test]
    fn the_section_names_each_hit_and_stays_within_its_budget() {
        let file = hit("MEMORY.md", 3, "The locker code is **ZEBRA**-4711.");
        let talk = hit("conversation/telegram:42", 17, "[2026-11-20 14:03 UTC] Ann (id 7): my **passport** is X9");
        let section = section(&[&file, &talk], 2_000).unwrap();
        assert!(section.starts_with("Recalled from memory: "), "{section}");
        assert!(section.contains("- MEMORY.md line 3: The locker code is ZEBRA-4711."), "{section}");
        assert!(section.contains("- conversation telegram:42, message 17: [2026-11-20 14:03 UTC] Ann"), "{section}");
        assert!(section.contains("UNTRUSTED_CONTENT"), "{section}");
        let short = super::section(&[&file, &talk], 60).unwrap();
        assert!(short.contains("ZEBRA") && !short.contains("passport"), "{short}");
        assert_eq!(super::section(&[&talk], 10), None);
    }
}
