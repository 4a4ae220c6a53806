//! The owner's chat commands: what `switchboard pairing`, `approvals`, `users` and `cron` do
//! from a shell, from the owner's direct chat. Anyone else, and the owner in a group, is told
//! the command is unknown. Decisions go through [`crate::control::Control`], as the buttons'
//! and the console's do.

mod cron;
mod decide;
mod pending;
mod people;
mod spend;

use switchboard_channels::contract::commands;

pub(super) use self::cron::cron;
pub(super) use self::decide::decide;
pub(super) use self::pending::pending;
pub(super) use self::people::{level, users};
pub(super) use self::spend::spend;

/// What a person who may not use an owner's command hears.
pub(super) fn unknown(content: &str) -> String {
    let name = commands::split(content).map_or("", |(name, _)| name);
    format!("Unknown command /{name}. /help lists the commands.")
}

/// `/help` in the owner's direct chat: everyone's commands, then the owner's.
pub(super) fn help() -> String {
    format!("{}\n\n{}", commands::help_text("Commands:"), commands::owner_help_text("Yours (here only):"))
}
