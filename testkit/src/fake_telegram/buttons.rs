//! Inline keyboards and callback queries: the markup check every send and edit goes through,
//! and the pressed queries with the rule that each is answered once, within a time limit.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::wire::{Answer, object, string};
use super::{CallbackAnswer, InlineButton};

/// `callback_data` outside 1–64 bytes.
pub(super) const BUTTON_DATA_INVALID: &str = "Bad Request: BUTTON_DATA_INVALID";
/// A button with a text and no action (no `callback_data`, `url`, …).
pub(super) const TEXT_BUTTONS_UNALLOWED: &str =
    "Bad Request: can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard";
/// `reply_markup` that is not an object of arrays of buttons.
pub(super) const CANT_PARSE_MARKUP: &str = "Bad Request: can't parse reply keyboard markup JSON object";
/// The real server's spelling ("ID"); teloxide's `ApiError::InvalidQueryId` expects "id", so
/// teloxide 0.17 reports this as `ApiError::Unknown`.
pub(super) const QUERY_TOO_OLD: &str =
    "Bad Request: query is too old and response timeout expired or query ID is invalid";
/// Telegram's limit on `callback_data`, in bytes.
const MAX_CALLBACK_DATA_BYTES: usize = 64;
/// How long Telegram accepts an answer to a callback query (about 15 s in practice).
pub(super) const DEFAULT_ANSWER_LIMIT: Duration = Duration::from_secs(15);
/// Button fields that give a button an action; a button needs exactly one.
const ACTIONS: [&str; 9] = [
    "callback_data",
    "url",
    "web_app",
    "login_url",
    "switch_inline_query",
    "switch_inline_query_current_chat",
    "switch_inline_query_chosen_chat",
    "callback_game",
    "pay",
];

/// The `inline_keyboard` of a send's or edit's `reply_markup`, checked as Telegram checks it.
/// `Ok(None)`: no markup, another kind of markup, or a keyboard without buttons.
pub(super) fn inline_keyboard(params: &Value) -> Result<Option<Value>, Answer> {
    let Some(markup) = object(params, "reply_markup") else { return Ok(None) };
    let Some(keyboard) = markup.get("inline_keyboard") else {
        return if markup.is_object() { Ok(None) } else { Err(Answer::bad_request(CANT_PARSE_MARKUP)) };
    };
    let Some(rows) = keyboard.as_array() else { return Err(Answer::bad_request(CANT_PARSE_MARKUP)) };
    for row in rows {
        let Some(buttons) = row.as_array() else { return Err(Answer::bad_request(CANT_PARSE_MARKUP)) };
        for button in buttons {
            check_button(button)?;
        }
    }
    let empty = rows.iter().all(|row| row.as_array().is_some_and(Vec::is_empty));
    Ok((!empty).then(|| json!({ "inline_keyboard": keyboard })))
}

fn check_button(button: &Value) -> Result<(), Answer> {
    if button.get("text").and_then(Value::as_str).is_none() {
        return Err(Answer::bad_request(CANT_PARSE_MARKUP));
    }
    if let Some(data) = button.get("callback_data") {
        let bytes = data.as_str().map_or(0, str::len);
        if !(1..=MAX_CALLBACK_DATA_BYTES).contains(&bytes) {
            return Err(Answer::bad_request(BUTTON_DATA_INVALID));
        }
    }
    if !ACTIONS.iter().any(|action| button.get(*action).is_some_and(|value| !value.is_null())) {
        return Err(Answer::bad_request(TEXT_BUTTONS_UNALLOWED));
    }
    Ok(())
}

/// The buttons of an inline keyboard, row by row.
pub(super) fn buttons_of(keyboard: &Value) -> Vec<Vec<InlineButton>> {
    let rows = keyboard["inline_keyboard"].as_array().map(Vec::as_slice).unwrap_or_default();
    rows.iter()
        .map(|row| {
            let buttons = row.as_array().map(Vec::as_slice).unwrap_or_default();
            buttons
                .iter()
                .map(|button| InlineButton {
                    text: string(button, "text").unwrap_or_default(),
                    callback_data: string(button, "callback_data"),
                    url: string(button, "url"),
                })
                .collect()
        })
        .collect()
}

/// A pressed button's query.
struct Pressed {
    at: Instant,
    answered: bool,
}

