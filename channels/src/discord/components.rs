//! Buttons under an outbound message as Discord message components: one action row per row
//! of buttons, each button's `custom_id` its data, coloured by what pressing it does.

use serenity::all::{ButtonStyle, CreateActionRow, CreateButton};

use crate::contract::Button;
use crate::control::ButtonAction;

/// The action rows showing `rows` (none when there are no buttons).
pub(crate) fn action_rows(rows: &[Vec<Button>]) -> Vec<CreateActionRow> {
    rows.iter()
        .filter(|row| !row.is_empty())
        .map(|row| CreateActionRow::Buttons(row.iter().map(button).collect()))
        .collect()
}

fn button(button: &Button) -> CreateButton {
    CreateButton::new(button.data.clone()).label(button.label.clone()).style(style_of(&button.data))
}

/// Green for saying yes, red for saying no or deleting, grey for the rest.
fn style_of(data: &str) -> ButtonStyle {
    match ButtonAction::parse(data) {
        Some(ButtonAction::PairingApprove(_) | ButtonAction::ToolAllowOnce(_) | ButtonAction::ToolAllowChat(_)) => {
            ButtonStyle::Success
        }
        Some(ButtonAction::PairingDeny(_) | ButtonAction::ToolDeny(_) | ButtonAction::CronDelete(_)) => {
            ButtonStyle::Danger
        }
        Some(ButtonAction::CronPause(_) | ButtonAction::CronResume(_)) | None => ButtonStyle::Secondary,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rows_become_action_rows_coloured_by_meaning() {
        let rows = vec![
            vec![Button::new("Approve", "pa:K7PX"), Button::new("Deny", "pd:K7PX")],
            vec![Button::new("Pause", "cp:j1"), Button::new("Delete", "cx:j1"), Button::new("Other", "zz:1")],
        ];
        let rendered = serde_json::to_value(action_rows(&rows)).unwrap();
        assert_eq!(rendered[0]["type"], json!(1));
        let styles: Vec<Vec<u64>> = rendered
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["components"].as_array().unwrap().iter().map(|b| b["style"].as_u64().unwrap()).collect())
            .collect();
        assert_eq!(styles, [vec![3, 4], vec![2, 4, 2]]);
        assert_eq!(rendered[0]["components"][0]["custom_id"], json!("pa:K7PX"));
        assert_eq!(rendered[0]["components"][0]["label"], json!("Approve"));
        assert_eq!(rendered[0]["components"][0]["type"], json!(2));
        assert!(action_rows(&[]).is_empty());
    }
}
