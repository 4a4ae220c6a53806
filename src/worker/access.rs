//! Who sent a message and what they may do: the user behind the sender, the level they run
//! with here (their own, raised by a configured group they write in), the tools offered to the
//! model, and the monthly budget checks (theirs and the group's pool). Runs after the run is
//! claimed, so a redelivered message that already has its answer is never checked (or charged)
//! again.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use switchboard_channels::contract::{InboundKind, InboundMessage, Usage};

use crate::agent::Agent;
use crate::config::{Identity, Level};
use crate::store::users::{Billing, User};
use crate::store::{Store, StoreError};
use crate::tools::ToolFilter;
use crate::users::{AccessPolicy, GroupPlace, GroupRule, month_key, next_month_start};

/// The metadata key the Discord channel puts a server message's guild id under.
const DISCORD_GUILD_ID: &str = "guild_id";

/// What the sender of a message may do now.
pub(super) enum Access {
    /// Run the turn offering `tools` to a sender of `level`; add its usage to `billing`'s month.
    Allowed { tools: ToolFilter, level: Level, billing: Option<Billing> },
    /// The sender's budget (or their group's) for this month is used up: answer with
    /// `notice`, call no model.
    OverBudget { notice: String },
    /// The input guard refused the message (`[guard] mode = "block"`): answer with `notice`,
    /// call no model.
    Blocked { notice: String },
}

/// A person as they stand in the chat a message came from.
pub(super) struct Standing {
    pub user: User,
    /// Their own level (a configured owner's is owner).
    pub own_level: Level,
    /// What they run with here: `own_level`, raised by the group's.
    pub level: Level,
    /// The configured group the message was written in.
    pub group: Option<GroupRule>,
}

/// Who people are and what they may do: the access policy in force (read once, so one
/// decision sees one policy) and the store of users.
pub(super) struct People<'a> {
    pub policy: Arc<AccessPolicy>,
    pub store: &'a dyn Store,
}

