//! Decisions from the console: pairing requests approved or denied, tool calls allowed or
//! denied, and the list of tool approvals, waiting ones first.

use switchboard_channels::api::console::desk::{ApprovalDecision, ConsoleError};
use switchboard_channels::api::console::views::{ApprovalItem, Decided};

use super::{Console, failed};
use crate::store::StoreError;
use crate::store::approvals::{Approval, ApprovalStatus, DecideProblem, Verdict};
use crate::store::pairing::{CodeProblem, normalize_code};

/// Decisions the approvals list shows after the waiting calls.
const RECENT_DECISIONS: usize = 50;

pub(super) async fn pairing(
    console: &Console,
    channel: &str,
    code: &str,
    approve: bool,
    by: &str,
) -> Result<Decided, ConsoleError> {
    let code = normalize_code(code);
    let control = &console.control;
    // The operations tell the stranger.
    let decided = match approve {
        true => control.approve_pairing(channel, &code, by).await.map(|approved| {
            let who = name_or_id(&approved.sender_name, &approved.sender_id);
            ("approved", format!("{who} may now write to the bot."), approved.sender_id)
        }),
        false => control.deny_pairing(channel, &code, by).await.map(|denied| {
            let who = name_or_id(&denied.sender_name, &denied.sender_id);
            ("denied", format!("Denied {who}."), denied.sender_id)
        }),
    };
    match decided {
        Ok((outcome, message, _)) => Ok(Decided { outcome: outcome.into(), message }),
        Err(StoreError::PairingCode { problem: CodeProblem::Unknown, .. }) => {
            Err(ConsoleError::NotFound(format!("{channel} has no pairing request {code}")))
        }
        Err(StoreError::PairingCode { problem, .. }) => {
            Err(ConsoleError::NoLongerOpen(format!("This request is no longer open: the code {problem}.")))
        }
        Err(err) => Err(failed(err)),
    }
}

fn name_or_id(name: &str, id: &str) -> String {
    if name.is_empty() { id.to_owned() } else { name.to_owned() }
}

pub(super) async fn approvals(console: &Console) -> Result<Vec<ApprovalItem>, ConsoleError> {
    let waiting = console.store.list_approvals(true, usize::MAX).await.map_err(failed)?;
    let recent = console.store.list_approvals(false, RECENT_DECISIONS).await.map_err(failed)?;
    let decided = recent.into_iter().filter(|approval| approval.status != ApprovalStatus::Pending);
    Ok(waiting.into_iter().chain(decided).map(item).collect())
}

fn item(approval: Approval) -> ApprovalItem {
    let request = approval.request;
    // A wait that timed out while nobody was around to close it reads as what it is.
    let status = match approval.status {
        ApprovalStatus::Pending if approval.expires_at <= chrono::Utc::now() => "expired",
        status => status.as_str(),
    };
    ApprovalItem {
        code: approval.code,
        status: status.to_owned(),
        tool: request.tool,
        arguments: request.arguments,
        requested_by: request.requested_by,
        chat: format!("{}:{}", request.channel, request.chat_id),
        session_key: request.session_key,
        requested_at: approval.requested_at,
        expires_at: approval.expires_at,
        scope: approval.scope,
        decided_by: approval.decided_by,
        decided_at: approval.decided_at,
        reason: approval.reason,
    }
}

pub(super) async fn approval(
    console: &Console,
    code: &str,
    decision: ApprovalDecision,
    by: &str,
) -> Result<Decided, ConsoleError> {
    let code = normalize_code(code);
    let verdict = match decision {
        ApprovalDecision::AllowOnce => Verdict::AllowOnce,
        ApprovalDecision::AllowChat => Verdict::AllowChat,
        ApprovalDecision::Deny => Verdict::Deny,
    };
    match console.control.decide_approval(&code, verdict, by).await.map_err(failed)? {
        Ok(approval) => {
            let request = &approval.request;
            let chat = format!("{}:{}", request.channel, request.chat_id);
            let message = match verdict {
                Verdict::AllowOnce => format!("Allowed {} once in {chat}.", request.tool),
                Verdict::AllowChat => format!("Allowed {} in {chat}, now and later.", request.tool),
                Verdict::Deny => format!("Denied {} in {chat}.", request.tool),
            };
            Ok(Decided { outcome: verdict.status().as_str().to_owned(), message })
        }
        Err(DecideProblem::Unknown) => Err(ConsoleError::NotFound(format!("there is no approval {code}"))),
        Err(DecideProblem::Closed(status)) => {
            Err(ConsoleError::NoLongerOpen(format!("This request is no longer open (it is {}).", status.as_str())))
        }
    }
}
