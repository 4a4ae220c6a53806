//! The owner's chat commands: what `switchboard pairing`, `approvals`, `users` and `cron` do
//! from a shell, from the owner's direct chat. Approvers (`[approvals] approvers`) who are not
//! owners use the three about tool calls (`/pending`, `/approve`, `/deny`) there too. Anyone
//! else, and everyone in a group, is told the command is unknown. Decisions go through
//! [`crate::control::Control`], with the checks the buttons make.

mod cron;
mod decide;
mod pending;
mod people;
mod spend;

use switchboard_channels::contract::{InboundMessage, commands};

pub(super) use self::cron::cron;
pub(super) use self::decide::decide;
pub(super) use self::pending::pending;
pub(super) use self::people::{level, users};
pub(super) use self::spend::spend;
use super::TurnRunner;
use crate::config::{Identity, Level};
use crate::store::StoreError;

/// What the sender of a command may decide from where they write: nothing in a group; in a
/// direct chat, an owner pairing requests and everything else the owner's commands do, an
/// approver the tool calls waiting for approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Deciding {
    pub owner: bool,
    pub approver: bool,
}

impl Deciding {
    /// What `msg`'s sender may decide in `msg`'s chat.
    pub async fn of(turns: &TurnRunner, msg: &InboundMessage) -> Result<Self, StoreError> {
        if msg.is_group {
            return Ok(Self::default());
        }
        let owner = turns.people().level_here(msg).await? == Level::Owner;
        let identity = Identity::new(&msg.channel, &msg.sender.id);
        let store = turns.control.store().as_ref();
        let approver = turns.control.deciders().is_approver(store, &identity, &msg.sender.name).await?;
        Ok(Self { owner, approver })
    }

    /// May use `/pending`, `/approve` and `/deny`.
    pub fn decides_any(self) -> bool {
        self.owner || self.approver
    }
}

/// What a person who may not use an owner's command hears.
pub(super) fn unknown(content: &str) -> String {
    let name = commands::split(content).map_or("", |(name, _)| name);
    format!("Unknown command /{name}. /help lists the commands.")
}

/// `/help` in a direct chat: everyone's commands, then the owner's to an owner, or the tool
/// call ones to an approver who is not an owner.
pub(super) fn help(deciding: Deciding) -> String {
    let everyones = commands::help_text("Commands:");
    if deciding.owner {
        return format!("{everyones}\n\n{}", commands::owner_help_text("Yours (here only):"));
    }
    if deciding.approver {
        return format!(
            "{everyones}\n\nYours (here only), for tool calls waiting for approval:\n\
             /pending: tool calls waiting for you\n\
             /approve <code> [chat]: let a waiting tool call run (with chat: that tool in that chat from now on)\n\
             /deny <code>: refuse a waiting tool call"
        );
    }
    everyones
}