impl People<'_> {
    /// Resolves the sender to a user (created on first sight) and decides.
    pub async fn admit(&self, agent: &Agent, msg: &InboundMessage) -> Result<Access, StoreError> {
        let policy = &self.policy;
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
                    let tools = policy.tool_filter(Level::Owner, tool_names.iter().map(String::as_str));
                    return Ok(Access::Allowed { tools, level: Level::Owner, billing: None });
                }
            },
        };
        let standing = self.stand(msg, &identity, name).await?;
        let Standing { user, level, group, .. } = standing;
        let now = policy.now();
        // Where `target = "owner"` heartbeats go: an owner's direct chats, never a group.
        if msg.kind == InboundKind::User && level == Level::Owner && !msg.is_group {
            self.store.record_owner_chat(&agent.settings().name, &identity, &msg.chat(), now).await?;
        }
        let month = month_key(now);
        tracing::debug!(user = %user.id, %level, %month, group = group.as_ref().map(|g| g.key.as_str()), "sender resolved");
        if let Some(budget) = policy.budget(level, &user) {
            let used = tokens(self.store.monthly_usage(user.id, &month).await?);
            if used >= budget {
                tracing::info!(user = %user.id, used, budget, "monthly token budget used up; not calling the model");
                return Ok(Access::OverBudget { notice: over_budget_notice(budget, now) });
            }
        }
        if let Some(group) = &group
            && let Some(budget) = group.budget
        {
            let used = tokens(self.store.group_usage(&group.key, &month).await?);
            if used >= budget {
                tracing::info!(group = %group.key, used, budget, "the group's monthly token budget is used up; not calling the model");
                return Ok(Access::OverBudget { notice: group_over_budget_notice(budget, now) });
            }
        }
        let tools = policy.tool_filter(level, tool_names.iter().map(String::as_str));
        let billing = Billing { identity, month, group: group.map(|group| group.key) };
        Ok(Access::Allowed { tools, level, billing: Some(billing) })
    }

    /// Whose month a model call made for `msg` outside its turn (`/compact`'s) counts in: the
    /// sender (or the person a system message acts for) and the group they write in, as
    /// [`People::admit`] bills a turn; `None` for switchboard's own messages.
    pub async fn billing_for(&self, msg: &InboundMessage) -> Result<Option<Billing>, StoreError> {
        let (identity, name) = match msg.kind {
            InboundKind::User => (Identity::new(&msg.channel, &msg.sender.id), msg.sender.name.as_str()),
            InboundKind::System => match on_behalf_of(msg) {
                Some(identity) => (identity, ""),
                None => return Ok(None),
            },
        };
        let group = self.stand(msg, &identity, name).await?.group;
        let month = month_key(self.policy.now());
        Ok(Some(Billing { identity, month, group: group.map(|group| group.key) }))
    }

    /// The user behind `identity` (created on first sight) and the level they run with for
    /// `msg`. Only what people write in a group takes the group's settings: switchboard's own
    /// messages for a person (their cron jobs, sub-agent results) run at the person's own level.
    pub async fn stand(&self, msg: &InboundMessage, identity: &Identity, name: &str) -> Result<Standing, StoreError> {
        let policy = &self.policy;
        let user = self.store.resolve_user(identity, name, policy.new_user_level(identity)).await?;
        let own_level = policy.effective_level(identity, &user);
        let group = (msg.kind == InboundKind::User).then(|| self.group_of(msg)).flatten();
        let level = policy.level_in(own_level, group.as_ref());
        Ok(Standing { user, own_level, level, group })
    }

    /// The configured group a person's message was written in, if any.
    pub fn group_of(&self, msg: &InboundMessage) -> Option<GroupRule> {
        if !msg.is_group {
            return None;
        }
        let guild_id = msg.metadata.get(DISCORD_GUILD_ID).and_then(serde_json::Value::as_str);
        let place = GroupPlace { channel: &msg.channel, chat_id: &msg.chat_id, guild_id };
        self.policy.group(place).cloned()
    }

    /// The sender's level here (a group's raises it), for commands that need one (`/stop` in a
    /// group). System messages act as owner, like their runs.
    pub async fn level_here(&self, msg: &InboundMessage) -> Result<Level, StoreError> {
        if msg.kind == InboundKind::System {
            return Ok(Level::Owner);
        }
        let identity = Identity::new(&msg.channel, &msg.sender.id);
        Ok(self.stand(msg, &identity, &msg.sender.name).await?.level)
    }

    /// The sender's own level, whatever group they write in: what `[rate_limits]` go by, as the
    /// limiter remembers a sender's level across their chats.
    pub async fn own_level(&self, msg: &InboundMessage) -> Result<Level, StoreError> {
        if msg.kind == InboundKind::System {
            return Ok(Level::Owner);
        }
        self.level_of(&Identity::new(&msg.channel, &msg.sender.id), &msg.sender.name).await
    }

    /// The effective level of `identity` (named `name` when first seen), whatever group.
    pub async fn level_of(&self, identity: &Identity, name: &str) -> Result<Level, StoreError> {
        let user = self.store.resolve_user(identity, name, self.policy.new_user_level(identity)).await?;
        Ok(self.policy.effective_level(identity, &user))
    }
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

/// Input and output tokens together, as budgets count them.
pub(super) fn tokens(usage: Usage) -> u64 {
    usage.input_tokens.saturating_add(usage.output_tokens)
}

/// The polite answer to a user whose allowance is used up.
fn over_budget_notice(budget: u64, now: DateTime<Utc>) -> String {
    format!("You have used this month's allowance ({budget} tokens). It resets on {} (UTC).", reset_day(now))
}

/// The answer in a group whose shared allowance is used up.
fn group_over_budget_notice(budget: u64, now: DateTime<Utc>) -> String {
    format!(
        "This group has used its shared allowance for this month ({budget} tokens). It resets on {} (UTC).",
        reset_day(now)
    )
}

/// When the allowances of the month `now` falls in reset: "1 February 2025".
pub(super) fn reset_day(now: DateTime<Utc>) -> String {
    next_month_start(now).format("%-d %B %Y").to_string()
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
        assert_eq!(
            group_over_budget_notice(500_000, now),
            "This group has used its shared allowance for this month (500000 tokens). It resets on 1 January \
             2026 (UTC)."
        );
    }
}
