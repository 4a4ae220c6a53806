//! `[approvals]`: a call of a listed tool, caused by someone who is not an approver, waits for
//! an approver's decision before it runs. The request is stored (so the CLI, and any process
//! of the deployment, can decide it), the person's chat is told that the answer waits for the
//! owner, and the approvers get the request in their direct chats (`ApprovalGate::recipients`).
//! The run's time limit stands still meanwhile ([`RunClock`]); `/stop` drops the wait and
//! closes the request as cancelled; a restart closes it as expired (the worker tells the
//! person). See docs/security.md.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use switchboard_channels::Bus;
use switchboard_channels::BusExt as _;
use switchboard_channels::contract::{Button, OutboundKind, OutboundMessage, TO_USER};
use switchboard_channels::control::ButtonAction;

use super::ToolContext;
use crate::config::{ApprovalsConfig, Identity, Level};
use crate::store::StoreError;
use crate::store::approvals::{Approval, ApprovalStatus, ApprovalStore, NewApproval};
use crate::store::heartbeat::{HeartbeatStore, OwnerChat};

/// How often a waiting call looks for a decision (made by any process, the CLI included).
const POLL: Duration = Duration::from_millis(250);

/// Longest argument text shown to an approver.
const MAX_SHOWN_ARGUMENTS: usize = 600;

/// What the gate found for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Run,
    /// Not run; the tool result to give the model.
    Declined(String),
}

/// Who must ask, for which tools, and how long a request waits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalSettings {
    pub tools: BTreeSet<String>,
    /// Empty: everyone at owner level decides.
    pub approvers: Vec<Identity>,
    pub timeout: Duration,
}

impl From<&ApprovalsConfig> for ApprovalSettings {
    fn from(config: &ApprovalsConfig) -> Self {
        Self {
            tools: config.tools.iter().cloned().collect(),
            approvers: config.approvers.iter().filter_map(|approver| approver.parse().ok()).collect(),
            timeout: config.timeout(),
        }
    }
}

pub struct ApprovalGate {
    approvals: Arc<dyn ApprovalStore>,
    /// Where the approvers' direct chats are on record.
    owner_chats: Arc<dyn HeartbeatStore>,
    bus: Arc<dyn Bus>,
    settings: ApprovalSettings,
}

impl ApprovalGate {
    pub fn new(
        approvals: Arc<dyn ApprovalStore>,
        owner_chats: Arc<dyn HeartbeatStore>,
        bus: Arc<dyn Bus>,
        settings: ApprovalSettings,
    ) -> Self {
        Self { approvals, owner_chats, bus, settings }
    }

    /// Whether the person a run acts for decides approvals themselves.
    fn is_approver(&self, ctx: &ToolContext) -> bool {
        if self.settings.approvers.is_empty() {
            return ctx.level == Level::Owner;
        }
        let acting = ctx.on_behalf_of.as_deref().and_then(|id| id.parse::<Identity>().ok());
        acting.is_some_and(|identity| self.settings.approvers.contains(&identity))
    }

    /// Runs the call at once, or waits for an approver; store failures decline it (a call that
    /// needs a yes never runs without one).
    pub async fn check(&self, tool: &str, arguments: &Value, ctx: &ToolContext) -> Gate {
        if !self.settings.tools.contains(tool) || self.is_approver(ctx) {
            return Gate::Run;
        }
        match self.approvals.chat_grant(&ctx.session_key, tool).await {
            Ok(true) => return Gate::Run,
            Ok(false) => {}
            Err(err) => return Gate::Declined(format!("the approval of {tool} could not be asked for: {err}")),
        }
        let request = NewApproval {
            run_id: ctx.run_id.clone(),
            session_key: ctx.session_key.to_string(),
            channel: ctx.channel.clone(),
            chat_id: ctx.chat_id.clone(),
            tool: tool.to_owned(),
            arguments: shown_arguments(arguments),
            requested_by: ctx.on_behalf_of.clone().unwrap_or_default(),
        };
        let approval = match self.approvals.request_approval(&request, self.settings.timeout).await {
            Ok(approval) => approval,
            Err(err) => return Gate::Declined(format!("the approval of {tool} could not be asked for: {err}")),
        };
        tracing::info!(code = %approval.code, %tool, session = %ctx.session_key, "a tool call waits for an approver");
        self.announce(&approval, ctx).await;
        let _still = ctx.clock.pause();
        let waiting = Waiting { approvals: Arc::clone(&self.approvals), code: approval.code.clone(), settled: false };
        waiting.outcome(&approval).await
    }

