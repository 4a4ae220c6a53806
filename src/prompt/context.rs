//! The context line: what changes from one message to the next (the time, who wrote, where,
//! which model reads it), told to the model at the start of the message itself rather than in
//! the system prompt.
//!
//! Providers cache the longest prefix a request shares with earlier ones (Anthropic up to its
//! `cache_control` breakpoints, OpenAI and llama.cpp automatically). A system prompt that names
//! the minute or the speaker changes at its head whenever either does, and then nothing after
//! it, the whole conversation included, can be served from the cache. Each message keeps its
//! own line in the transcript, so later turns send it byte for byte as the first one did.

use chrono::{DateTime, Utc};

use super::Sender;
use crate::zone::Tz;

/// Opens every context line; the system prompt explains it (see `sections::user`).
pub const OPEN: &str = "[context:";

/// The facts of one message, as its context line tells them.
#[derive(Debug, Clone)]
pub struct TurnContext<'a> {
    pub now: DateTime<Utc>,
    pub timezone: Tz,
    pub sender: Sender<'a>,
    /// A turn merged from several people's messages, whose lines name their authors.
    pub several_people: bool,
    pub channel: &'a str,
    pub is_group: bool,
    /// In a group: whether the message addresses the agent (mention or reply).
    pub mentioned: bool,
    /// The model asked first (failover may answer with another).
    pub model: &'a str,
}

impl TurnContext<'_> {
    /// `[context: Saturday 5 December 2026, 17:41 (Europe/Berlin, UTC+01:00) | from Ann (id 42),
    /// level owner | direct chat on telegram | model gpt-4o-mini]`
    pub fn line(&self) -> String {
        let local = self.now.with_timezone(&self.timezone);
        let time =
            format!("{} ({}, UTC{})", local.format("%A %-d %B %Y, %H:%M"), self.timezone.name(), local.format("%:z"));
        let from = match &self.sender {
            _ if self.several_people => "from several people, each line named".to_owned(),
            Sender::Person { id, name, level } => match name.trim() {
                "" => format!("from id {id}, level {level}"),
                name => format!("from {name} (id {id}), level {level}"),
            },
            Sender::System => "from switchboard itself (a scheduled job, a heartbeat or a sub-agent's result), \
                               not from a person"
                .to_owned(),
        };
        let place = match (self.is_group, self.mentioned) {
            (false, _) => format!("direct chat on {}", self.channel),
            (true, true) => format!("group chat on {}, addressed to you", self.channel),
            (true, false) => format!("group chat on {}, not addressed to you", self.channel),
        };
        format!("{OPEN} {time} | {from} | {place} | model {}]", self.model)
    }
}

/// `answer` without the lines that copy a context line. Small models imitate the line they
/// see before every message and write made-up ones into their answers; those must not reach
/// the chat, nor the history where the model would read and copy them again.
pub fn without_copied_lines(answer: &str) -> std::borrow::Cow<'_, str> {
    let copied = |line: &str| {
        let line = line.trim();
        line.starts_with(OPEN) && line.ends_with(']')
    };
    if !answer.lines().any(copied) {
        return std::borrow::Cow::Borrowed(answer);
    }
    let kept: Vec<&str> = answer.lines().filter(|line| !copied(line)).collect();
    std::borrow::Cow::Owned(kept.join("\n").trim().to_owned())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::config::Level;

    fn context() -> TurnContext<'static> {
        TurnContext {
            now: Utc.with_ymd_and_hms(2026, 7, 1, 10, 30, 59).unwrap(),
            timezone: "Europe/Berlin".parse().unwrap(),
            sender: Sender::Person { id: "42", name: "Ada", level: Level::User },
            several_people: false,
            channel: "telegram",
            is_group: false,
            mentioned: false,
            model: "gpt-test",
        }
    }

    #[test]
    fn the_line_tells_time_in_the_zone_speaker_level_place_and_model() {
        assert_eq!(
            context().line(),
            "[context: Wednesday 1 July 2026, 12:30 (Europe/Berlin, UTC+02:00) | from Ada (id 42), level user | \
             direct chat on telegram | model gpt-test]"
        );
        let group = TurnContext { is_group: true, mentioned: true, ..context() };
        assert!(group.line().contains("| group chat on telegram, addressed to you |"), "{}", group.line());
        let unaddressed = TurnContext { is_group: true, ..context() };
        assert!(unaddressed.line().contains("not addressed to you"), "{}", unaddressed.line());
        let cron = TurnContext { sender: Sender::System, ..context() };
        assert!(cron.line().contains("not from a person"), "{}", cron.line());
        let merged = TurnContext { several_people: true, ..context() };
        assert!(merged.line().contains("from several people"), "{}", merged.line());
    }

    #[test]
    fn daylight_saving_time_moves_the_offset() {
        let winter = TurnContext { now: Utc.with_ymd_and_hms(2026, 12, 5, 16, 41, 0).unwrap(), ..context() };
        assert!(
            winter.line().contains("Saturday 5 December 2026, 17:41 (Europe/Berlin, UTC+01:00)"),
            "{}",
            winter.line()
        );
    }

    #[test]
    fn copied_context_lines_are_taken_out_of_an_answer() {
        let answer =
            "Paris.\n[context: Tuesday 3 July 2020, 5:14 (UTC, UTC+01:00) | from API, level guest]\nIt is in France.";
        assert_eq!(without_copied_lines(answer), "Paris.\nIt is in France.");
        let plain = "Brackets [context: like this] inside a sentence stay.";
        assert!(matches!(without_copied_lines(plain), std::borrow::Cow::Borrowed(_)));
        assert_eq!(without_copied_lines("[context: x]"), "");
    }
}
