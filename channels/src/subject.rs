//! NATS subject names and the encoding that makes any chat id a single subject token.
//!
//! A token keeps ASCII letters, digits, `-` and `_` as they are; every other byte of the
//! UTF-8 text is written `~HH` (upper-case hex). The empty string is written `~~`, which no
//! other input produces. So every string maps to exactly one non-empty token without `.`,
//! `*`, `>`, whitespace or `$`, and decodes back to itself.

//!
//! Subjects are bounded. nats-server closes the connection of a client that sends a control
//! line (`HPUB <subject> <reply> <sizes>`) longer than 4,096 bytes (its `max_control_line`
//! default), so every subject switchboard derives from an id must fit in one with room for the
//! reply inbox and the sizes. The contract bounds the ids ([`MAX_CHANNEL_BYTES`],
//! [`MAX_CHAT_ID_BYTES`]); an id is encoded to at most three bytes per byte; the prefix is
//! bounded here. [`LONGEST_SUBJECT_BYTES`] is the result, checked against the line at compile time.

use thiserror::Error;

use crate::contract::{MAX_CHANNEL_BYTES, MAX_CHAT_ID_BYTES};

/// The default subject prefix.
pub const DEFAULT_PREFIX: &str = "switchboard";

/// Longest subject prefix, in bytes. Stream names are made from it too, and nats-server keeps
/// each stream in a directory of that name.
pub const MAX_PREFIX_BYTES: usize = 128;
/// nats-server's default (and usual) limit on one protocol line.
pub const SERVER_CONTROL_LINE_BYTES: usize = 4096;
/// What a publish line holds besides the subject: `HPUB `, the reply inbox (async-nats writes
/// `_INBOX.<22 characters>.<token>`; a custom inbox prefix may be longer), two sizes of up to
/// ten digits, the spaces and the line end.
const CONTROL_LINE_OVERHEAD_BYTES: usize = 256;
/// The longest subject any bounded id gives: `<prefix>.events.<channel>.<chat>`, both encoded.
pub const LONGEST_SUBJECT_BYTES: usize =
    MAX_PREFIX_BYTES + ".events.".len() + 3 * MAX_CHANNEL_BYTES + 1 + 3 * MAX_CHAT_ID_BYTES;
const _: () = assert!(LONGEST_SUBJECT_BYTES + CONTROL_LINE_OVERHEAD_BYTES <= SERVER_CONTROL_LINE_BYTES);

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubjectError {
    #[error("`{0}` is not a valid encoded subject token")]
    BadToken(String),
    #[error("subject prefix `{0}` must be dot-separated tokens of letters, digits, `-` and `_`")]
    BadPrefix(String),
    #[error(
        "subject prefix is {0} bytes long; the limit is {MAX_PREFIX_BYTES} bytes, so that every subject \
         fits nats-server's {SERVER_CONTROL_LINE_BYTES}-byte protocol line"
    )]
    LongPrefix(usize),
    #[error("{what} is {len} bytes long; the limit is {limit} bytes (it becomes part of a NATS subject)")]
    TooLong { what: &'static str, len: usize, limit: usize },
    #[error("subject `{subject}` does not start with `{prefix}.`")]
    ForeignSubject { subject: String, prefix: String },
}