    /// Tells the person's chat that the answer waits, and the approvers what is asked.
    async fn announce(&self, approval: &Approval, ctx: &ToolContext) {
        let minutes = self.settings.timeout.as_secs().div_ceil(60);
        let waits = format!(
            "This needs the owner's approval first ({}); I will go on once they answer (within {minutes} min).",
            approval.request.tool
        );
        let chat = Place { thread_id: ctx.thread_id.clone(), ..Place::chat(&ctx.channel, &ctx.chat_id) };
        self.publish(chat, &approval.code, "waits", waits, Vec::new()).await;
        let recipients = match self.recipients(&ctx.agent).await {
            Ok(recipients) => recipients,
            Err(err) => {
                return tracing::warn!(%err, "cannot find the approvers' chats; decide with `switchboard approvals`");
            }
        };
        if recipients.is_empty() {
            tracing::warn!(
                code = %approval.code,
                "no approver to tell: no owner has written to the bot in a direct chat yet; decide with /approve, \
                 the console or `switchboard approvals`"
            );
        }
        let text = request_text(approval, ctx);
        for (identity, place) in recipients {
            let key = format!("to:{identity}");
            self.publish(place, &approval.code, &key, text.clone(), decision_buttons(&approval.code)).await;
        }
    }

    /// Who is asked, and where. Named approvers: each one's direct chat on record, else a
    /// direct message to the person (as a pairing notice reaches a named owner), since only
    /// owners' direct chats are on record. Without named approvers: every owner's direct chat
    /// on record.
    async fn recipients(&self, agent: &str) -> Result<Vec<(String, Place)>, StoreError> {
        let chats = self.owner_chats.owner_chats(agent).await?;
        let in_chat = |chat: &OwnerChat| (chat.identity.clone(), Place::chat(&chat.chat.channel, &chat.chat.chat_id));
        if self.settings.approvers.is_empty() {
            return Ok(chats.iter().map(in_chat).collect());
        }
        let recipients = self.settings.approvers.iter().map(|approver| {
            let identity = approver.to_string();
            match chats.iter().find(|chat| chat.identity == identity) {
                Some(chat) => in_chat(chat),
                None => (identity, Place::person(approver)),
            }
        });
        Ok(recipients.collect())
    }

    async fn publish(&self, place: Place, code: &str, what: &str, content: String, buttons: Vec<Vec<Button>>) {
        let mut metadata = Map::new();
        if place.to_user {
            metadata.insert(TO_USER.to_owned(), Value::Bool(true));
        }
        let msg = OutboundMessage {
            id: format!("approval:{code}:{what}"),
            channel: place.channel,
            chat_id: place.chat_id,
            thread_id: place.thread_id,
            content,
            kind: OutboundKind::Notice,
            buttons,
            metadata,
            ..OutboundMessage::default()
        };
        if let Err(err) = self.bus.publish_outbound(&msg).await {
            tracing::warn!(%err, code, "cannot send an approval message");
        }
    }
}

/// Where an approval message goes.
struct Place {
    channel: String,
    chat_id: String,
    thread_id: Option<String>,
    /// `chat_id` is a person's id: the adapter delivers to their direct chat ([`TO_USER`]).
    to_user: bool,
}

impl Place {
    fn chat(channel: &str, chat_id: &str) -> Self {
        Self { channel: channel.to_owned(), chat_id: chat_id.to_owned(), thread_id: None, to_user: false }
    }

    /// The direct chat of `person`, who may never have written there.
    fn person(person: &Identity) -> Self {
        Self { to_user: true, ..Self::chat(&person.channel, &person.sender_id) }
    }
}

/// An approver's buttons: Allow once, Allow for this chat, Deny.
fn decision_buttons(code: &str) -> Vec<Vec<Button>> {
    vec![vec![
        ButtonAction::ToolAllowOnce(code.to_owned()).button("Allow once"),
        ButtonAction::ToolAllowChat(code.to_owned()).button("Allow for this chat"),
        ButtonAction::ToolDeny(code.to_owned()).button("Deny"),
    ]]
}

/// A request being waited for; dropped before a decision (the run was stopped), it is closed
/// as cancelled.
struct Waiting {
    approvals: Arc<dyn ApprovalStore>,
    code: String,
    settled: bool,
}

impl Waiting {
    async fn outcome(mut self, approval: &Approval) -> Gate {
        let gate = self.decision(approval).await;
        self.settled = true;
        gate
    }

