//! The owner's controls on the chat platforms: what a button press asks for, and the desk that
//! answers it.
//!
//! Owner notifications (a stranger asks to pair, a tool call waits for approval, `/cron`'s list)
//! go out as ordinary outbound messages with [`crate::contract::Button`]s. When someone presses
//! one, the adapter hands the press to the [`ControlDesk`] at once, in its own process, not
//! through the bus: Telegram shows a spinner until the press is answered and Discord fails an
//! interaction not answered within 3 s, so the answer cannot wait behind a chat's running turn.
//! The desk lives in the daemon crate, next to the store and the config that say who may decide.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::contract::{Button, Sender};
use crate::pairing::PairingStore;

/// What a button's data asks for: `<verb>:<argument>`, short enough for Telegram's 64 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ButtonAction {
    /// Approve the pairing request with this code (on the press's channel).
    PairingApprove(String),
    PairingDeny(String),
    /// Let the waiting tool call with this approval code run, once.
    ToolAllowOnce(String),
    /// Let it run, and later calls of the same tool in the same chat.
    ToolAllowChat(String),
    ToolDeny(String),
    /// Pause, resume or delete the cron job with this id.
    CronPause(String),
    CronResume(String),
    CronDelete(String),
}

impl ButtonAction {
    const VERBS: [&'static str; 8] = ["pa", "pd", "ta", "tc", "td", "cp", "cr", "cx"];

    /// The button's data.
    pub fn data(&self) -> String {
        let (verb, argument) = self.parts();
        format!("{verb}:{argument}")
    }

    /// Reads a press's data; `None` for anything this build did not send.
    pub fn parse(data: &str) -> Option<ButtonAction> {
        let (verb, argument) = data.split_once(':')?;
        if argument.is_empty() || !Self::VERBS.contains(&verb) {
            return None;
        }
        let argument = argument.to_owned();
        Some(match verb {
            "pa" => ButtonAction::PairingApprove(argument),
            "pd" => ButtonAction::PairingDeny(argument),
            "ta" => ButtonAction::ToolAllowOnce(argument),
            "tc" => ButtonAction::ToolAllowChat(argument),
            "td" => ButtonAction::ToolDeny(argument),
            "cp" => ButtonAction::CronPause(argument),
            "cr" => ButtonAction::CronResume(argument),
            _ => ButtonAction::CronDelete(argument),
        })
    }

    /// A button that does this.
    pub fn button(&self, label: &str) -> Button {
        Button::new(label, self.data())
    }

    fn parts(&self) -> (&'static str, &str) {
        match self {
            ButtonAction::PairingApprove(code) => ("pa", code),
            ButtonAction::PairingDeny(code) => ("pd", code),
            ButtonAction::ToolAllowOnce(code) => ("ta", code),
            ButtonAction::ToolAllowChat(code) => ("tc", code),
            ButtonAction::ToolDeny(code) => ("td", code),
            ButtonAction::CronPause(id) => ("cp", id),
            ButtonAction::CronResume(id) => ("cr", id),
            ButtonAction::CronDelete(id) => ("cx", id),
        }
    }
}

/// A press of a button under a message the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Press {
    /// `telegram` or `discord`.
    pub channel: String,
    /// The chat of the message the button is under.
    pub chat_id: String,
    /// Who pressed it.
    pub presser: Sender,
    /// The button's data, as the platform returned it (untrusted: anyone can craft a press).
    pub data: String,
}

/// How the adapter answers a press.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PressAnswer {
    /// Shown to the presser alone: Telegram's callback answer, a Discord ephemeral message.
    /// Empty: the press is acknowledged silently.
    pub toast: String,
    /// When set, the message the button is under is edited: this line is added under its text
    /// (the outcome and who decided, or that the request is no longer open) and its buttons
    /// are removed.
    pub outcome: Option<String>,
}

impl PressAnswer {
    pub fn toast(text: impl Into<String>) -> Self {
        Self { toast: text.into(), outcome: None }
    }

    pub fn settled(toast: impl Into<String>, outcome: impl Into<String>) -> Self {
        Self { toast: toast.into(), outcome: Some(outcome.into()) }
    }
}

/// A stranger who was just given a pairing code, for the owner's notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingNotice {
    /// `telegram` or `discord`.
    pub channel: String,
    /// The stranger as the platform names them (`sender.id` is their user id).
    pub sender: Sender,
    /// `@username` on Telegram, the account name on Discord, if any.
    pub username: Option<String>,
    /// Their direct chat with the bot (where they are told the outcome).
    pub chat_id: String,
    /// Their first message, as they wrote it (the desk shortens it).
    pub first_message: String,
    pub code: String,
    pub expires_at: DateTime<Utc>,
}

/// The daemon's side of the owner's controls.
#[async_trait]
pub trait ControlDesk: Send + Sync {
    /// Decides what `press` asks for, if the presser may, and says how to answer it. Never
    /// fails: a store error becomes a toast saying the press did nothing (and a log line).
    async fn press(&self, press: &Press) -> PressAnswer;

    /// A stranger was given a new pairing code: tell the owner, with Approve and Deny buttons.
    /// Failures are logged; the stranger's code works either way.
    async fn pairing_requested(&self, notice: &PairingNotice);
}

/// What a chat adapter is given for strangers and the owner: the store that says who may talk
/// to it in direct messages, and the desk its buttons and pairing notices go to. Either may be
/// missing (tests, a deployment without a store): strangers are then ignored, presses refused.
#[derive(Clone, Default)]
pub struct OwnerLink {
    pub pairing: Option<Arc<dyn PairingStore>>,
    pub desk: Option<Arc<dyn ControlDesk>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_survive_their_data_and_foreign_data_is_refused() {
        let actions = [
            ButtonAction::PairingApprove("ABCD2345".into()),
            ButtonAction::PairingDeny("ABCD2345".into()),
            ButtonAction::ToolAllowOnce("K7P2".into()),
            ButtonAction::ToolAllowChat("K7P2".into()),
            ButtonAction::ToolDeny("K7P2".into()),
            ButtonAction::CronPause("j1".into()),
            ButtonAction::CronResume("j1".into()),
            ButtonAction::CronDelete("j1".into()),
        ];
        for action in actions {
            assert_eq!(ButtonAction::parse(&action.data()), Some(action.clone()));
            assert!(action.data().len() <= crate::contract::buttons::MAX_BUTTON_DATA_BYTES);
        }
        for foreign in ["", "pa", "pa:", "zz:1", ":x", "PA:1"] {
            assert_eq!(ButtonAction::parse(foreign), None, "{foreign}");
        }
    }
}
