//! Discord's refusal of a request body: 400 `{"code": 50035, "message": "Invalid Form Body",
//! "errors": {…}}`, the `errors` tree leading to the refused field (`components.0.custom_id`)
//! and ending in `_errors: [{"code", "message"}]`.

use serde_json::{Map, Value, json};

use super::wire::Answer;

/// A refused field: the path under `errors`, Discord's error code and message.
pub(super) struct Refusal {
    path: Vec<String>,
    code: &'static str,
    message: String,
}

impl Refusal {
    pub(super) fn new(path: &[&str], code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal { path: path.iter().map(|part| (*part).to_owned()).collect(), code, message: message.into() }
    }

    /// Prefixes the path with `parts` (the refusal was found inside them).
    pub(super) fn under(mut self, parts: &[&str]) -> Refusal {
        let mut path: Vec<String> = parts.iter().map(|part| (*part).to_owned()).collect();
        path.append(&mut self.path);
        self.path = path;
        self
    }
}

/// 400 with Discord's nested `errors` tree for one refused field.
pub(super) fn invalid_form_body(refusal: Refusal) -> Answer {
    let mut tree = json!({ "_errors": [{ "code": refusal.code, "message": refusal.message }] });
    for part in refusal.path.iter().rev() {
        let mut level = Map::new();
        level.insert(part.clone(), tree);
        tree = Value::Object(level);
    }
    Answer::Json(400, json!({ "code": 50035, "message": "Invalid Form Body", "errors": tree }))
}

/// `value` as a list of at most `max` items, or Discord's refusal of it.
pub(super) fn bounded_list(value: &Value, max: usize) -> Result<&[Value], Refusal> {
    let items = value.as_array().ok_or_else(|| Refusal::new(&[], "BASE_TYPE_LIST", "Must be an array."))?;
    if items.len() > max {
        return Err(Refusal::new(&[], "BASE_TYPE_MAX_LENGTH", format!("Must be {max} or fewer in length.")));
    }
    Ok(items)
}
