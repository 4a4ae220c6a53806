//! What the owner reads when a stranger asks to pair: who, what they wrote, the code and until
//! when it is valid, with Approve and Deny buttons.

use chrono::{DateTime, Utc};
use switchboard_channels::contract::Button;
use switchboard_channels::control::{ButtonAction, PairingNotice};

use crate::zone::Tz;

/// Characters of the stranger's first message the owner is shown.
const QUOTED_CHARS: usize = 300;

/// The notice's text (Markdown; everything the stranger chose is escaped).
pub fn notice_text(notice: &PairingNotice, zone: &Tz, now: DateTime<Utc>) -> String {
    let platform = platform_name(&notice.channel);
    let username = notice.username.as_deref().map(|name| format!("@{}, ", escaped(name))).unwrap_or_default();
    let who = format!("**{}** ({username}id {} on {platform})", escaped(&notice.sender.name), notice.sender.id);
    let first = quoted(&notice.first_message);
    let said = if first.is_empty() { String::new() } else { format!(" They wrote:\n> {first}") };
    let code = &notice.code;
    format!(
        "{who} asks to talk to me.{said}\n\nCode {code}, valid until {until}. From a shell: `switchboard pairing \
         approve {channel} {code}`",
        until = local_time(notice.expires_at, zone, now),
        channel = notice.channel,
    )
}

/// Approve and Deny, in one row.
pub fn notice_buttons(code: &str) -> Vec<Vec<Button>> {
    vec![vec![
        ButtonAction::PairingApprove(code.to_owned()).button("Approve"),
        ButtonAction::PairingDeny(code.to_owned()).button("Deny"),
    ]]
}

fn platform_name(channel: &str) -> String {
    match channel {
        "telegram" => "Telegram".to_owned(),
        "discord" => "Discord".to_owned(),
        "matrix" => "Matrix".to_owned(),
        other => other.to_owned(),
    }
}

/// The first message as one short paragraph.
fn quoted(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let shortened = match one_line.char_indices().nth(QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", one_line[..cut].trim_end()),
        None => one_line,
    };
    escaped(&shortened)
}

/// A time in the owner's zone: `14:33 UTC` today, `Mar 5, 14:33 CET` on another day.
pub fn local_time(at: DateTime<Utc>, zone: &Tz, now: DateTime<Utc>) -> String {
    let local = at.with_timezone(zone);
    if local.date_naive() == now.with_timezone(zone).date_naive() {
        local.format("%H:%M %Z").to_string()
    } else {
        local.format("%b %-d, %H:%M %Z").to_string()
    }
}

/// Text shown as written: Markdown's punctuation escaped, so a name like `*x*` stays as typed.
fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        if matches!(ch, '\\' | '*' | '_' | '`' | '[' | ']' | '~' | '|' | '<' | '>' | '#') {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use switchboard_channels::contract::Sender;

    use super::*;

    fn notice(first_message: &str) -> PairingNotice {
        PairingNotice {
            channel: "telegram".into(),
            sender: Sender { id: "555".into(), name: "Ann *Smith*".into(), is_bot: false },
            username: Some("ann_s".into()),
            chat_id: "555".into(),
            first_message: first_message.into(),
            code: "ABCD2345".into(),
            expires_at: "2026-03-05T14:33:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn the_owner_reads_who_what_and_until_when() {
        let now = "2026-03-05T13:33:00Z".parse().unwrap();
        let text = notice_text(&notice("hello\n\nthere"), &Tz::UTC, now);
        assert_eq!(
            text,
            "**Ann \\*Smith\\*** (@ann\\_s, id 555 on Telegram) asks to talk to me. They wrote:\n> hello there\n\n\
             Code ABCD2345, valid until 14:33 UTC. From a shell: `switchboard pairing approve telegram ABCD2345`"
        );
        let berlin = notice_text(&notice("hi"), &"Europe/Berlin".parse().unwrap(), now);
        assert!(berlin.contains("valid until 15:33 CET."), "{berlin}");
        let tomorrow = notice_text(&notice("hi"), &Tz::UTC, "2026-03-04T20:00:00Z".parse().unwrap());
        assert!(tomorrow.contains("valid until Mar 5, 14:33 UTC."), "{tomorrow}");
    }

    #[test]
    fn a_long_first_message_is_shortened() {
        let now = "2026-03-05T13:33:00Z".parse().unwrap();
        let text = notice_text(&notice(&"word ".repeat(200)), &Tz::UTC, now);
        let quote = text.lines().find(|line| line.starts_with("> ")).unwrap();
        assert!(quote.ends_with("…") && quote.chars().count() < 310, "{quote}");
        let silent = notice_text(&notice("  "), &Tz::UTC, now);
        assert!(
            silent.starts_with("**Ann \\*Smith\\*** (@ann\\_s, id 555 on Telegram) asks to talk to me.\n\n"),
            "{silent}"
        );
    }
}
