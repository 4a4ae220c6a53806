//! Interactions: the presses and slash commands the test dispatched, their initial responses
//! (`POST /interactions/{id}/{token}/callback`) and the follow-ups through the interaction's
//! webhook (`POST /webhooks/{application_id}/{token}`, `PATCH`/`DELETE …/messages/@original` or
//! `…/messages/{id}` of a follow-up).
//!
//! Discord's rules: the initial response comes within 3 s of the interaction (later: 404
//! `Unknown interaction`, 10062) and only once (again: 400 `Interaction has already been
//! acknowledged.`, 40060); the token then works for 15 minutes (afterwards, or with a wrong
//! token: 401 `Invalid Webhook Token`, 50027). Before the initial response the webhook is
//! unknown (404 `Unknown Webhook`, 10015: the fake's choice, the docs only say to respond first).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::state::State;
use super::wire::Answer;
use super::{APPLICATION_ID, InteractionCallback, components};

/// Discord's window for the initial response.
const RESPONSE_LIMIT: Duration = Duration::from_secs(3);
/// How long an interaction token works for follow-ups.
const TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// CHANNEL_MESSAGE_WITH_SOURCE, DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE, DEFERRED_UPDATE_MESSAGE,
/// UPDATE_MESSAGE and MODAL: the responses a component interaction takes.
const COMPONENT_RESPONSES: &[u64] = &[4, 5, 6, 7, 9];
/// A slash command (APPLICATION_COMMAND) has no message of its own to update.
const COMMAND_RESPONSES: &[u64] = &[4, 5, 9];
/// The interaction type of a slash command.
const APPLICATION_COMMAND: u64 = 2;
/// The `flags` of an ephemeral message.
const EPHEMERAL: u64 = 64;
/// The `flags` of a deferred response's "thinking…" message.
const LOADING: u64 = 128;

/// One dispatched interaction.
struct Pending {
    /// The interaction type: 2 for a slash command, 3 for a press.
    kind: u64,
    token: String,
    channel_id: u64,
    /// The message whose component was pressed.
    message_id: u64,
    created: Instant,
    /// The message `@original` names once a response was given.
    original: Option<u64>,
}

/// The interactions dispatched so far and the responses they got.
pub(super) struct Interactions {
    pending: HashMap<u64, Pending>,
    /// Interaction ids in dispatch order.
    order: Vec<u64>,
    pub(super) callbacks: Vec<InteractionCallback>,
    pub(super) response_limit: Duration,
    pub(super) token_lifetime: Duration,
    next_id: u64,
}

impl Interactions {
    pub(super) fn new() -> Interactions {
        Interactions {
            pending: HashMap::new(),
            order: Vec::new(),
            callbacks: Vec::new(),
            response_limit: RESPONSE_LIMIT,
            token_lifetime: TOKEN_LIFETIME,
            next_id: 1,
        }
    }

    /// A fresh interaction id and its token.
    pub(super) fn next_id(&mut self) -> (u64, String) {
        let id = 8_000_000 + self.next_id;
        self.next_id += 1;
        (id, format!("interaction-token-{id}"))
    }

    /// Starts the clocks of a dispatched interaction of type `kind`.
    pub(super) fn created(
        &mut self,
        id: u64,
        kind: u64,
        token: &str,
        (channel_id, message_id): (u64, u64),
        at: Instant,
    ) {
        let pending = Pending { kind, token: token.to_owned(), channel_id, message_id, created: at, original: None };
        self.pending.insert(id, pending);
        self.order.push(id);
    }

    /// Ids of dispatched interactions without an initial response, in dispatch order.
    pub(super) fn unacknowledged(&self) -> Vec<u64> {
        let open = |id: &&u64| self.pending.get(*id).is_some_and(|pending| pending.original.is_none());
        self.order.iter().filter(open).copied().collect()
    }

    /// An interaction still waiting for its initial response: (id, channel id, message id, type).
    fn open(&self, id: Option<u64>, token: &str, now: Instant) -> Result<(u64, u64, u64, u64), Answer> {
        let found = id.and_then(|id| self.pending.get(&id).map(|pending| (id, pending)));
        let Some((id, pending)) = found.filter(|(_, pending)| pending.token == token) else {
            return Err(unknown_interaction());
        };
        if now.duration_since(pending.created) > self.response_limit {
            return Err(unknown_interaction());
        }
        if pending.original.is_some() {
            return Err(Answer::error(400, "Interaction has already been acknowledged.", 40060));
        }
        Ok((id, pending.channel_id, pending.message_id, pending.kind))
    }

    /// The interaction a webhook token belongs to, while it works, or Discord's error.
    fn by_token(&self, application_id: Option<u64>, token: &str, now: Instant) -> Result<&Pending, Answer> {
        let invalid = || Answer::error(401, "Invalid Webhook Token", 50027);
        if application_id != Some(APPLICATION_ID) {
            return Err(invalid());
        }
        let pending = self.pending.values().find(|pending| pending.token == token).ok_or_else(invalid)?;
        if now.duration_since(pending.created) > self.token_lifetime {
            return Err(invalid());
        }
        if pending.original.is_none() {
            return Err(Answer::error(404, "Unknown Webhook", 10015));
        }
        Ok(pending)
    }
}

