//! `/spend`: this month's tokens and estimated cost (`[prices]`), in all, by person and by
//! configured group, from the counters budgets are checked against.

use chrono::{DateTime, Utc};

use crate::store::StoreError;
use crate::store::users::MonthCost;
use crate::users::month_key;
use crate::worker::TurnRunner;

/// People `/spend` lists at most (the biggest spenders).
const PEOPLE_LIMIT: usize = 20;

/// `/spend`: the total first, then people (most tokens first), then groups.
pub(in crate::worker) async fn spend(turns: &TurnRunner) -> Result<String, StoreError> {
    let policy = turns.access.get();
    let now = policy.now();
    let month = month_key(now);
    let store = turns.control.store();
    let mut people: Vec<(String, u64, MonthCost)> = store
        .list_users(&month)
        .await?
        .into_iter()
        .filter(|summary| summary.used.total() > 0)
        .map(|summary| {
            let name = summary.identities.iter().map(|(_, name)| name.as_str()).find(|name| !name.is_empty());
            let first = summary.identities.first().map(|(identity, _)| identity.to_string()).unwrap_or_default();
            let who = match name {
                Some(name) => format!("{name} ({first})"),
                None => first,
            };
            (who, summary.used.total(), summary.cost)
        })
        .collect();
    people.sort_by_key(|(_, tokens, _)| std::cmp::Reverse(*tokens));
    let tokens = people.iter().map(|(_, tokens, _)| tokens).sum();
    let cost = people.iter().fold(MonthCost::default(), |sum, (_, _, cost)| sum + *cost);
    let mut text = format!("{} (UTC), everyone: {}", month_name(now), used(tokens, cost));
    if !people.is_empty() {
        text.push_str("\n\nBy person:");
        for (who, tokens, cost) in people.iter().take(PEOPLE_LIMIT) {
            text.push_str(&format!("\n{who}: {}", used(*tokens, *cost)));
        }
        if let Some(left) = people.len().checked_sub(PEOPLE_LIMIT).filter(|left| *left > 0) {
            text.push_str(&format!("\n…and {left} more (`switchboard users list`)."));
        }
    }
    let mut groups = String::new();
    for group in policy.groups() {
        let tokens = store.group_usage(&group.key, &month).await?.total();
        let cost = store.group_cost(&group.key, &month).await?;
        groups.push_str(&format!("\n{}: {}", group.key, used(tokens, cost)));
    }
    if !groups.is_empty() {
        text.push_str(&format!("\n\nBy group (within the above):{groups}"));
    }
    text.push_str("\n\nNot counted: heartbeats, and cron jobs made from the shell (they bill nobody).");
    if cost.unpriced_tokens > 0 {
        text.push_str("\nCosts come from [prices] in the config: a model without a price there has no known cost.");
    }
    Ok(text)
}

/// `March 2026`.
pub(super) fn month_name(now: DateTime<Utc>) -> String {
    now.format("%B %Y").to_string()
}

/// `8000 tokens, $0.0300`; the part without a price is said, never shown as free.
pub(super) fn used(tokens: u64, cost: MonthCost) -> String {
    if tokens == 0 {
        return "nothing yet".into();
    }
    let priced = format!("${:.4}", cost.usd);
    let cost = match cost.unpriced_tokens {
        0 => priced,
        unpriced if unpriced >= tokens => "cost unknown (no price)".into(),
        unpriced => format!("{priced} + {unpriced} tokens of unknown cost"),
    };
    format!("{tokens} tokens, {cost}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_cost_is_said_never_shown_as_free() {
        let known = MonthCost { usd: 0.03, unpriced_tokens: 0 };
        assert_eq!(used(8000, known), "8000 tokens, $0.0300");
        assert_eq!(used(500, MonthCost { usd: 0.0, unpriced_tokens: 500 }), "500 tokens, cost unknown (no price)");
        let part = MonthCost { usd: 0.01, unpriced_tokens: 200 };
        assert_eq!(used(900, part), "900 tokens, $0.0100 + 200 tokens of unknown cost");
        assert_eq!(used(0, MonthCost::default()), "nothing yet");
    }
}
