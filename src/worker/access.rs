//! Who sent a message and what they may do: the user behind the sender, the tools offered to
//! the model, and the monthly budget check. Runs after the run is claimed, so a redelivered
//! message that already has its answer is never checked (or charged) again.

use chrono::{DateTime, Utc};
use switchboard_channels::contract::{InboundKind, InboundMessage};

use super::Shared;
use crate::agent::Agent;
use crate::config::{Identity, Level};
use crate::store::StoreError;
use crate::store::users::Billing;
use crate::tools::ToolFilter;
use crate::users::{month_key, next_month_start};

/// What the sender of a message may do now.
pub(super) enum Access {
    /// Run the turn offering `tools` to a sender of `level`; add its usage to `billing`'s month.
    Allowed { tools: ToolFilter, level: Level, billing: Option<Billing> },
    /// The sender's budget for this month is used up: answer with `notice`, call no model.
    OverBudget { notice: String },
    /// The input guard refused the message (`[guard] mode = "block"`): answer with `notice`,
    /// call no model.
    Blocked { notice: String },
}

/// Resolves the sender to a user (created on first sight) and decides.
pub(super) async fn admit(shared: &Shared, agent: &Agent, msg: &InboundMessage) -> Result<Access, StoreError> {
    let policy = &shared.settings.access;
    // The agent's registry holds only its allowlisted tools, so this is the intersection of
    // the allowlist and what the sender's level may use.
    let tool_names = agent.tool_names();
    let (identity, name) = match msg.kind {
        InboundKind::User => (Identity::new(&msg.channel, &msg.sender.id), msg.sender.name.as_str()),
        // Made by switchboard itself (cron prompts, heartbeats, sub-agent results). One made
        // for a person (their cron job, their sub-agent) gets that person's tools and budget,
        // read now, so a job cannot do more than its creator may today. The others were set
        // up by the operator: run as owner, count against no one. Adapters only ever publish
        // `user` messages, so no person can choose this.
        InboundKind::System => match on_behalf_of(msg) {
            Some(identity) => (identity, ""),
            None => {
                let tools = policy.tool_filter(Level::Owner, tool_names);
                return Ok(Access::Allowed { tools, level: Level::Owner, billing: None });
            }
        },
    };
    let new_level = policy.new_user_level(&identity);
    let user = shared.store.resolve_user(&identity, name, new_level).await?;
    let level = policy.effective_level(&identity, &user);
    let now = policy.now();
    // Where `target = "owner"` heartbeats go: an owner's direct chats, never a group.
    if msg.kind == InboundKind::User && level == Level::Owner && !msg.is_group {
        shared.store.record_owner_chat(&agent.settings().name, &identity.to_string(), &msg.chat(), now).await?;
    }
    let month = month_key(now);
    tracing::debug!(user = %user.id, %level, %month, "sender resolved");
    if let Some(budget) = policy.budget(level, &user) {
        let used = shared.store.monthly_usage(user.id, &month).await?;
        let used = used.input_tokens.saturating_add(used.output_tokens);
        if used >= budget {
            tracing::info!(user = %user.id, used, budget, "monthly token budget used up; not calling the model");
            return Ok(Access::OverBudget { notice: over_budget_notice(budget, now) });
        }
    }
    let tools = policy.tool_filter(level, tool_names);
    Ok(Access::Allowed { tools, level, billing: Some(Billing { identity, month }) })
}

/// The person a system message acts for (`metadata.on_behalf_of`), if it names a valid one.
fn on_behalf_of(msg: &InboundMessage) -> Option<Identity> {
    let text = msg.on_behalf_of()?;
    match text.parse() {
        Ok(identity) => Some(identity),
        Err(err) => {
            // Only switchboard writes this field; a bad value is a bug, and acting as owner on
            // it would turn the bug into a privilege, so run as a guest instead.
            tracing::warn!(id = %msg.id, value = text, %err, "a system message names an invalid person; running it as a guest");
            Some(Identity::new("invalid", text))
        }
    }
}

/// The sender's level, for commands that need one (`/stop` in a group). System messages act
/// as owner, like their runs.
pub(super) async fn level(shared: &Shared, msg: &InboundMessage) -> Result<Level, StoreError> {
    if msg.kind == InboundKind::System {
        return Ok(Level::Owner);
    }
    let policy = &shared.settings.access;
    let identity = Identity::new(&msg.channel, &msg.sender.id);
    let user = shared.store.resolve_user(&identity, &msg.sender.name, policy.new_user_level(&identity)).await?;
    Ok(policy.effective_level(&identity, &user))
}

/// The polite answer to a user whose allowance is used up.
fn over_budget_notice(budget: u64, now: DateTime<Utc>) -> String {
    let resets = next_month_start(now).format("%-d %B %Y");
    format!("You have used this month's allowance ({budget} tokens). It resets on {resets} (UTC).")
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn the_notice_says_how_much_and_until_when() {
        let now = Utc.with_ymd_and_hms(2025, 12, 14, 9, 30, 0).unwrap();
        assert_eq!(
            over_budget_notice(20_000, now),
            "You have used this month's allowance (20000 tokens). It resets on 1 January 2026 (UTC)."
        );
    }
}
