//! The owner's buttons on Matrix, which has no buttons: each becomes a reaction key.
//!
//! A message with buttons lists them under its text ("React to answer: ✅ Approve · ❌ Deny"),
//! carries them (key, label, data) in a field of its own content, and the bot reacts to it
//! with each key, so the owner answers with one tap on a reaction already there. A reaction
//! with one of those keys is a press (see `presses`); once settled, the bot's own reactions
//! are removed, as Telegram removes a keyboard, and the text says the outcome instead.

use matrix_sdk::ruma::events::room::message::RoomMessageEventContent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::format::{PART_BYTES, PART_CHARS, Part};
use crate::contract::Button;
use crate::control::ButtonAction;

/// The content field of a message that carries its buttons.
pub(crate) const FIELD: &str = "switchboard.buttons";

/// Keys for buttons whose action has no key of its own (or whose key another button took):
/// keycaps, then letters, enough for the contract's 25 buttons.
const SPARE_KEYS: [&str; 25] = [
    "1️⃣", "2️⃣", "3️⃣", "4️⃣", "5️⃣", "6️⃣", "7️⃣", "8️⃣", "9️⃣", "🔟", "🇦", "🇧", "🇨", "🇩", "🇪", "🇫", "🇬", "🇭", "🇮", "🇯", "🇰",
    "🇱", "🇲", "🇳", "🇴",
];

/// One button as a reaction key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Choice {
    pub key: String,
    pub label: String,
    pub data: String,
}

/// The key that says what an action does, for the actions this daemon sends.
fn key_of(data: &str) -> Option<&'static str> {
    Some(match ButtonAction::parse(data)? {
        ButtonAction::PairingApprove(_) | ButtonAction::ToolAllowOnce(_) => "✅",
        ButtonAction::PairingDeny(_) | ButtonAction::ToolDeny(_) => "❌",
        ButtonAction::ToolAllowChat(_) => "🔓",
        ButtonAction::CronPause(_) => "⏸️",
        ButtonAction::CronResume(_) => "▶️",
        ButtonAction::CronDelete(_) => "🗑️",
    })
}

/// The rows of buttons as choices, in order, each with a key no other choice has.
pub(crate) fn choices(rows: &[Vec<Button>]) -> Vec<Choice> {
    let mut choices: Vec<Choice> = Vec::new();
    let mut spare = SPARE_KEYS.iter();
    for button in rows.iter().flatten() {
        let taken = |key: &str| choices.iter().any(|choice| same_key(&choice.key, key));
        let key = match key_of(&button.data).filter(|key| !taken(key)) {
            Some(key) => key,
            None => match spare.find(|key| !taken(key)) {
                Some(key) => key,
                None => {
                    tracing::warn!(label = %button.label, "more buttons than Matrix reaction keys; the rest are left out");
                    break;
                }
            },
        };
        choices.push(Choice { key: key.to_owned(), label: button.label.clone(), data: button.data.clone() });
    }
    choices
}

/// Whether two reaction keys are the same emoji: clients differ on the variation selector
/// (U+FE0F) after some of them.
pub(crate) fn same_key(a: &str, b: &str) -> bool {
    a.chars().filter(|c| *c != '\u{fe0f}').eq(b.chars().filter(|c| *c != '\u{fe0f}'))
}

/// Whether `key` can be a button's at all: reactions with any other key (a 👍) are not
/// looked into.
pub(crate) fn may_be_button(key: &str) -> bool {
    let known = ["✅", "❌", "🔓", "⏸️", "▶️", "🗑️"];
    known.iter().chain(SPARE_KEYS.iter()).any(|candidate| same_key(candidate, key))
}

/// The line under a message that lists its buttons, as plain text and as HTML.
fn legend(choices: &[Choice]) -> (String, String) {
    let listed: Vec<String> = choices.iter().map(|choice| format!("{} {}", choice.key, choice.label)).collect();
    let plain = format!("React to answer: {}", listed.join(" · "));
    let html = format!("<p><em>React to answer:</em> {}</p>", escape(&listed.join(" · ")));
    (plain, html)
}

/// `parts` with the legend of `choices` under the last one (or as a part of its own when it
/// does not fit there, or when there is no text).
pub(crate) fn with_legend(mut parts: Vec<Part>, choices: &[Choice]) -> Vec<Part> {
    let (plain, html) = legend(choices);
    let fits = |part: &Part| {
        let bytes = part.body.len() + part.html.as_ref().map_or(0, String::len) + plain.len() + html.len();
        part.body.chars().count() + plain.chars().count() < PART_CHARS && bytes < PART_BYTES
    };
    match parts.last_mut().filter(|part| fits(part)) {
        Some(last) => {
            let last_html = last.html.take().unwrap_or_else(|| paragraph(&last.body));
            last.body = format!("{}\n\n{plain}", last.body);
            last.html = Some(format!("{last_html}\n{html}"));
        }
        None => parts.push(Part { body: plain, html: Some(html) }),
    }
    parts
}

