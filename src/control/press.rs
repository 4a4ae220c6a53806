//! What a button press decides: checked against who may decide it, then done by the owner's
//! operations, with what the presser is shown and what the message then says.

use switchboard_channels::control::{ButtonAction, Press, PressAnswer};

use super::CronChange;
use super::desk::Desk;
use crate::config::Identity;
use crate::store::StoreError;
use crate::store::approvals::Verdict;

const NOT_MINE: &str = "This button is not mine.";
/// What someone who may not decide a pairing request or a cron job is told (by a button or a
/// command alike).
pub const OWNERS_ONLY: &str = "Only the owner can decide this.";
/// What someone who may not decide a tool call is told.
pub const APPROVERS_ONLY: &str = "Only an approver can decide this.";
const NO_LONGER_OPEN: &str = "This request is no longer open.";

/// Who pressed, as decisions record and outcome lines show them.
struct Presser {
    identity: Identity,
    name: String,
}

impl Presser {
    /// `Ann (telegram:42)`.
    fn signed(&self) -> String {
        if self.name.is_empty() { self.identity.to_string() } else { format!("{} ({})", self.name, self.identity) }
    }
}

impl Desk {
    /// Decides `press` if the presser may; `Err` only when the store failed.
    pub(super) async fn decide(&self, press: &Press) -> Result<PressAnswer, StoreError> {
        let Some(action) = ButtonAction::parse(&press.data) else {
            tracing::info!(channel = %press.channel, presser = %press.presser.id, "a press of a button not made here");
            return Ok(PressAnswer::toast(NOT_MINE));
        };
        let presser =
            Presser { identity: Identity::new(&press.channel, &press.presser.id), name: press.presser.name.clone() };
        if let Some(refusal) = self.refusal(&action, &presser).await? {
            let verb = press.data.split_once(':').map_or("", |(verb, _)| verb);
            tracing::warn!(presser = %presser.identity, name = %presser.name, verb, "button press refused: not allowed to decide");
            return Ok(PressAnswer::toast(refusal));
        }
        match action {
            ButtonAction::PairingApprove(code) => self.decide_pairing(&press.channel, &code, true, &presser).await,
            ButtonAction::PairingDeny(code) => self.decide_pairing(&press.channel, &code, false, &presser).await,
            ButtonAction::ToolAllowOnce(code) => self.decide_tool(&code, Verdict::AllowOnce, &presser).await,
            ButtonAction::ToolAllowChat(code) => self.decide_tool(&code, Verdict::AllowChat, &presser).await,
            ButtonAction::ToolDeny(code) => self.decide_tool(&code, Verdict::Deny, &presser).await,
            ButtonAction::CronPause(id) => self.change_cron(self.control.pause_cron(&id).await?, &presser),
            ButtonAction::CronResume(id) => self.change_cron(self.control.resume_cron(&id).await?, &presser),
            ButtonAction::CronDelete(id) => self.change_cron(self.control.delete_cron(&id).await?, &presser),
        }
    }

    /// Why the presser may not decide `action`, if they may not.
    async fn refusal(&self, action: &ButtonAction, presser: &Presser) -> Result<Option<&'static str>, StoreError> {
        let (store, deciders) = (self.control.store().as_ref(), self.control.deciders());
        let tool = matches!(
            action,
            ButtonAction::ToolAllowOnce(_) | ButtonAction::ToolAllowChat(_) | ButtonAction::ToolDeny(_)
        );
        Ok(if tool {
            (!deciders.is_approver(store, &presser.identity, &presser.name).await?).then_some(APPROVERS_ONLY)
        } else {
            (!deciders.is_owner(store, &presser.identity, &presser.name).await?).then_some(OWNERS_ONLY)
        })
    }

    async fn decide_pairing(
        &self,
        channel: &str,
        code: &str,
        approve: bool,
        presser: &Presser,
    ) -> Result<PressAnswer, StoreError> {
        let by = presser.identity.to_string();
        let decided = if approve {
            self.control.approve_pairing(channel, code, &by).await.map(drop)
        } else {
            self.control.deny_pairing(channel, code, &by).await.map(drop)
        };
        match decided {
            Ok(()) if approve => Ok(PressAnswer::settled("Approved.", format!("✅ Approved by {}.", presser.signed()))),
            Ok(()) => Ok(PressAnswer::settled("Denied.", format!("❌ Denied by {}.", presser.signed()))),
            // Expired, decided already (by a button, a command or the shell), or unknown.
            Err(StoreError::PairingCode { .. }) => Ok(no_longer_open()),
            Err(err) => Err(err),
        }
    }

    async fn decide_tool(&self, code: &str, verdict: Verdict, presser: &Presser) -> Result<PressAnswer, StoreError> {
        let by = presser.identity.to_string();
        if self.control.decide_approval(code, verdict, &by).await?.is_err() {
            return Ok(no_longer_open());
        }
        let (toast, done) = match verdict {
            Verdict::AllowOnce => ("Allowed once.", "✅ Allowed once"),
            Verdict::AllowChat => ("Allowed for this chat.", "✅ Allowed for this chat"),
            Verdict::Deny => ("Denied.", "❌ Denied"),
        };
        Ok(PressAnswer::settled(toast, format!("{done} by {}.", presser.signed())))
    }

    fn change_cron(&self, change: CronChange, presser: &Presser) -> Result<PressAnswer, StoreError> {
        let by = presser.signed();
        Ok(match change {
            CronChange::Paused => PressAnswer::settled("Paused.", format!("⏸ Paused by {by}.")),
            CronChange::Resumed(Some(next)) => {
                PressAnswer::settled("Resumed.", format!("▶️ Resumed by {by}; next run {}.", self.local_time(next)))
            }
            CronChange::Resumed(None) => {
                PressAnswer::settled("Resumed.", format!("▶️ Resumed by {by}; its schedule has no run left."))
            }
            CronChange::Deleted => PressAnswer::settled("Deleted.", format!("🗑 Deleted by {by}.")),
            CronChange::Gone => PressAnswer::settled("That job is gone.", "That job is gone."),
        })
    }
}

/// A request decided elsewhere, expired, or from before a restart that forgot it.
fn no_longer_open() -> PressAnswer {
    PressAnswer::settled(NO_LONGER_OPEN, "No longer open.")
}