/// The callback queries pushed so far and the answers they got.
pub(super) struct CallbackQueries {
    pressed: HashMap<String, Pressed>,
    /// Query ids in the order they were pushed.
    order: Vec<String>,
    pub(super) answers: Vec<CallbackAnswer>,
    pub(super) limit: Duration,
    next_id: u64,
}

impl CallbackQueries {
    pub(super) fn new() -> CallbackQueries {
        CallbackQueries {
            pressed: HashMap::new(),
            order: Vec::new(),
            answers: Vec::new(),
            limit: DEFAULT_ANSWER_LIMIT,
            next_id: 1,
        }
    }

    /// A fresh query id, shaped like Telegram's (a long decimal string).
    pub(super) fn next_id(&mut self) -> String {
        let id = format!("{}", 4_242_000_000_000_000_000_u64 + self.next_id);
        self.next_id += 1;
        id
    }

    /// Starts the answer clock of a pushed query.
    pub(super) fn pressed(&mut self, id: &str, at: Instant) {
        self.pressed.insert(id.to_owned(), Pressed { at, answered: false });
        self.order.push(id.to_owned());
    }

    /// `answerCallbackQuery`: a known, unanswered query within the limit, once.
    pub(super) fn answer(&mut self, params: &Value, now: Instant) -> Answer {
        let id = string(params, "callback_query_id").unwrap_or_default();
        let limit = self.limit;
        let Some(query) = self.pressed.get_mut(&id).filter(|query| !query.answered) else {
            return Answer::bad_request(QUERY_TOO_OLD);
        };
        if now.duration_since(query.at) > limit {
            return Answer::bad_request(QUERY_TOO_OLD);
        }
        query.answered = true;
        let show_alert = matches!(params.get("show_alert"), Some(Value::Bool(true)))
            || string(params, "show_alert").as_deref() == Some("true");
        self.answers.push(CallbackAnswer { query_id: id, text: string(params, "text"), show_alert, at: now });
        Answer::Ok(json!(true))
    }

    /// Ids of pushed queries that no successful `answerCallbackQuery` answered, in push order.
    pub(super) fn unanswered(&self) -> Vec<String> {
        self.order.iter().filter(|id| self.pressed.get(*id).is_some_and(|query| !query.answered)).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(markup: Value) -> Result<Option<Value>, String> {
        inline_keyboard(&json!({ "reply_markup": markup })).map_err(|answer| match answer {
            Answer::Err { description, .. } => description,
            Answer::Ok(_) => unreachable!(),
        })
    }

    #[test]
    fn callback_data_must_be_1_to_64_bytes() {
        let button = |data: &str| json!({ "inline_keyboard": [[{ "text": "ok", "callback_data": data }]] });
        assert!(check(button(&"é".repeat(32))).is_ok_and(|keyboard| keyboard.is_some()));
        assert_eq!(check(button(&"é".repeat(33))), Err(BUTTON_DATA_INVALID.to_owned()));
        assert_eq!(check(button("")), Err(BUTTON_DATA_INVALID.to_owned()));
    }

    #[test]
    fn text_only_buttons_and_malformed_markup_are_refused() {
        let text_only = json!({ "inline_keyboard": [[{ "text": "ok" }]] });
        assert_eq!(check(text_only), Err(TEXT_BUTTONS_UNALLOWED.to_owned()));
        assert_eq!(check(json!({ "inline_keyboard": [{ "text": "ok" }] })), Err(CANT_PARSE_MARKUP.to_owned()));
        assert_eq!(check(json!({ "inline_keyboard": [[], []] })), Ok(None));
        assert_eq!(check(json!({ "force_reply": true })), Ok(None));
    }

    #[test]
    fn a_query_is_answered_once_within_the_limit() {
        let mut queries = CallbackQueries::new();
        queries.limit = Duration::from_millis(100);
        let start = Instant::now();
        let (first, second) = (queries.next_id(), queries.next_id());
        queries.pressed(&first, start);
        queries.pressed(&second, start);
        let answer = |queries: &mut CallbackQueries, id: &str, at| {
            !queries.answer(&json!({ "callback_query_id": id }), at).is_err()
        };
        assert!(answer(&mut queries, &first, start + Duration::from_millis(50)));
        assert!(!answer(&mut queries, &first, start + Duration::from_millis(60)), "answered twice");
        assert!(!answer(&mut queries, &second, start + Duration::from_millis(150)), "too late");
        assert!(!answer(&mut queries, "unknown", start));
        assert_eq!(queries.unanswered(), [second]);
    }
}