fn is_plain(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

/// Encodes any string as one safe subject token.
pub fn encode_token(raw: &str) -> String {
    if raw.is_empty() {
        return "~~".to_owned();
    }
    let mut out = String::with_capacity(raw.len());
    for &byte in raw.as_bytes() {
        if is_plain(byte) {
            out.push(byte as char);
        } else {
            out.push('~');
            out.push_str(&format!("{byte:02X}"));
        }
    }
    out
}

/// Decodes a token written by [`encode_token`]; anything else is an error.
pub fn decode_token(token: &str) -> Result<String, SubjectError> {
    let bad = || SubjectError::BadToken(token.to_owned());
    if token == "~~" {
        return Ok(String::new());
    }
    if token.is_empty() {
        return Err(bad());
    }
    let bytes = token.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'~' => {
                let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
                let byte = decode_hex_pair(hex).ok_or_else(bad)?;
                // A plain byte written escaped would give a second spelling of one string.
                if is_plain(byte) {
                    return Err(bad());
                }
                out.push(byte);
                i += 3;
            }
            byte if is_plain(byte) => {
                out.push(byte);
                i += 1;
            }
            _ => return Err(bad()),
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

fn decode_hex_pair(hex: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    Some(digit(hex[0])? << 4 | digit(hex[1])?)
}

/// Refuses a channel name or chat id too long to be part of a subject.
pub fn check_ids(channel: &str, chat_id: &str) -> Result<(), SubjectError> {
    for (what, value, limit) in [("channel", channel, MAX_CHANNEL_BYTES), ("chat_id", chat_id, MAX_CHAT_ID_BYTES)] {
        if value.len() > limit {
            return Err(SubjectError::TooLong { what, len: value.len(), limit });
        }
    }
    Ok(())
}

/// True when `token` can stand as one token of a NATS subject.
pub fn is_valid_token(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b > b' ' && b != 0x7f && b != b'.' && b != b'*' && b != b'>')
}

/// The subjects of one deployment, all under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
}

/// Which of the three message flows a subject belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    In,
    Out,
    Events,
}

impl Flow {
    fn token(self) -> &'static str {
        match self {
            Flow::In => "in",
            Flow::Out => "out",
            Flow::Events => "events",
        }
    }
}

impl Subjects {
    pub fn new(prefix: &str) -> Result<Self, SubjectError> {
        let valid = !prefix.is_empty() && prefix.split('.').all(|t| !t.is_empty() && t.bytes().all(is_plain));
        if !valid {
            return Err(SubjectError::BadPrefix(prefix.to_owned()));
        }
        if prefix.len() > MAX_PREFIX_BYTES {
            return Err(SubjectError::LongPrefix(prefix.len()));
        }
        Ok(Self { prefix: prefix.to_owned() })
    }

