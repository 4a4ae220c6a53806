//! What each month's usage cost, per person and per configured group, on both stores: known
//! costs summed, the tokens of runs without a price kept apart, carried over when users merge.

use std::sync::Arc;

use switchboard::config::{Identity, Level};
use switchboard::store::users::{Billing, MonthCost};
use switchboard::store::{RunKind, RunStatus, SideRun};
use switchboard_channels::contract::Usage;

use crate::stores::{completed, on_both_stores};

const GROUP: &str = "telegram:-100555";
const MONTH: &str = "2026-03";

fn billing(identity: &Identity, group: Option<&str>) -> Option<Billing> {
    Some(Billing { identity: identity.clone(), month: MONTH.into(), group: group.map(str::to_owned) })
}

on_both_stores! {
    async fn known_costs_add_up_and_unpriced_tokens_are_kept_apart(fresh) {
        let store = Arc::clone(&fresh.store);
        let (ann, bob) = (Identity::new("telegram", "1"), Identity::new("telegram", "2"));
        store.resolve_user(&ann, "Ann", Level::User).await.unwrap();
        store.resolve_user(&bob, "Bob", Level::User).await.unwrap();
        // Ann: a priced turn in the group, and an unpriced one in her DM.
        let turns = [("in-1", Some(0.25), billing(&ann, Some(GROUP))), ("in-2", None, billing(&ann, None))];
        for (inbound, cost_usd, billing) in turns {
            let switchboard::store::RunClaim::New { run_id } = store.claim_run(inbound, "s").await.unwrap() else {
                panic!("not new")
            };
            let outcome = switchboard::store::RunOutcome { cost_usd, billing, ..completed(Vec::new()) };
            store.finish_run(&run_id, &outcome).await.unwrap();
        }
        // Bob: a priced side run (a compaction's summary) in the group.
        let side = SideRun {
            kind: RunKind::Summary,
            session_key: "s".into(),
            inbound_id: "in-3:summary".into(),
            status: RunStatus::Completed,
            model: "m".into(),
            usage: Usage::new(100, 20),
            cost_usd: Some(0.5),
            iterations: 1,
            error: None,
            started_at: chrono::Utc::now(),
            billing: billing(&bob, Some(GROUP)),
        };
        store.record_side_run(&side).await.unwrap();

        let users = store.list_users(MONTH).await.unwrap();
        let cost_of = |id: &Identity| users.iter().find(|u| u.identities.iter().any(|(i, _)| i == id)).unwrap().cost;
        // `completed` uses 10 + 5 tokens.
        assert_eq!(cost_of(&ann), MonthCost { usd: 0.25, unpriced_tokens: 15 });
        assert_eq!(cost_of(&bob), MonthCost { usd: 0.5, unpriced_tokens: 0 });
        assert_eq!(store.group_cost(GROUP, MONTH).await.unwrap(), MonthCost { usd: 0.75, unpriced_tokens: 0 });
        assert_eq!(store.group_cost(GROUP, "2026-04").await.unwrap(), MonthCost::default());

        // Merged users keep what both cost.
        store.link(&ann, &bob, Level::User).await.unwrap();
        let users = store.list_users(MONTH).await.unwrap();
        assert_eq!(users.len(), 1);
        assert_eq!(users[0].cost, MonthCost { usd: 0.75, unpriced_tokens: 15 });
        assert_eq!(users[0].used.total(), 15 + 15 + 120);
    }
}
