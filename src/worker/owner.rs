//! The owner's chat commands (`/pending`, `/approve`, `/deny`): what `switchboard approvals`
//! does from a shell, from the owner's direct chat. Anyone else is told the command is unknown.

use chrono::Utc;
use switchboard_channels::contract::{InboundMessage, commands};

use super::Shared;
use crate::config::Identity;
use crate::store::StoreError;
use crate::store::approvals::{ApprovalStatus, DecideProblem, Verdict};
use crate::store::pairing::normalize_code;

/// Waiting calls `/pending` lists at most.
const PENDING_LIMIT: usize = 20;

/// What a person who may not use an owner's command hears.
pub(super) fn unknown(content: &str) -> String {
    let name = commands::split(content).map_or("", |(name, _)| name);
    format!("Unknown command /{name}. /help lists the commands.")
}

/// `/help` in the owner's direct chat: everyone's commands, then the owner's.
pub(super) fn help() -> String {
    format!("{}\n\n{}", commands::help_text("Commands:"), commands::owner_help_text("Yours (here only):"))
}

/// `/pending`: the tool calls waiting for an approver, newest first.
pub(super) async fn pending(shared: &Shared) -> Result<String, StoreError> {
    let now = Utc::now();
    let waiting: Vec<_> = shared
        .store
        .list_approvals(true, PENDING_LIMIT)
        .await?
        .into_iter()
        .filter(|approval| approval.status == ApprovalStatus::Pending && approval.expires_at > now)
        .collect();
    if waiting.is_empty() {
        return Ok("Nothing waits for your approval.".into());
    }
    let mut text = format!("Waiting for your approval ({}):", waiting.len());
    for approval in &waiting {
        let request = &approval.request;
        text.push_str(&format!(
            "\n{} {} asked by {} in {}:{}: {}",
            approval.code, request.tool, request.requested_by, request.channel, request.chat_id, request.arguments
        ));
    }
    text.push_str("\n/approve <code> [chat] or /deny <code>");
    Ok(text)
}

/// `/approve` and `/deny`: decides the approval `code` as the owner who wrote `msg`.
pub(super) async fn decide(
    shared: &Shared,
    msg: &InboundMessage,
    code: Option<&str>,
    verdict: Verdict,
) -> Result<String, StoreError> {
    let Some(code) = code.map(normalize_code).filter(|code| !code.is_empty()) else {
        return Ok("Which one? Give the code: /approve <code> or /deny <code> (/pending lists them).".into());
    };
    let owner = Identity::new(&msg.channel, &msg.sender.id).to_string();
    Ok(match shared.store.decide_approval(&code, verdict, &owner).await? {
        Ok(approval) => format!(
            "{code}: {} {} in {}:{}.",
            verdict.status().as_str(),
            approval.request.tool,
            approval.request.channel,
            approval.request.chat_id
        ),
        // The store's wording points at the shell; here the list is a command away.
        Err(DecideProblem::Unknown) => format!("Approval {code} is unknown; /pending lists the open ones."),
        Err(problem) => format!("Approval {code} {problem}."),
    })
}
