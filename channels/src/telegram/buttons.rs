//! Buttons on Telegram: the contract's rows of buttons as an inline keyboard, and the text a
//! message shows once a press settled what its buttons asked.

use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup};

use super::format::{Part, escape_into};
use crate::contract::Button;

/// The inline keyboard for `rows` (`callback_data` = the button's data); `None` without buttons.
pub(crate) fn keyboard_of(rows: &[Vec<Button>]) -> Option<InlineKeyboardMarkup> {
    let rows: Vec<Vec<InlineKeyboardButton>> = rows
        .iter()
        .filter(|row| !row.is_empty())
        .map(|row| row.iter().map(|button| InlineKeyboardButton::callback(&button.label, &button.data)).collect())
        .collect();
    (!rows.is_empty()).then(|| InlineKeyboardMarkup::new(rows))
}

/// A message's text with the outcome of a press added under it, as HTML (from the message's
/// own formatting) and as plain text.
pub(crate) fn with_outcome(html: &str, plain: &str, outcome: &str) -> Part {
    let mut with_html = format!("{html}\n\n");
    escape_into(&mut with_html, outcome);
    Part { html: with_html, plain: format!("{plain}\n\n{outcome}") }
}

#[cfg(test)]
mod tests {
    use teloxide::types::InlineKeyboardButtonKind;

    use super::*;

    #[test]
    fn rows_become_an_inline_keyboard_of_callback_buttons() {
        let rows = vec![
            vec![Button::new("Approve", "pa:ABCD2345"), Button::new("Deny", "pd:ABCD2345")],
            vec![Button::new("Later", "x:1")],
        ];
        let keyboard = keyboard_of(&rows).unwrap();
        let shape: Vec<Vec<(String, String)>> = keyboard
            .inline_keyboard
            .iter()
            .map(|row| {
                row.iter()
                    .map(|button| match &button.kind {
                        InlineKeyboardButtonKind::CallbackData(data) => (button.text.clone(), data.clone()),
                        other => panic!("not a callback button: {other:?}"),
                    })
                    .collect()
            })
            .collect();
        assert_eq!(
            shape,
            [
                vec![("Approve".into(), "pa:ABCD2345".into()), ("Deny".into(), "pd:ABCD2345".into())],
                vec![("Later".into(), "x:1".into())]
            ]
        );
        assert!(keyboard_of(&[]).is_none());
        assert!(keyboard_of(&[Vec::new()]).is_none());
    }

    #[test]
    fn the_outcome_goes_under_the_text_escaped() {
        let part = with_outcome("<b>Ann</b> asks", "Ann asks", "Denied by <Bob> & co.");
        assert_eq!(part.html, "<b>Ann</b> asks\n\nDenied by &lt;Bob&gt; &amp; co.");
        assert_eq!(part.plain, "Ann asks\n\nDenied by <Bob> & co.");
    }
}