    /// [`Subjects::chat`] for ids within the limits, so the subject fits the server's line.
    pub fn checked_chat(&self, flow: Flow, channel: &str, chat_id: &str) -> Result<String, SubjectError> {
        check_ids(channel, chat_id)?;
        Ok(self.chat(flow, channel, chat_id))
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>.<flow>.<channel>.<chat>` with both names encoded.
    pub fn chat(&self, flow: Flow, channel: &str, chat_id: &str) -> String {
        format!("{}.{}.{}.{}", self.prefix, flow.token(), encode_token(channel), encode_token(chat_id))
    }

    /// Every chat of one channel: `<prefix>.<flow>.<channel>.*`.
    pub fn channel_wildcard(&self, flow: Flow, channel: &str) -> String {
        format!("{}.{}.{}.*", self.prefix, flow.token(), encode_token(channel))
    }

    /// Everything of one flow: `<prefix>.<flow>.>`.
    pub fn flow_wildcard(&self, flow: Flow) -> String {
        format!("{}.{}.>", self.prefix, flow.token())
    }

    /// Where messages that could not be processed go: `<prefix>.dead.<flow>`.
    pub fn dead_letter(&self, flow: Flow) -> String {
        format!("{}.dead.{}", self.prefix, flow.token())
    }

    /// Every dead-letter subject: `<prefix>.dead.>`.
    pub fn dead_letter_wildcard(&self) -> String {
        format!("{}.dead.>", self.prefix)
    }

    /// Splits a chat subject back into (flow, channel, chat id).
    pub fn parse_chat(&self, subject: &str) -> Result<(Flow, String, String), SubjectError> {
        let foreign = || SubjectError::ForeignSubject { subject: subject.to_owned(), prefix: self.prefix.clone() };
        let rest = subject.strip_prefix(&self.prefix).and_then(|r| r.strip_prefix('.')).ok_or_else(foreign)?;
        let mut parts = rest.split('.');
        let flow = match parts.next() {
            Some("in") => Flow::In,
            Some("out") => Flow::Out,
            Some("events") => Flow::Events,
            _ => return Err(foreign()),
        };
        let (Some(channel), Some(chat), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(foreign());
        };
        Ok((flow, decode_token(channel)?, decode_token(chat)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_ids_encode_readably() {
        assert_eq!(encode_token("-1001234"), "-1001234");
        assert_eq!(encode_token("a.b"), "a~2Eb");
        assert_eq!(encode_token("*"), "~2A");
        assert_eq!(encode_token(">"), "~3E");
        assert_eq!(encode_token(""), "~~");
        assert_eq!(encode_token("é"), "~C3~A9");
    }

    #[test]
    fn malformed_tokens_are_refused() {
        for bad in ["", "~", "~4", "~zz", "~41", "a.b", "a b", "~c3~a9", "~FF"] {
            assert!(decode_token(bad).is_err(), "{bad:?} decoded");
        }
    }

    #[test]
    fn subjects_round_trip() {
        let s = Subjects::new("sb.prod").unwrap();
        let subject = s.chat(Flow::Out, "telegram", "chat.with spaces>*");
        assert_eq!(s.parse_chat(&subject).unwrap(), (Flow::Out, "telegram".into(), "chat.with spaces>*".into()));
        assert!(Subjects::new("bad prefix").is_err());
        assert!(Subjects::new("a..b").is_err());
        assert!(s.parse_chat("other.in.a.b").is_err());
    }

    #[test]
    fn the_longest_ids_under_the_longest_prefix_fit_the_server_line() {
        let prefix = vec!["p"; MAX_PREFIX_BYTES / 2].join(".") + "q";
        let s = Subjects::new(&prefix).unwrap();
        // Every byte escaped: the worst case of the encoding.
        let channel = "\u{e9}".repeat(MAX_CHANNEL_BYTES / 2);
        let chat = "\u{e9}".repeat(MAX_CHAT_ID_BYTES / 2);
        let subject = s.checked_chat(Flow::Events, &channel, &chat).unwrap();
        assert_eq!(subject.len(), LONGEST_SUBJECT_BYTES - (MAX_PREFIX_BYTES - prefix.len()));
        let line = format!("HPUB {subject} _INBOX.{}.{} 1048576 1048576\r\n", "x".repeat(22), "y".repeat(22));
        assert!(line.len() <= SERVER_CONTROL_LINE_BYTES, "{}", line.len());
    }

    #[test]
    fn over_long_ids_and_prefixes_are_refused() {
        let s = Subjects::new(DEFAULT_PREFIX).unwrap();
        let chat = "x".repeat(MAX_CHAT_ID_BYTES + 1);
        assert_eq!(
            s.checked_chat(Flow::Out, "api", &chat),
            Err(SubjectError::TooLong { what: "chat_id", len: MAX_CHAT_ID_BYTES + 1, limit: MAX_CHAT_ID_BYTES })
        );
        assert!(s.checked_chat(Flow::In, &"c".repeat(MAX_CHANNEL_BYTES + 1), "1").is_err());
        assert!(s.checked_chat(Flow::In, "api", &"x".repeat(MAX_CHAT_ID_BYTES)).is_ok());
        assert_eq!(
            Subjects::new(&"a".repeat(MAX_PREFIX_BYTES + 1)),
            Err(SubjectError::LongPrefix(MAX_PREFIX_BYTES + 1))
        );
    }

    proptest! {
        #[test]
        fn any_string_round_trips_as_one_valid_token(raw in any::<String>()) {
            let token = encode_token(&raw);
            prop_assert!(is_valid_token(&token), "invalid token {token:?}");
            prop_assert!(!token.starts_with('$'));
            prop_assert_eq!(decode_token(&token).unwrap(), raw);
        }

        #[test]
        fn nasty_strings_round_trip(raw in "[ .*>~$a-z\\t\\u{0}-\\u{1f}\\u{e9}\\u{1F600}]{0,12}") {
            let token = encode_token(&raw);
            prop_assert!(is_valid_token(&token));
            prop_assert_eq!(decode_token(&token).unwrap(), raw);
        }
    }
}