/// A response body's type and `data`, checked for an interaction of type `interaction`.
fn response_of(body: &Value, interaction: u64) -> Result<(u8, Value), Answer> {
    let allowed = if interaction == APPLICATION_COMMAND { COMMAND_RESPONSES } else { COMPONENT_RESPONSES };
    let kind = body["type"].as_u64().filter(|kind| allowed.contains(kind)).and_then(|kind| u8::try_from(kind).ok());
    let Some(kind) = kind else {
        let listed: Vec<String> = allowed.iter().map(u64::to_string).collect();
        let message = format!("Value must be one of {{{}}}.", listed.join(", "));
        let errors = json!({ "type": { "_errors": [{ "code": "BASE_TYPE_CHOICES", "message": message }] } });
        return Err(Answer::Json(400, json!({ "code": 50035, "message": "Invalid Form Body", "errors": errors })));
    };
    let data = body.get("data").cloned().unwrap_or(Value::Null);
    if let Some(found) = data.get("components").filter(|found| !found.is_null()) {
        components::check(found, &["data", "components"])?;
    }
    Ok((kind, data))
}

/// The id of a message a create answered with, or the create's error.
fn created_id(answer: Answer) -> Result<u64, Answer> {
    match &answer {
        Answer::Json(200, message) => super::wire::snowflake(&message["id"]).ok_or(answer),
        _ => Err(answer),
    }
}

fn unknown_interaction() -> Answer {
    Answer::error(404, "Unknown interaction", 10062)
}

impl State {
    /// `POST /interactions/{id}/{token}/callback`: the initial response, once, in time.
    pub(super) fn interaction_callback(&mut self, id: Option<u64>, token: &str, body: &Value) -> Answer {
        let now = Instant::now();
        let (id, channel_id, message_id, interaction) = match self.interactions.open(id, token, now) {
            Ok(open) => open,
            Err(refused) => return refused,
        };
        let (kind, data) = match response_of(body, interaction) {
            Ok(response) => response,
            Err(refused) => return refused,
        };
        let original = match self.respond(kind, channel_id, message_id, &data) {
            Ok(original) => original,
            Err(refused) => return refused,
        };
        if let Some(pending) = self.interactions.pending.get_mut(&id) {
            pending.original = Some(original);
        }
        self.interactions.callbacks.push(InteractionCallback { interaction_id: id, kind, data, at: now });
        Answer::NoContent
    }

    /// Carries out a response; returns the id of the message `@original` then names.
    fn respond(&mut self, kind: u8, channel_id: u64, message_id: u64, data: &Value) -> Result<u64, Answer> {
        match kind {
            4 => created_id(self.create_message(Some(channel_id), data, &[])),
            5 => {
                // The "thinking…" message the user sees until the follow-up edits it.
                let id = self.next_message_id;
                self.next_message_id += 1;
                let mut message = self.new_message(channel_id, id, "", &Value::Null);
                let ephemeral = data["flags"].as_u64().unwrap_or(0) & EPHEMERAL;
                message["flags"] = json!(LOADING | ephemeral);
                self.created.insert((channel_id, id), message);
                Ok(id)
            }
            7 => match self.edit_message(Some(channel_id), Some(message_id), data) {
                Answer::Json(200, _) => Ok(message_id),
                refused => Err(refused),
            },
            _ => Ok(message_id),
        }
    }

    /// `POST /webhooks/{application_id}/{token}`: a follow-up message in the interaction's channel.
    pub(super) fn followup(&mut self, application_id: Option<u64>, token: &str, body: &Value) -> Answer {
        match self.interactions.by_token(application_id, token, Instant::now()) {
            Ok(pending) => {
                let channel_id = pending.channel_id;
                self.create_message(Some(channel_id), body, &[])
            }
            Err(refused) => refused,
        }
    }

    /// The message `@original` (the response's) or a follow-up's id names, for a working token.
    fn webhook_message(&self, application_id: Option<u64>, token: &str, target: &str) -> Result<(u64, u64), Answer> {
        let pending = self.interactions.by_token(application_id, token, Instant::now())?;
        let message_id = match target {
            "@original" => pending.original,
            id => id.parse().ok(),
        };
        let unknown = || Answer::error(404, "Unknown Message", 10008);
        let message_id = message_id.ok_or_else(unknown)?;
        Ok((pending.channel_id, message_id))
    }

    /// `PATCH /webhooks/{application_id}/{token}/messages/{@original or id}`: edits the
    /// response's message or a follow-up (a deferred response's "thinking…" message stops loading).
    pub(super) fn edit_webhook_message(&mut self, app: Option<u64>, token: &str, target: &str, body: &Value) -> Answer {
        let (channel_id, message_id) = match self.webhook_message(app, token, target) {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let answer = self.edit_message(Some(channel_id), Some(message_id), body);
        if let Answer::Json(200, _) = &answer
            && let Some(message) = self.created.get_mut(&(channel_id, message_id))
            && message["flags"].as_u64().is_some_and(|flags| flags & LOADING != 0)
        {
            message["flags"] = json!(message["flags"].as_u64().unwrap_or(0) & !LOADING);
            return Answer::ok(message.clone());
        }
        answer
    }

    /// `DELETE /webhooks/{application_id}/{token}/messages/{@original or id}`.
    pub(super) fn delete_webhook_message(&mut self, app: Option<u64>, token: &str, target: &str) -> Answer {
        match self.webhook_message(app, token, target) {
            Ok((channel_id, message_id)) if self.created.remove(&(channel_id, message_id)).is_some() => {
                Answer::NoContent
            }
            Ok(_) => Answer::error(404, "Unknown Message", 10008),
            Err(refused) => refused,
        }
    }
}
