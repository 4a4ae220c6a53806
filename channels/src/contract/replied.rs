//! The message an inbound message replies to (`replied_to` in `docs/bus.md`): who wrote it,
//! its text cut to [`MAX_REPLIED_CHARS`], and the part of it the person quoted.

use serde::{Deserialize, Serialize};

use super::{ContractError, MAX_MESSAGE_ID_BYTES, MAX_SENDER_ID_BYTES, Sender, check_length};

/// Longest `text` and `quote` of a replied-to message, in characters (the cut marker
/// included). A reply is usually about one point of a message; a whole long answer of the bot
/// repeated with every reply would crowd out the conversation.
pub const MAX_REPLIED_CHARS: usize = 1000;
/// Ends a text that was cut.
pub const CUT_MARKER: char = '…';

/// The message a person replied to, as far as the platform tells.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RepliedTo {
    /// The platform's id of the replied-to message (the same as the inbound `reply_to`).
    pub message_id: String,
    /// Who wrote it.
    pub sender: Sender,
    /// The bot itself wrote it: the person answers one of the bot's own messages.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub from_self: bool,
    /// Its text or caption, or a marker such as `[photo]` when it has none; cut to
    /// [`MAX_REPLIED_CHARS`] characters, ending in [`CUT_MARKER`] when cut.
    pub text: String,
    /// The part of it the person quoted (Telegram lets people reply to a selected fragment),
    /// cut the same way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quote: Option<String>,
}

impl RepliedTo {
    /// A replied-to message with its text (and quote) cut to the limit.
    pub fn new(message_id: String, sender: Sender, from_self: bool, text: &str, quote: Option<&str>) -> Self {
        let quote = quote.map(str::trim).filter(|quote| !quote.is_empty()).map(cut);
        Self { message_id, sender, from_self, text: cut(text.trim()), quote }
    }

    /// The limits a decoded value must keep (ids as elsewhere, texts as [`RepliedTo::new`] cuts them).
    pub fn validate(&self) -> Result<(), ContractError> {
        check_length("replied_to.message_id", &self.message_id, MAX_MESSAGE_ID_BYTES)?;
        check_length("replied_to.sender.id", &self.sender.id, MAX_SENDER_ID_BYTES)?;
        check_chars("replied_to.text", &self.text)?;
        check_chars("replied_to.quote", self.quote.as_deref().unwrap_or_default())
    }
}

/// `text` cut to [`MAX_REPLIED_CHARS`] characters, the last of them [`CUT_MARKER`] when cut.
pub fn cut(text: &str) -> String {
    if text.chars().count() <= MAX_REPLIED_CHARS {
        return text.to_owned();
    }
    let mut kept: String = text.chars().take(MAX_REPLIED_CHARS - 1).collect();
    kept.push(CUT_MARKER);
    kept
}

fn check_chars(field: &'static str, value: &str) -> Result<(), ContractError> {
    let len = value.chars().count();
    if len > MAX_REPLIED_CHARS {
        return Err(ContractError::TooManyChars { field, len, limit: MAX_REPLIED_CHARS });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bob() -> Sender {
        Sender { id: "222".into(), name: "Bob".into(), is_bot: false }
    }

    #[test]
    fn long_texts_are_cut_with_a_marker_and_short_ones_kept() {
        let long = "é".repeat(MAX_REPLIED_CHARS + 5);
        let replied = RepliedTo::new("41".into(), bob(), false, &long, Some(&long));
        assert_eq!(replied.text.chars().count(), MAX_REPLIED_CHARS);
        assert!(replied.text.ends_with("é…"), "{}", &replied.text[replied.text.len() - 8..]);
        assert_eq!(replied.quote.as_deref(), Some(replied.text.as_str()));
        let exact = "x".repeat(MAX_REPLIED_CHARS);
        assert_eq!(cut(&exact), exact, "a text at the limit is kept whole");
        assert_eq!(replied.validate(), Ok(()));
    }

    #[test]
    fn blank_quotes_are_dropped_and_texts_trimmed() {
        let replied = RepliedTo::new("41".into(), bob(), false, "  hi \n", Some("  "));
        assert_eq!((replied.text.as_str(), replied.quote), ("hi", None));
    }

    #[test]
    fn texts_past_the_limit_fail_validation() {
        let replied = RepliedTo { text: "x".repeat(MAX_REPLIED_CHARS + 1), ..RepliedTo::default() };
        let err = replied.validate().unwrap_err();
        assert_eq!(err, ContractError::TooManyChars { field: "replied_to.text", len: 1001, limit: 1000 });
        let long_id = RepliedTo { message_id: "1".repeat(MAX_MESSAGE_ID_BYTES + 1), ..RepliedTo::default() };
        assert!(matches!(long_id.validate(), Err(ContractError::TooLong { field: "replied_to.message_id", .. })));
    }
}
