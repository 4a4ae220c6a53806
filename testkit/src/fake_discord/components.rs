//! Message components as Discord checks them: `components` is up to 5 action rows (type 1) of
//! 1–5 components; a button (type 2) has a `style` 1–6, a `label` of at most 80 characters,
//! and a `custom_id` of 1–100 characters (styles 1–4) or a `url` (style 5); custom ids are
//! unique within a message. A refusal is 400 `{"code": 50035, "message": "Invalid Form Body",
//! "errors": {…}}` with the path to the bad field (`components.0.components.1.custom_id`).
//! The path, status and 50035 are Discord's shape; the leaf codes (`BASE_TYPE_BAD_LENGTH`,
//! `COMPONENT_CUSTOM_ID_DUPLICATED`, …) follow Discord's names as far as they are known, so
//! tests should match on the path rather than on a leaf's message.

use std::collections::HashSet;

use serde_json::Value;

use super::ComponentButton;
use super::form::{Refusal, bounded_list, invalid_form_body};
use super::wire::Answer;

const MAX_ROWS: usize = 5;
const MAX_ROW_COMPONENTS: usize = 5;
const MAX_CUSTOM_ID_CHARS: usize = 100;
const MAX_LABEL_CHARS: usize = 80;
const ACTION_ROW: u64 = 1;
const BUTTON: u64 = 2;
const LINK_STYLE: u64 = 5;
const PREMIUM_STYLE: u64 = 6;

/// The `components` of a message body, checked; `field` names it in errors (`components`, or
/// `data.components` in an interaction response).
pub(super) fn check(components: &Value, field: &[&str]) -> Result<Value, Answer> {
    check_rows(components).map(|()| components.clone()).map_err(|refusal| invalid_form_body(refusal.under(field)))
}

fn check_rows(components: &Value) -> Result<(), Refusal> {
    let rows = bounded_list(components, MAX_ROWS)?;
    let mut custom_ids = HashSet::new();
    for (index, row) in rows.iter().enumerate() {
        let index = index.to_string();
        check_row(row, &mut custom_ids).map_err(|refusal| refusal.under(&[&index]))?;
    }
    Ok(())
}

