//! `HEARTBEAT_OK`: how a heartbeat's turn says "nothing needs attention". A reply that is the
//! token, or starts or ends with it and says little else, is not delivered.

use crate::prompt::HEARTBEAT_OK;

/// What to do with a heartbeat turn's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatAck {
    /// No token at the start or end: deliver the reply as it is.
    NotAck,
    /// The token with at most the allowed other text: deliver nothing.
    Suppress,
    /// The token with a longer report: deliver this, the report without the token.
    Deliver(String),
}

/// Characters around the token that do not count as text: Markdown emphasis and code marks,
/// and the punctuation models put after a status word.
fn is_decoration(c: char) -> bool {
    c.is_whitespace() || matches!(c, '*' | '_' | '`' | '~' | '.' | ',' | ':' | ';' | '!' | '-' | '–' | '—' | '|')
}

/// Judges a heartbeat reply: `HEARTBEAT_OK` alone, or at the start or end of a reply with at
/// most `max_other_chars` other characters, is an acknowledgement to suppress.
pub fn judge(reply: &str, max_other_chars: usize) -> HeartbeatAck {
    let Some(rest) = strip_token(reply) else { return HeartbeatAck::NotAck };
    if rest.chars().count() <= max_other_chars { HeartbeatAck::Suppress } else { HeartbeatAck::Deliver(rest) }
}

/// The reply without a token at its start or end (and the decoration around it), trimmed;
/// `None` when the token is at neither end.
fn strip_token(reply: &str) -> Option<String> {
    let core = reply.trim_matches(is_decoration);
    let core_start = reply.len() - reply.trim_start_matches(is_decoration).len();
    if let Some(after) = core.strip_prefix(HEARTBEAT_OK)
        && !after.trim_start_matches(is_emphasis).starts_with(char::is_alphanumeric)
    {
        // Keep what follows as the model wrote it (including its closing emphasis, if any
        // belongs to the report), minus what decorated the token.
        let from = core_start + HEARTBEAT_OK.len();
        return Some(reply[from..].trim_start_matches(is_decoration).trim_end().to_owned());
    }
    if let Some(before) = core.strip_suffix(HEARTBEAT_OK)
        && !before.trim_end_matches(is_emphasis).ends_with(char::is_alphanumeric)
    {
        let end = core_start + before.len();
        // The report's own closing punctuation stays; only what set the token apart goes.
        return Some(reply[..end].trim_end_matches(is_separator).trim_start().to_owned());
    }
    None
}

/// Whitespace, emphasis and dashes: what separates a report from a token after it.
fn is_separator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '*' | '_' | '`' | '~' | '-' | '–' | '—' | '|')
}

/// Marks that may wrap the token (`_HEARTBEAT_OK_`) and still leave it a word of its own;
/// `NOT_HEARTBEAT_OK` or `HEARTBEAT_OKAY` are other words.
fn is_emphasis(c: char) -> bool {
    matches!(c, '*' | '_' | '`' | '~')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_acknowledgements_are_suppressed() {
        for reply in [
            "HEARTBEAT_OK",
            "  HEARTBEAT_OK\n",
            "**HEARTBEAT_OK**",
            "`HEARTBEAT_OK`.",
            "HEARTBEAT_OK — all quiet.",
            "Nothing to report. HEARTBEAT_OK",
            "All checked.\n\n_HEARTBEAT_OK_",
        ] {
            assert_eq!(judge(reply, 300), HeartbeatAck::Suppress, "{reply:?}");
        }
    }

    #[test]
    fn long_reports_are_delivered_without_the_token() {
        let report = "The backup failed twice tonight. ".repeat(12);
        let reply = format!("{report}\n\nHEARTBEAT_OK");
        assert_eq!(judge(&reply, 300), HeartbeatAck::Deliver(report.trim_end().to_owned()));
        let reply = format!("**HEARTBEAT_OK** {report}");
        assert_eq!(judge(&reply, 300), HeartbeatAck::Deliver(report.trim_end().to_owned()));
        assert_eq!(judge("HEARTBEAT_OK, but: x", 2), HeartbeatAck::Deliver("but: x".into()));
    }

    #[test]
    fn the_token_inside_a_reply_or_word_is_no_acknowledgement() {
        for reply in
            ["The backup failed.", "I'd say HEARTBEAT_OK but the disk is full.", "HEARTBEAT_OKAY", "NOT_HEARTBEAT_OK"]
        {
            assert_eq!(judge(reply, 300), HeartbeatAck::NotAck, "{reply:?}");
        }
    }
}
