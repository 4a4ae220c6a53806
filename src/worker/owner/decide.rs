//! `/approve <code>` and `/deny <code>`: a tool call waiting for an approver, or a stranger's
//! pairing request on any channel. Both codes are eight characters of the same alphabet, so
//! the waiting calls are asked first, then the open pairing requests.

use switchboard_channels::contract::InboundMessage;

use crate::config::Identity;
use crate::control::Control;
use crate::store::StoreError;
use crate::store::approvals::{DecideProblem, Verdict};
use crate::store::pairing::normalize_code;

/// Decides `code` as the owner who wrote `msg`.
pub(in crate::worker) async fn decide(
    control: &Control,
    msg: &InboundMessage,
    code: Option<&str>,
    verdict: Verdict,
) -> Result<String, StoreError> {
    let Some(code) = code.map(normalize_code).filter(|code| !code.is_empty()) else {
        return Ok("Which one? Give the code: /approve <code> or /deny <code> (/pending lists them).".into());
    };
    let owner = Identity::new(&msg.channel, &msg.sender.id).to_string();
    Ok(match control.decide_approval(&code, verdict, &owner).await? {
        Ok(approval) => format!(
            "{code}: {} {} in {}:{}.",
            verdict.status().as_str(),
            approval.request.tool,
            approval.request.channel,
            approval.request.chat_id
        ),
        Err(DecideProblem::Unknown) => decide_pairing(control, &code, verdict != Verdict::Deny, &owner).await?,
        Err(problem) => format!("Approval {code} {problem}."),
    })
}

/// The open pairing request with `code`, approved or denied; the stranger is told.
async fn decide_pairing(control: &Control, code: &str, approve: bool, owner: &str) -> Result<String, StoreError> {
    let Some(request) = control.open_pairing(code).await? else {
        return Ok(format!("Nothing waits under {code}; /pending lists what does."));
    };
    let decided = match approve {
        true => control.approve_pairing(&request.channel, code, owner).await.map(|approved| {
            let who = someone(&approved.sender_name, &approved.channel, &approved.sender_id);
            format!("Approved {who} as {}. I told them they can write to me now.", approved.level)
        }),
        false => control.deny_pairing(&request.channel, code, owner).await.map(|denied| {
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
