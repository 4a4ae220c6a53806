//! Buttons under an outbound message: a Telegram inline keyboard, Discord message components.
//!
//! A button carries a label people read and `data` that comes back, unchanged, when someone
//! presses it (Telegram's `callback_data`, Discord's `custom_id`). What the data means is
//! [`crate::control::ButtonAction`]'s business; the contract only keeps it within what both
//! platforms accept.

use serde::{Deserialize, Serialize};

use super::ContractError;

/// Longest `data`, in UTF-8 bytes: Telegram's limit on callback data (Discord allows 100).
pub const MAX_BUTTON_DATA_BYTES: usize = 64;
/// Longest label, in characters: Discord's limit on a button label.
pub const MAX_BUTTON_LABEL_CHARS: usize = 80;
/// Rows of buttons, and buttons per row, at most: Discord's limits on action rows.
pub const MAX_BUTTON_ROWS: usize = 5;
pub const MAX_BUTTONS_PER_ROW: usize = 5;

/// One button.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Button {
    pub label: String,
    /// Returned when the button is pressed: 1–64 bytes.
    pub data: String,
}

impl Button {
    pub fn new(label: impl Into<String>, data: impl Into<String>) -> Self {
        Self { label: label.into(), data: data.into() }
    }
}

/// Refuses buttons a platform would refuse: empty or oversized data or labels, too many.
pub(super) fn check_buttons(rows: &[Vec<Button>]) -> Result<(), ContractError> {
    if rows.len() > MAX_BUTTON_ROWS {
        return Err(ContractError::TooMany { field: "buttons", count: rows.len(), limit: MAX_BUTTON_ROWS });
    }
    for row in rows {
        if row.is_empty() {
            return Err(ContractError::Missing("buttons[row]"));
        }
        if row.len() > MAX_BUTTONS_PER_ROW {
            return Err(ContractError::TooMany { field: "buttons[row]", count: row.len(), limit: MAX_BUTTONS_PER_ROW });
        }
        for button in row {
            super::non_empty("buttons.data", &button.data)?;
            super::non_empty("buttons.label", &button.label)?;
            super::check_length("buttons.data", &button.data, MAX_BUTTON_DATA_BYTES)?;
            let chars = button.label.chars().count();
            if chars > MAX_BUTTON_LABEL_CHARS {
                return Err(ContractError::TooManyChars {
                    field: "buttons.label",
                    len: chars,
                    limit: MAX_BUTTON_LABEL_CHARS,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buttons_platforms_would_refuse_are_refused() {
        let ok = vec![vec![Button::new("Approve", "pa:ABCD2345"), Button::new("Deny", "pd:ABCD2345")]];
        assert!(check_buttons(&ok).is_ok());
        assert!(check_buttons(&[vec![Button::new("x", "")]]).is_err());
        assert!(check_buttons(&[vec![Button::new("", "d")]]).is_err());
        assert!(check_buttons(&[vec![Button::new("x", "d".repeat(65))]]).is_err());
        assert!(check_buttons(&[vec![Button::new("x".repeat(81), "d")]]).is_err());
        assert!(check_buttons(&[Vec::new()]).is_err());
        assert!(check_buttons(&vec![vec![Button::new("x", "d")]; 6]).is_err());
        assert!(check_buttons(&[vec![Button::new("x", "d"); 6]]).is_err());
    }
}
