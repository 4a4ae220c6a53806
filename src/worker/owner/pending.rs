//! `/pending`: the strangers asking to pair (shown to owners) and the tool calls waiting for an
//! approver (shown to approvers).

use chrono::{DateTime, Utc};

use super::Deciding;
use crate::control::local_time;
use crate::store::StoreError;
use crate::store::approvals::{Approval, ApprovalStatus};
use crate::store::pairing::{PairingEntry, PairingState};
use crate::worker::TurnRunner;

/// Waiting calls, and pairing requests, listed at most.
const PENDING_LIMIT: usize = 20;

/// `/pending`: pairing requests (soonest to expire first) to an owner, then tool calls (newest
/// first) to an approver.
pub(in crate::worker) async fn pending(turns: &TurnRunner, deciding: Deciding) -> Result<String, StoreError> {
    let now = Utc::now();
    let pairings = match deciding.owner {
        true => open_pairings(turns, now).await?,
        false => Vec::new(),
    };
    let calls = match deciding.approver {
        true => waiting_calls(turns, now).await?,
        false => Vec::new(),
    };
    if pairings.is_empty() && calls.is_empty() {
        return Ok("Nothing waits for you.".into());
    }
    let mut text = String::new();
    if !pairings.is_empty() {
        text.push_str(&format!("Asking to talk to me ({}):", pairings.len()));
        for entry in pairings.iter().take(PENDING_LIMIT) {
            text.push_str(&format!("\n{}", pairing_line(turns, entry, now)));
        }
        text.push_str(&more(pairings.len()));
    }
    if !calls.is_empty() {
        let gap = if text.is_empty() { "" } else { "\n\n" };
        text.push_str(&format!("{gap}Waiting for your approval ({}):", calls.len()));
        for approval in &calls {
            let request = &approval.request;
            text.push_str(&format!(
                "\n{} {} asked by {} in {}:{}: {}",
                approval.code, request.tool, request.requested_by, request.channel, request.chat_id, request.arguments
            ));
        }
    }
    text.push_str("\n\n/approve <code> or /deny <code>");
    if !calls.is_empty() {
        text.push_str(" (/approve <code> chat: that tool in that chat from now on, without asking)");
    }
    Ok(text)
}

/// The strangers' requests still open at `now`.
async fn open_pairings(turns: &TurnRunner, now: DateTime<Utc>) -> Result<Vec<PairingEntry>, StoreError> {
    let entries = turns.control.store().list_pairings(None).await?.into_iter();
    Ok(entries
        .filter(|entry| matches!(entry.state, PairingState::Pending { expires_at, .. } if expires_at > now))
        .collect())
}

/// The newest tool calls still waiting at `now`.
async fn waiting_calls(turns: &TurnRunner, now: DateTime<Utc>) -> Result<Vec<Approval>, StoreError> {
    let approvals = turns.store.list_approvals(true, PENDING_LIMIT).await?.into_iter();
    Ok(approvals.filter(|approval| approval.status == ApprovalStatus::Pending && approval.expires_at > now).collect())
}

/// `ABCD2345 Ann (telegram 777), expires 14:05 CET`, in the owner's time zone.
fn pairing_line(turns: &TurnRunner, entry: &PairingEntry, now: DateTime<Utc>) -> String {
    let PairingState::Pending { code, expires_at } = &entry.state else { return String::new() };
    let until = local_time(*expires_at, &turns.settings.prompt.timezone, now);
    let who = match entry.sender_name.as_str() {
        "" => format!("{} {}", entry.channel, entry.sender_id),
        name => format!("{name} ({} {})", entry.channel, entry.sender_id),
    };
    format!("{code} {who}, expires {until}")
}

fn more(count: usize) -> String {
    match count.checked_sub(PENDING_LIMIT) {
        Some(left) if left > 0 => format!("\n…and {left} more: `switchboard pairing list` shows them all."),
        _ => String::new(),
    }
}