fn check_row(row: &Value, custom_ids: &mut HashSet<String>) -> Result<(), Refusal> {
    if row["type"].as_u64() != Some(ACTION_ROW) {
        return Err(Refusal::new(&["type"], "BASE_TYPE_CHOICES", "Value must be one of {1}."));
    }
    let items = row["components"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !(1..=MAX_ROW_COMPONENTS).contains(&items.len()) {
        let message = format!("Must be between 1 and {MAX_ROW_COMPONENTS} in length.");
        return Err(Refusal::new(&["components"], "BASE_TYPE_BAD_LENGTH", message));
    }
    for (index, item) in items.iter().enumerate() {
        let index = index.to_string();
        check_component(item, custom_ids).map_err(|refusal| refusal.under(&["components", &index]))?;
    }
    Ok(())
}

fn check_component(item: &Value, custom_ids: &mut HashSet<String>) -> Result<(), Refusal> {
    let kind = item["type"].as_u64().unwrap_or(0);
    if kind == ACTION_ROW || kind == 0 {
        return Err(Refusal::new(&["type"], "BASE_TYPE_CHOICES", "Value must be one of {2, 3, 5, 6, 7, 8}."));
    }
    if kind == BUTTON {
        check_button(item)?;
    }
    if let Some(custom_id) = item["custom_id"].as_str() {
        let chars = custom_id.chars().count();
        if !(1..=MAX_CUSTOM_ID_CHARS).contains(&chars) {
            let message = format!("Must be between 1 and {MAX_CUSTOM_ID_CHARS} in length.");
            return Err(Refusal::new(&["custom_id"], "BASE_TYPE_BAD_LENGTH", message));
        }
        if !custom_ids.insert(custom_id.to_owned()) {
            let message = "Component custom id cannot be duplicated";
            return Err(Refusal::new(&["custom_id"], "COMPONENT_CUSTOM_ID_DUPLICATED", message));
        }
    }
    Ok(())
}

fn check_button(button: &Value) -> Result<(), Refusal> {
    let style = button["style"].as_u64().unwrap_or(0);
    if !(1..=PREMIUM_STYLE).contains(&style) {
        return Err(Refusal::new(&["style"], "BASE_TYPE_CHOICES", "Value must be one of {1, 2, 3, 4, 5, 6}."));
    }
    if button["label"].as_str().is_some_and(|label| label.chars().count() > MAX_LABEL_CHARS) {
        let message = format!("Must be {MAX_LABEL_CHARS} or fewer in length.");
        return Err(Refusal::new(&["label"], "BASE_TYPE_MAX_LENGTH", message));
    }
    let has = |key: &str| button.get(key).is_some_and(|value| !value.is_null());
    match style {
        LINK_STYLE if !has("url") => Err(Refusal::new(&["url"], "BASE_TYPE_REQUIRED", "This field is required")),
        LINK_STYLE if has("custom_id") => Err(Refusal::new(
            &["custom_id"],
            "BUTTON_COMPONENT_CUSTOM_ID_NOT_ALLOWED",
            "A custom id cannot be set on link buttons",
        )),
        LINK_STYLE | PREMIUM_STYLE => Ok(()),
        _ if !has("custom_id") => Err(Refusal::new(&["custom_id"], "BASE_TYPE_REQUIRED", "This field is required")),
        _ => Ok(()),
    }
}

/// The buttons of a message's `components`, row by row (other components are left out).
pub(super) fn buttons_of(components: &Value) -> Vec<Vec<ComponentButton>> {
    let rows = components.as_array().map(Vec::as_slice).unwrap_or_default();
    rows.iter()
        .map(|row| {
            let items = row["components"].as_array().map(Vec::as_slice).unwrap_or_default();
            items.iter().filter(|item| item["type"].as_u64() == Some(BUTTON)).map(button_of).collect()
        })
        .collect()
}

fn button_of(item: &Value) -> ComponentButton {
    let text = |key: &str| item[key].as_str().map(str::to_owned);
    ComponentButton {
        style: item["style"].as_u64().and_then(|style| u8::try_from(style).ok()).unwrap_or(0),
        label: text("label"),
        custom_id: text("custom_id"),
        url: text("url"),
        disabled: item["disabled"].as_bool().unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row(buttons: Value) -> Value {
        json!([{ "type": 1, "components": buttons }])
    }

    fn refused(components: Value) -> Value {
        match check(&components, &["components"]) {
            Err(Answer::Json(400, body)) => body,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn buttons_pass_and_read_back() {
        let components = row(json!([
            { "type": 2, "style": 3, "label": "Approve", "custom_id": "approve:1" },
            { "type": 2, "style": 5, "label": "Docs", "url": "https://example.com" },
        ]));
        assert!(check(&components, &["components"]).is_ok());
        let buttons = buttons_of(&components);
        assert_eq!(buttons[0][0].custom_id.as_deref(), Some("approve:1"));
        assert_eq!((buttons[0][1].style, buttons[0][1].url.as_deref()), (5, Some("https://example.com")));
    }

    #[test]
    fn a_long_custom_id_is_refused_with_its_path() {
        let ok = json!({ "type": 2, "style": 1, "label": "a", "custom_id": "a" });
        let long = json!({ "type": 2, "style": 1, "label": "b", "custom_id": "x".repeat(101) });
        let body = refused(row(json!([ok, long])));
        assert_eq!((body["code"].clone(), body["message"].clone()), (json!(50035), json!("Invalid Form Body")));
        let errors = &body["errors"]["components"]["0"]["components"]["1"]["custom_id"]["_errors"][0];
        assert_eq!(errors["code"], "BASE_TYPE_BAD_LENGTH");
    }

    #[test]
    fn rows_duplicates_and_missing_ids_are_refused() {
        let button = json!({ "type": 2, "style": 1, "label": "a", "custom_id": "same" });
        let body = refused(json!([{ "type": 2 }]));
        assert!(body["errors"]["components"]["0"]["type"].is_object(), "{body}");
        let body = refused(row(json!([button.clone(), button])));
        assert_eq!(
            body["errors"]["components"]["0"]["components"]["1"]["custom_id"]["_errors"][0]["code"],
            "COMPONENT_CUSTOM_ID_DUPLICATED"
        );
        let body = refused(row(json!([{ "type": 2, "style": 1, "label": "a" }])));
        assert!(body["errors"]["components"]["0"]["components"]["0"]["custom_id"].is_object(), "{body}");
        let body = refused(row(json!([])));
        assert!(body["errors"]["components"]["0"]["components"]["_errors"].is_array(), "{body}");
    }
}