/// The content of a message with buttons: `content` with `choices` in [`FIELD`].
pub(crate) fn carrying(content: &RoomMessageEventContent, choices: &[Choice]) -> Result<Value, serde_json::Error> {
    let mut value = serde_json::to_value(content)?;
    if let Value::Object(fields) = &mut value {
        fields.insert(FIELD.to_owned(), serde_json::to_value(choices)?);
    }
    Ok(value)
}

/// The buttons a message's content carries (none for a message without, or with a field that
/// does not read as buttons).
pub(crate) fn carried(content: &Value) -> Vec<Choice> {
    content.get(FIELD).and_then(|field| serde_json::from_value(field.clone()).ok()).unwrap_or_default()
}

/// The text of a settled message: its legend replaced by `outcome`.
pub(crate) fn settled(content: &Value, choices: &[Choice], outcome: &str) -> RoomMessageEventContent {
    let (plain, html) = legend(choices);
    let text = |field: &str| content.get(field).and_then(Value::as_str).unwrap_or_default();
    let body = text("body");
    let body = body.strip_suffix(&plain).map_or(body, str::trim_end);
    let body = if body.is_empty() { outcome.to_owned() } else { format!("{body}\n\n{outcome}") };
    let formatted = text("formatted_body");
    let formatted = formatted.strip_suffix(&html).map_or(formatted, str::trim_end);
    let formatted = format!("{formatted}\n{}", paragraph(outcome));
    if text("msgtype") == "m.notice" {
        RoomMessageEventContent::notice_html(body, formatted)
    } else {
        RoomMessageEventContent::text_html(body, formatted)
    }
}

fn paragraph(text: &str) -> String {
    format!("<p>{}</p>", escape(text).replace('\n', "<br />"))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairing() -> Vec<Vec<Button>> {
        vec![vec![Button::new("Approve", "pa:ABCD2345"), Button::new("Deny", "pd:ABCD2345")]]
    }

    #[test]
    fn actions_get_keys_that_say_what_they_do_and_others_get_spare_ones() {
        let keys: Vec<String> = choices(&pairing()).into_iter().map(|choice| choice.key).collect();
        assert_eq!(keys, ["✅", "❌"]);
        let foreign = vec![vec![Button::new("Red", "red"), Button::new("Blue", "blue")]];
        let keys: Vec<String> = choices(&foreign).into_iter().map(|choice| choice.key).collect();
        assert_eq!(keys, ["1️⃣", "2️⃣"]);
        // Two buttons of the same action (two cron jobs' Delete) cannot share a key.
        let twice = vec![vec![Button::new("Delete", "cx:a")], vec![Button::new("Delete", "cx:b")]];
        let keys: Vec<String> = choices(&twice).into_iter().map(|choice| choice.key).collect();
        assert_eq!(keys, ["🗑️", "1️⃣"]);
        let many: Vec<Vec<Button>> =
            (0..5).map(|row| (0..5).map(|i| Button::new("x", format!("d{row}{i}"))).collect()).collect();
        assert_eq!(choices(&many).len(), 25);
    }

    #[test]
    fn keys_match_with_or_without_the_variation_selector() {
        assert!(same_key("⏸️", "⏸"));
        assert!(same_key("1️⃣", "1\u{20e3}"));
        assert!(!same_key("✅", "❌"));
        assert!(may_be_button("🗑"));
        assert!(!may_be_button("👍"));
    }

    #[test]
    fn the_legend_goes_under_the_text_and_the_outcome_replaces_it() {
        let choices = choices(&pairing());
        let parts = with_legend(vec![Part { body: "Bob asks to pair.".into(), html: None }], &choices);
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].body, "Bob asks to pair.\n\nReact to answer: ✅ Approve · ❌ Deny");
        let html = parts[0].html.as_deref().unwrap();
        assert_eq!(html, "<p>Bob asks to pair.</p>\n<p><em>React to answer:</em> ✅ Approve · ❌ Deny</p>");
        let content = RoomMessageEventContent::text_html(parts[0].body.clone(), html);
        let value = carrying(&content, &choices).unwrap();
        assert_eq!(carried(&value), choices);
        let settled = settled(&value, &choices, "✅ Approved by Ann <@ann:hs>.");
        assert_eq!(settled.body(), "Bob asks to pair.\n\n✅ Approved by Ann <@ann:hs>.");
        let json = serde_json::to_value(&settled).unwrap();
        assert_eq!(json["formatted_body"], "<p>Bob asks to pair.</p>\n<p>✅ Approved by Ann &lt;@ann:hs&gt;.</p>");
        assert!(json.get(FIELD).is_none(), "a settled message has no buttons");
    }

    #[test]
    fn buttons_without_text_or_under_a_full_part_get_a_part_of_their_own() {
        let choices = choices(&pairing());
        assert_eq!(with_legend(Vec::new(), &choices).len(), 1);
        let full = Part { body: "x".repeat(PART_CHARS - 5), html: None };
        let parts = with_legend(vec![full.clone()], &choices);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], full);
        assert!(parts[1].body.starts_with("React to answer"));
        assert!(carried(&serde_json::json!({ FIELD: "nonsense" })).is_empty());
    }
}
