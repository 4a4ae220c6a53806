//! `/usage`: what a person may still use this month, answered without a model call (and,
//! like every command, counted against no budget or rate limit).

use chrono::{DateTime, Utc};
use switchboard_channels::contract::InboundMessage;

use super::access::{self, People, Standing};
use crate::config::{Identity, Level};
use crate::store::StoreError;
use crate::users::month_key;

/// What `/usage` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Report {
    level: Level,
    /// Their own level, when the group raised it.
    own_level: Option<Level>,
    /// Tokens they used this month, everywhere.
    used: u64,
    /// Of the input in `used`, what the provider served from its prompt cache.
    cached: u64,
    /// Their monthly budget here; `None` = unlimited.
    budget: Option<u64>,
    /// The group's shared budget and what the group used of it, when it has one.
    pool: Option<(u64, u64)>,
    now: DateTime<Utc>,
}

/// The answer to `/usage` from the sender of `msg`, in the chat it came from.
pub(super) async fn report(people: &People<'_>, msg: &InboundMessage) -> Result<String, StoreError> {
    let policy = &people.policy;
    let identity = Identity::new(&msg.channel, &msg.sender.id);
    let Standing { user, own_level, level, group } = people.stand(msg, &identity, &msg.sender.name).await?;
    let now = policy.now();
    let month = month_key(now);
    let usage = people.store.monthly_usage(user.id, &month).await?;
    let (used, cached) = (access::tokens(usage), usage.cache_read_tokens);
    let pool = match group.as_ref().and_then(|group| Some((group, group.budget?))) {
        Some((group, budget)) => Some((budget, access::tokens(people.store.group_usage(&group.key, &month).await?))),
        None => None,
    };
    let report = Report {
        level,
        own_level: (own_level != level).then_some(own_level),
        used,
        cached,
        budget: policy.budget(level, &user),
        pool,
        now,
    };
    Ok(render(&report))
}

fn render(report: &Report) -> String {
    let level = match report.own_level {
        Some(own) => format!("Your level here: {} (this group's; your own is {own})", report.level),
        None => format!("Your level: {}", report.level),
    };
    let month = report.now.format("%B %Y");
    let mut text = format!("{level}\nTokens you used in {month}: {}", report.used);
    if report.cached > 0 {
        text.push_str(&format!(" ({} of them read from the model provider's cache, at a lower price)", report.cached));
    }
    match report.budget {
        Some(budget) => {
            let left = budget.saturating_sub(report.used);
            text.push_str(&format!("\nYour allowance: {budget} tokens a month, {left} left"));
        }
        None => text.push_str("\nYour allowance: unlimited"),
    }
    if let Some((budget, used)) = report.pool {
        let left = budget.saturating_sub(used);
        text.push_str(&format!("\nThis group's shared allowance: {budget} tokens a month, {used} used, {left} left"));
    }
    text.push_str(&format!("\nCounts start again on {} (UTC).", access::reset_day(report.now)));
    text
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn report() -> Report {
        Report {
            level: Level::User,
            own_level: None,
            used: 1200,
            cached: 0,
            budget: Some(1_000_000),
            pool: None,
            now: Utc.with_ymd_and_hms(2025, 12, 14, 9, 30, 0).unwrap(),
        }
    }

    #[test]
    fn the_report_says_level_used_left_and_when_it_resets() {
        assert_eq!(
            render(&report()),
            "Your level: user\nTokens you used in December 2025: 1200\nYour allowance: 1000000 tokens a month, \
             998800 left\nCounts start again on 1 January 2026 (UTC)."
        );
    }

    #[test]
    fn a_group_level_and_pool_are_shown_and_nothing_left_is_zero() {
        let text = render(&Report {
            level: Level::User,
            own_level: Some(Level::Guest),
            used: 300_000,
            budget: Some(250_000),
            pool: Some((500_000, 20_000)),
            ..report()
        });
        assert!(text.starts_with("Your level here: user (this group's; your own is guest)\n"), "{text}");
        assert!(text.contains("\nYour allowance: 250000 tokens a month, 0 left\n"), "{text}");
        assert!(text.contains("\nThis group's shared allowance: 500000 tokens a month, 20000 used, 480000 left\n"));
        let unlimited = render(&Report { budget: None, ..report() });
        let cached = render(&Report { cached: 800, ..report() });
        assert!(
            cached.contains(": 1200 (800 of them read from the model provider's cache, at a lower price)\n"),
            "{cached}"
        );
        assert!(unlimited.contains("\nYour allowance: unlimited\n"), "{unlimited}");
    }
}