    /// Polls the store until the approval is decided or past its time.
    async fn decision(&self, approval: &Approval) -> Gate {
        let (tool, code) = (&approval.request.tool, &self.code);
        loop {
            tokio::time::sleep(POLL).await;
            let found = match self.approvals.approval(code).await {
                Ok(Some(found)) => found,
                Ok(None) => return Gate::Declined(format!("the approval of {tool} was lost")),
                Err(err) => {
                    tracing::warn!(%err, %code, "cannot read an approval; trying again");
                    continue;
                }
            };
            match found.status {
                ApprovalStatus::Allowed => return Gate::Run,
                ApprovalStatus::Pending if chrono::Utc::now() < found.expires_at => {}
                ApprovalStatus::Pending => {
                    let _ =
                        self.approvals.close_approval(code, ApprovalStatus::Expired, "nobody decided in time").await;
                    return Gate::Declined(format!(
                        "the owner did not answer in time, so {tool} did not run; tell the person it needs the \
                         owner's approval and they can ask again"
                    ));
                }
                status => {
                    let verb = if status == ApprovalStatus::Denied { "declined" } else { "could not approve" };
                    return Gate::Declined(format!(
                        "the owner {verb} this call, so {tool} did not run; tell the person and do not try to get \
                         around it"
                    ));
                }
            }
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let (approvals, code) = (Arc::clone(&self.approvals), std::mem::take(&mut self.code));
        // Dropped inside the runtime (the run's future); the close must outlive it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) =
                    approvals.close_approval(&code, ApprovalStatus::Cancelled, "the run was stopped").await
                {
                    tracing::warn!(%err, %code, "cannot close the approval of a stopped run");
                }
            });
        }
    }
}

/// What an approver reads.
fn request_text(approval: &Approval, ctx: &ToolContext) -> String {
    let request = &approval.request;
    let who = if ctx.sender_name.is_empty() { request.requested_by.clone() } else { ctx.sender_name.clone() };
    let place = if ctx.is_group { "in a group" } else { "in a direct chat" };
    format!(
        "Approval {code}: {who} ({by}) {place} ({channel}:{chat}) wants the agent to run {tool}:\n{args}\n\n\
         Reply /approve {code} (or /approve {code} chat: also later calls there) or /deny {code}.\n\
         From a shell: switchboard approvals allow {code} [--chat] | deny {code}",
        code = approval.code,
        by = request.requested_by,
        channel = request.channel,
        chat = request.chat_id,
        tool = request.tool,
        args = request.arguments,
    )
}

/// The arguments as an approver sees them: secrets redacted, cut to a readable length.
fn shown_arguments(arguments: &Value) -> String {
    let text = redact_tokens(&redacted(arguments).to_string());
    match text.char_indices().nth(MAX_SHOWN_ARGUMENTS) {
        Some((cut, _)) => format!("{}… ({} characters in all)", &text[..cut], text.chars().count()),
        None => text,
    }
}

/// Object keys whose values are never shown.
const SECRET_KEYS: [&str; 6] = ["token", "secret", "password", "passwd", "api_key", "authorization"];

fn redacted(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let lower = key.to_lowercase();
                    let secret = SECRET_KEYS.iter().any(|name| lower.contains(name));
                    (key.clone(), if secret { Value::String("[redacted]".into()) } else { redacted(value) })
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redacted).collect()),
        other => other.clone(),
    }
}

/// Key-shaped strings in free text (a command line): `sk-…`, `ghp_…`, `xox…-`, bearer tokens.
fn redact_tokens(text: &str) -> String {
    static PATTERN: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let pattern = PATTERN.get_or_init(|| {
        regex::Regex::new(r"(sk-[A-Za-z0-9_-]{12,}|gh[pousr]_[A-Za-z0-9]{12,}|xox[abpr]-[A-Za-z0-9-]{10,}|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{12,})")
            .ok()
    });
    match pattern {
        Some(pattern) => pattern.replace_all(text, "[redacted]").into_owned(),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_shown_without_secrets_and_cut() {
        let arguments = serde_json::json!({
            "command": "curl -H 'Authorization: Bearer abcdefghijklmnop123' https://x; echo sk-proj-Zq8wX3vB6nM1kL4p",
            "api_key": "plain-secret",
        });
        let shown = shown_arguments(&arguments);
        assert!(!shown.contains("abcdefghijklmnop123") && !shown.contains("Zq8wX3vB6nM1kL4p"), "{shown}");
        assert!(!shown.contains("plain-secret") && shown.contains("curl"), "{shown}");
        let long = shown_arguments(&serde_json::json!({"command": "x".repeat(5000)}));
        assert!(long.chars().count() < 700 && long.ends_with("characters in all)"), "{long}");
    }
}
