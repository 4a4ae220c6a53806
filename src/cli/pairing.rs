//! `switchboard pairing …`: approve or deny the codes strangers get in direct messages, list
//! pending and approved senders, revoke an approval, or approve a sender by id.

use std::fmt;
use std::io::Write as _;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use clap::Subcommand;

use super::CliError;
use crate::config::Config;
use crate::config::Level;
use crate::store::pairing::{PairingAdmin, PairingDecision, PairingEntry, PairingState};

/// Decisions `pairing list --all` shows at most.
const LISTED_DECISIONS: usize = 100;

#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// List senders waiting with a valid code, and approved senders
    List {
        /// telegram, discord or matrix (default: all)
        channel: Option<PairingChannel>,
        /// Also the decisions of the last 30 days: approved or denied, by whom, when
        #[arg(long)]
        all: bool,
    },
    /// Approve the sender a code was given to, so they may write to the bot directly
    Approve {
        /// telegram, discord or matrix
        channel: PairingChannel,
        /// The code the sender was shown (case, spaces and dashes do not matter)
        code: String,
    },
    /// Refuse the sender a code was given to; they get no new code for a day
    Deny {
        /// telegram, discord or matrix
        channel: PairingChannel,
        /// The code the sender was shown (case, spaces and dashes do not matter)
        code: String,
    },
    /// Withdraw a sender's approval
    Revoke {
        /// telegram, discord or matrix
        channel: PairingChannel,
        /// The sender's id on the platform
        sender_id: String,
    },
    /// Approve a sender by id, without a code
    Add {
        /// telegram, discord or matrix
        channel: PairingChannel,
        /// The sender's id on the platform
        sender_id: String,
        /// A name to show in `pairing list`
        #[arg(long, default_value = "")]
        name: String,
    },
}

/// A channel with direct messages to pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairingChannel {
    Telegram,
    Discord,
    Matrix,
}

impl PairingChannel {
    pub fn as_str(self) -> &'static str {
        match self {
            PairingChannel::Telegram => "telegram",
            PairingChannel::Discord => "discord",
            PairingChannel::Matrix => "matrix",
        }
    }
}

impl fmt::Display for PairingChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PairingChannel {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "telegram" => Ok(PairingChannel::Telegram),
            "discord" => Ok(PairingChannel::Discord),
            "matrix" => Ok(PairingChannel::Matrix),
            other => Err(format!("{other:?} has no direct-message pairing; use telegram, discord or matrix")),
        }
    }
}

/// Runs one `pairing` command against the configured store, printing the result on stdout.
pub(super) async fn run(config: &Config, command: PairingCommand) -> Result<(), CliError> {
    let store = crate::store::open(&config.store).await?;
    let result = execute(&*store, command, config.users.approved_level).await;
    store.close().await;
    std::io::stdout().lock().write_all(result?.as_bytes())?;
    Ok(())
}

/// `level`: what an approved sender gets (`users.approved_level`).
async fn execute(store: &dyn PairingAdmin, command: PairingCommand, level: Level) -> Result<String, CliError> {
    Ok(match command {
        PairingCommand::List { channel, all } => {
            let channel = channel.map(PairingChannel::as_str);
            let mut text = format_list(&store.list_pairings(channel).await?);
            if all {
                text.push_str(&format_decisions(&store.pairing_decisions(channel, LISTED_DECISIONS).await?));
            }
            text
        }
        PairingCommand::Approve { channel, code } => {
            let approved = store.approve_pairing(channel.as_str(), &code, level, "cli").await?;
            let sender = describe_sender(channel.as_str(), &approved.sender_id, &approved.sender_name);
            format!("approved {sender} as {}\n", approved.level)
        }
        PairingCommand::Deny { channel, code } => {
            let denied = store.deny_pairing(channel.as_str(), &code, "cli").await?;
            let sender = describe_sender(channel.as_str(), &denied.sender_id, &denied.sender_name);
            format!("denied {sender}; they get no new code for a day\n")
        }
        PairingCommand::Revoke { channel, sender_id } => {
            let sender = describe_sender(channel.as_str(), &sender_id, "");
            if store.revoke_pairing(channel.as_str(), &sender_id).await? {
                // Revoking closes direct messages; the level is the users table's business.
                format!(
                    "revoked {sender}\nTheir level is unchanged; `switchboard users set-level {channel}:{sender_id} \
                     guest` lowers it.\n"
                )
            } else {
                format!("{sender} was not approved; nothing changed\n")
            }
        }
        PairingCommand::Add { channel, sender_id, name } => {
            let sender = describe_sender(channel.as_str(), &sender_id, &name);
            let approval = store.approve_sender(channel.as_str(), &sender_id, &name, level).await?;
            if approval.added {
                format!("approved {sender} as {}\n", approval.level)
            } else {
                format!("{sender} was approved already; level {}\n", approval.level)
            }
        }
    })
}

/// "telegram user 123 (alice)", or without the parentheses when the name is unknown.
fn describe_sender(channel: &str, sender_id: &str, name: &str) -> String {
    if name.is_empty() { format!("{channel} user {sender_id}") } else { format!("{channel} user {sender_id} ({name})") }
}

fn format_list(entries: &[PairingEntry]) -> String {
    let mut text = format!("{:<9} {:<20} {:<20} {:<9} {}\n", "CHANNEL", "SENDER", "NAME", "CODE", "EXPIRES/APPROVED");
    for entry in entries {
        let (code, when) = match &entry.state {
            PairingState::Pending { code, expires_at } => {
                (code.as_str(), format!("expires {}", format_time(*expires_at)))
            }
            PairingState::Approved { approved_at } => ("approved", format!("approved {}", format_time(*approved_at))),
        };
        text.push_str(&format!(
            "{:<9} {:<20} {:<20} {:<9} {when}\n",
            entry.channel, entry.sender_id, entry.sender_name, code
        ));
    }
    if entries.is_empty() {
        text.push_str("(no pending or approved senders)\n");
    }
    text
}

/// The decisions, newest first, after a blank line.
fn format_decisions(decisions: &[PairingDecision]) -> String {
    let mut text = format!(
        "\n{:<9} {:<20} {:<20} {:<9} {:<9} {:<20} {}\n",
        "CHANNEL", "SENDER", "NAME", "CODE", "DECISION", "BY", "DECIDED"
    );
    for decision in decisions {
        text.push_str(&format!(
            "{:<9} {:<20} {:<20} {:<9} {:<9} {:<20} {}\n",
            decision.channel,
            decision.sender_id,
            decision.sender_name,
            decision.code,
            decision.decision,
            decision.decided_by,
            format_time(decision.decided_at)
        ));
    }
    if decisions.is_empty() {
        text.push_str("(no decisions in the last 30 days)\n");
    }
    text
}

fn format_time(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%d %H:%M UTC").to_string()
}
