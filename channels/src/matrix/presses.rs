//! Presses on Matrix: a reaction, with one of its keys, to a message of the bot's that carries
//! buttons (see `buttons`) goes to the control desk, never to the bus.
//!
//! A button is open while the bot's own reaction with its key is under the message: settling
//! removes them, so a press that comes again (a second tap, a sync replayed after a restart)
//! finds it closed and does nothing. Matrix cannot show a toast to one person: when the press
//! settles the request, the message's edit says the outcome; otherwise the desk's words (a
//! refusal, say) come as a notice in the room.

use std::sync::Arc;

use matrix_sdk::Room;
use matrix_sdk::room::{IncludeRelations, RelationsOptions};
use matrix_sdk::ruma::api::Direction;
use matrix_sdk::ruma::events::Mentions;
use matrix_sdk::ruma::events::reaction::OriginalSyncReactionEvent;
use matrix_sdk::ruma::events::relation::RelationType;
use matrix_sdk::ruma::events::room::message::ReplacementMetadata;
use matrix_sdk::ruma::{EventId, OwnedEventId, OwnedUserId, UInt};
use serde_json::Value;

use super::CHANNEL;
use super::buttons::{self, Choice};
use super::members::display_name;
use super::platform::say_notice;
use crate::contract::Sender;
use crate::control::{ControlDesk, Press};

/// Told to whoever presses a button when no desk is configured.
const NOT_HERE: &str = "These buttons don't work here.";
/// Reactions read under a pressed message when looking for the bot's own.
const REACTIONS_READ: u32 = 100;

/// A pressed message whose button is still open.
struct Open {
    content: Value,
    choices: Vec<Choice>,
    /// The pressed button's data.
    data: String,
    /// The bot's own reactions under the message: its buttons.
    offered: Vec<OwnedEventId>,
}

/// The presses side of the Matrix channel.
pub(crate) struct Presses {
    desk: Option<Arc<dyn ControlDesk>>,
    /// One press at a time: a second tap while the first is being decided then finds the
    /// buttons gone.
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl Presses {
    pub fn new(desk: Option<Arc<dyn ControlDesk>>) -> Self {
        Self { desk, one_at_a_time: tokio::sync::Mutex::new(()) }
    }

    /// Handles `reaction` on a task of its own: the desk may take its time, the sync must not.
    pub fn spawn(self: &Arc<Self>, room: Room, reaction: OriginalSyncReactionEvent) {
        let presses = Arc::clone(self);
        tokio::spawn(async move { presses.handle(&room, &reaction).await });
    }

    async fn handle(&self, room: &Room, reaction: &OriginalSyncReactionEvent) {
        let _turn = self.one_at_a_time.lock().await;
        let (pressed, key) = (&reaction.content.relates_to.event_id, &reaction.content.relates_to.key);
        let Some(open) = open_button(room, pressed, key).await else { return };
        let name = display_name(room, &reaction.sender).await;
        let presser = Sender {
            id: reaction.sender.to_string(),
            name: name.unwrap_or_else(|| reaction.sender.localpart().to_owned()),
            is_bot: false,
        };
        let verb = open.data.split_once(':').map_or("", |(verb, _)| verb);
        tracing::info!(presser = %presser.id, room = %room.room_id(), verb, "Matrix button pressed");
        let Some(desk) = &self.desk else {
            say_notice(room, reaction.event_id.as_str(), NOT_HERE).await;
            return;
        };
        let press = Press {
            channel: CHANNEL.to_owned(),
            chat_id: room.room_id().to_string(),
            presser,
            data: open.data.clone(),
        };
        let answer = desk.press(&press).await;
        match &answer.outcome {
            Some(outcome) => settle(room, pressed, &open, outcome).await,
            // The desk's words for the presser, as a notice in the room (Matrix has no message for
            // one member alone), keyed by the reaction so a replayed press says it once.
            None if !answer.toast.is_empty() => say_notice(room, reaction.event_id.as_str(), &answer.toast).await,
            None => {}
        }
    }
}

/// The button `key` names under `pressed`, if `pressed` is the bot's, carries it, and the bot's
/// reaction with that key is still there.
async fn open_button(room: &Room, pressed: &EventId, key: &str) -> Option<Open> {
    let bot = room.own_user_id().to_owned();
    let event = match room.load_or_fetch_event(pressed, None).await {
        Ok(event) => event,
        Err(err) => {
            tracing::debug!(room = %room.room_id(), %err, "cannot read the message a reaction is under");
            return None;
        }
    };
    let raw = event.raw();
    if raw.get_field::<OwnedUserId>("sender").ok().flatten().as_ref() != Some(&bot) {
        return None;
    }
    let content = raw.get_field::<Value>("content").ok().flatten()?;
    let choices = buttons::carried(&content);
    let data = choices.iter().find(|choice| buttons::same_key(&choice.key, key))?.data.clone();
    let offered = offered(room, pressed, &bot).await;
    if !offered.iter().any(|(_, offered_key)| buttons::same_key(offered_key, key)) {
        tracing::debug!(room = %room.room_id(), %pressed, "a press of a settled button; nothing to do");
        return None;
    }
    Some(Open { content, choices, data, offered: offered.into_iter().map(|(id, _)| id).collect() })
}

/// The bot's own reactions under `message`, with their keys.
async fn offered(room: &Room, message: &EventId, bot: &OwnedUserId) -> Vec<(OwnedEventId, String)> {
    let options = RelationsOptions {
        dir: Direction::Backward,
        limit: Some(UInt::from(REACTIONS_READ)),
        include_relations: IncludeRelations::RelationsOfType(RelationType::Annotation),
        ..RelationsOptions::default()
    };
    let relations = match room.relations(message.to_owned(), options).await {
        Ok(relations) => relations,
        Err(err) => {
            tracing::warn!(room = %room.room_id(), %err, "cannot read the reactions under a pressed message");
            return Vec::new();
        }
    };
    let mut own = Vec::new();
    for event in relations.chunk {
        let raw = event.raw();
        let sender = raw.get_field::<OwnedUserId>("sender").ok().flatten();
        let id = raw.get_field::<OwnedEventId>("event_id").ok().flatten();
        let key = raw
            .get_field::<Value>("content")
            .ok()
            .flatten()
            .and_then(|content| content.pointer("/m.relates_to/key").and_then(Value::as_str).map(str::to_owned));
        if let (Some(id), Some(key), true) = (id, key, sender.as_ref() == Some(bot)) {
            own.push((id, key));
        }
    }
    own
}

/// The request is decided: the bot's reactions go, and the message says the outcome instead
/// of its buttons. Failures are logged.
async fn settle(room: &Room, pressed: &EventId, open: &Open, outcome: &str) {
    for reaction in &open.offered {
        if let Err(err) = room.redact(reaction, None, None).await {
            tracing::warn!(room = %room.room_id(), %err, "cannot remove a settled button");
        }
    }
    let settled = buttons::settled(&open.content, &open.choices, outcome);
    let edit = settled.make_replacement(ReplacementMetadata::new(pressed.to_owned(), Some(Mentions::new())));
    if let Err(err) = room.send(edit).await {
        tracing::warn!(room = %room.room_id(), %err, "cannot show a press's outcome under its message");
    }
}
