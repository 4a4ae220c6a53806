//! Dead letters: messages set aside with the reason they could not be processed.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{CONTRACT_VERSION, contract_version};

/// A message that could not be processed, published on `…dead.<kind>` with the reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeadLetter {
    #[serde(default = "contract_version")]
    pub v: u32,
    /// The subject the message was taken from.
    pub subject: String,
    pub reason: String,
    /// The payload as received (lossy UTF-8 if it was not valid UTF-8), or its beginning when
    /// `truncated`.
    pub payload: String,
    /// `payload` is only the beginning of the message: the whole would not fit in one bus message.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Size in bytes of the message as received, when `payload` was truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_bytes: Option<usize>,
    #[serde(default = "Utc::now")]
    pub at: DateTime<Utc>,
}

impl Default for DeadLetter {
    fn default() -> Self {
        Self {
            v: CONTRACT_VERSION,
            subject: String::new(),
            reason: String::new(),
            payload: String::new(),
            truncated: false,
            original_bytes: None,
            at: Utc::now(),
        }
    }
}

/// The longest reason kept; reasons quote parser errors, never whole messages.
const MAX_REASON_BYTES: usize = 4096;

impl DeadLetter {
    /// The letter as JSON of at most `max_bytes` bytes: when the whole does not fit, the payload
    /// is cut at a character boundary to what fits (an overlong subject or reason too) and the
    /// letter says so. JSON escaping can make a payload up to six times its size, so the cut is
    /// measured in encoded bytes. Returns the JSON and whether the payload was cut; `None` when
    /// not even an empty payload fits.
    pub fn encode_within(&self, max_bytes: usize) -> Option<(Vec<u8>, bool)> {
        let whole = serde_json::to_vec(self).ok()?;
        if whole.len() <= max_bytes {
            return Some((whole, false));
        }
        let mut letter = self.clone();
        cut(&mut letter.reason, MAX_REASON_BYTES);
        cut(&mut letter.subject, MAX_REASON_BYTES);
        letter.payload = String::new();
        letter.truncated = true;
        letter.original_bytes = Some(self.original_bytes.unwrap_or(self.payload.len()));
        let frame = serde_json::to_vec(&letter).ok()?.len();
        let budget = max_bytes.checked_sub(frame)?;
        letter.payload = self.payload[..fitting_prefix(&self.payload, budget)].to_owned();
        let encoded = serde_json::to_vec(&letter).ok()?;
        (encoded.len() <= max_bytes).then_some((encoded, true))
    }
}

/// The length in bytes of the longest prefix of `text` whose JSON string escaping takes at
/// most `budget` bytes.
fn fitting_prefix(text: &str, budget: usize) -> usize {
    let mut used = 0;
    for (at, c) in text.char_indices() {
        let escaped = match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if u32::from(c) < 0x20 => 6,
            c => c.len_utf8(),
        };
        if used + escaped > budget {
            return at;
        }
        used += escaped;
    }
    text.len()
}

/// Cuts `text` to at most `limit` bytes at a character boundary.
fn cut(text: &mut String, limit: usize) {
    if text.len() <= limit {
        return;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_letter_that_fits_is_unchanged() {
        let letter =
            DeadLetter { subject: "s".into(), reason: "r".into(), payload: "{bad".into(), ..DeadLetter::default() };
        let (encoded, truncated) = letter.encode_within(10_000).unwrap();
        assert!(!truncated);
        assert_eq!(serde_json::from_slice::<DeadLetter>(&encoded).unwrap(), letter);
        assert!(!String::from_utf8(encoded).unwrap().contains("truncated"));
    }

    #[test]
    fn an_escaped_payload_is_cut_to_fit_and_marked() {
        // Control characters are written `\u0001` in JSON: six bytes for one.
        let payload = "\u{1}é".repeat(50_000);
        let letter = DeadLetter { payload: payload.clone(), ..DeadLetter::default() };
        let (encoded, truncated) = letter.encode_within(65_536).unwrap();
        assert!(truncated);
        assert!(encoded.len() <= 65_536, "{}", encoded.len());
        let back: DeadLetter = serde_json::from_slice(&encoded).unwrap();
        assert!(back.truncated);
        assert_eq!(back.original_bytes, Some(payload.len()));
        assert!(payload.starts_with(&back.payload) && back.payload.len() > 5_000, "{}", back.payload.len());
    }

    #[test]
    fn nothing_fits_in_too_small_a_limit() {
        assert!(DeadLetter::default().encode_within(10).is_none());
    }
}
