//! `/approve <code>` and `/deny <code>`: a tool call waiting for an approver, or a stranger's
//! pairing request on any channel. Both codes are eight characters of the same alphabet, so
//! the waiting calls are asked first, then the open pairing requests. Who may decide which is
//! what the buttons check: approvers the calls, owners the pairing requests.

use switchboard_channels::contract::InboundMessage;

use super::Deciding;
use crate::config::Identity;
use crate::control::{APPROVERS_ONLY, Control, OWNERS_ONLY};
use crate::store::StoreError;
use crate::store::approvals::{DecideProblem, Verdict};
use crate::store::pairing::normalize_code;

/// Decides `code` as the sender of `msg`, who may decide what `deciding` says.
pub(in crate::worker) async fn decide(
    control: &Control,
    msg: &InboundMessage,
    code: Option<&str>,
    verdict: Verdict,
    deciding: Deciding,
) -> Result<String, StoreError> {
    let Some(code) = code.map(normalize_code).filter(|code| !code.is_empty()) else {
        return Ok("Which one? Give the code: /approve <code> or /deny <code> (/pending lists them).".into());
    };
    let decider = Identity::new(&msg.channel, &msg.sender.id).to_string();
    if !deciding.approver {
        if control.store().approval(&code).await?.is_some() {
            tracing::warn!(%decider, %code, "a tool call's decision refused: not an approver");
            return Ok(APPROVERS_ONLY.into());
        }
        return decide_pairing(control, &code, verdict != Verdict::Deny, &decider, deciding.owner).await;
    }
    Ok(match control.decide_approval(&code, verdict, &decider).await? {
        Ok(approval) => format!(
            "{code}: {} {} in {}:{}.",
            verdict.status().as_str(),
            approval.request.tool,
            approval.request.channel,
            approval.request.chat_id
        ),
        Err(DecideProblem::Unknown) => {
            decide_pairing(control, &code, verdict != Verdict::Deny, &decider, deciding.owner).await?
        }
        Err(problem) => format!("Approval {code} {problem}."),
    })
}

/// The open pairing request with `code`, approved or denied by `decider` if they are an
/// owner; the stranger is told.
async fn decide_pairing(
    control: &Control,
    code: &str,
    approve: bool,
    decider: &str,
    owner: bool,
) -> Result<String, StoreError> {
    let Some(request) = control.open_pairing(code).await? else {
        return Ok(format!("Nothing waits under {code}; /pending lists what does."));
    };
    if !owner {
        tracing::warn!(%decider, %code, "a pairing decision refused: not an owner");
        return Ok(OWNERS_ONLY.into());
    }
    let decided = match approve {
        true => control.approve_pairing(&request.channel, code, decider).await.map(|approved| {
            let who = someone(&approved.sender_name, &approved.channel, &approved.sender_id);
            format!("Approved {who} as {}. I told them they can write to me now.", approved.level)
        }),
        false => control.deny_pairing(&request.channel, code, decider).await.map(|denied| {
            let who = someone(&denied.sender_name, &denied.channel, &denied.sender_id);
            format!("Turned {who} away. I told them, and they get no new code for a day.")
        }),
    };
    match decided {
        Ok(text) => Ok(text),
        // Expired or decided elsewhere since it was found.
        Err(StoreError::PairingCode { problem, .. }) => Ok(format!("Pairing code {code} {problem}.")),
        Err(err) => Err(err),
    }
}

/// `Ann (telegram 777)`, or `telegram 777` without a name.
fn someone(name: &str, channel: &str, sender_id: &str) -> String {
    match name {
        "" => format!("{channel} {sender_id}"),
        name => format!("{name} ({channel} {sender_id})"),
    }
}
