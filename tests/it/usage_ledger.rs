//! Usage read back from the runs, on both stores: per payer and time slice, who was last
//! active, and the API's run list without chat commands unless asked.

use chrono::{Duration, Utc};
use switchboard::config::{Identity, Level};
use switchboard::store::users::Billing;
use switchboard::store::{Database, RunClaim, RunKind, RunStatus, SideRun};
use switchboard_channels::api::store::RunFilter;
use switchboard_channels::contract::Usage;

use crate::stores::{completed, on_both_stores};

/// A turn billed to `payer` (if any) that used `input` + `output` tokens and cost `cost`.
async fn billed_turn(
    store: &dyn Database,
    inbound: &str,
    payer: Option<&Identity>,
    tokens: (u64, u64),
    cost: Option<f64>,
) {
    let RunClaim::New { run_id } = store.claim_run(inbound, "telegram:1").await.unwrap() else { panic!("not new") };
    let mut outcome = completed(Vec::new());
    outcome.usage = Usage::new(tokens.0, tokens.1);
    outcome.cost_usd = cost;
    outcome.billing =
        payer.map(|identity| Billing { identity: identity.clone(), month: "2026-01".into(), group: None });
    store.finish_run(&run_id, &outcome).await.unwrap();
}

on_both_stores! {
    /// Each finished model run counts once, for the person it was billed to; commands and runs
    /// outside the period do not count, and runs billed to nobody are their own line.
    async fn usage_is_summed_per_payer_from_the_runs(fresh) {
        let store = fresh.store.as_ref();
        let ann: Identity = "telegram:1".parse().unwrap();
        let bob: Identity = "discord:2".parse().unwrap();
        let ann_user = store.resolve_user(&ann, "Ann", Level::User).await.unwrap();
        let bob_user = store.resolve_user(&bob, "Bob", Level::User).await.unwrap();
        billed_turn(store, "a1", Some(&ann), (100, 10), Some(0.5)).await;
        billed_turn(store, "a2", Some(&ann), (200, 20), None).await;
        billed_turn(store, "b1", Some(&bob), (1000, 100), Some(0.25)).await;
        billed_turn(store, "cron1", None, (7, 3), Some(0.01)).await;
        // A compaction's summary is a model call too, billed like the turn before it.
        let summary = SideRun {
            kind: RunKind::Summary,
            session_key: "telegram:1".into(),
            inbound_id: "a2:summary".into(),
            status: RunStatus::Completed,
            model: "m".into(),
            usage: Usage::new(50, 5),
            cost_usd: Some(0.125),
            iterations: 1,
            error: None,
            started_at: Utc::now(),
            billing: Some(Billing { identity: ann.clone(), month: "2026-01".into(), group: None }),
        };
        store.record_side_run(&summary).await.unwrap();
        let RunClaim::New { run_id } = store.claim_run_as("cmd", "telegram:1", RunKind::Command).await.unwrap() else { panic!() };
        store.finish_run(&run_id, &completed(Vec::new())).await.unwrap();

        let now = Utc::now();
        let slices = store.usage_slices(now - Duration::hours(1), now + Duration::hours(1)).await.unwrap();
        let of = |user: Option<i64>| {
            let mine: Vec<_> = slices.iter().filter(|slice| slice.user.map(|u| u.0) == user).collect();
            let runs: u64 = mine.iter().map(|s| s.runs).sum();
            let tokens: u64 = mine.iter().map(|s| s.usage.input_tokens + s.usage.output_tokens).sum();
            let cost: f64 = mine.iter().map(|s| s.cost_usd).sum();
            let unpriced: u64 = mine.iter().map(|s| s.unpriced_runs).sum();
            (runs, tokens, cost, unpriced)
        };
        assert_eq!(of(Some(ann_user.id.0)), (3, 385, 0.625, 1), "{slices:?}");
        assert_eq!(of(Some(bob_user.id.0)), (1, 1100, 0.25, 0));
        assert_eq!(of(None), (1, 10, 0.01, 0), "the command is not a model run: {slices:?}");
        assert!(slices.iter().all(|slice| slice.start <= now && slice.start > now - Duration::minutes(16)));
        let later = store.usage_slices(now + Duration::hours(1), now + Duration::hours(2)).await.unwrap();
        assert!(later.is_empty(), "{later:?}");

        let mut active = store.last_active().await.unwrap();
        active.sort_by_key(|a| a.user);
        assert_eq!(active.iter().map(|a| a.user).collect::<Vec<_>>(), [ann_user.id, bob_user.id]);
        assert!(active.iter().all(|a| a.at <= now && a.at > now - Duration::minutes(1)));

        let runs = store.runs(&RunFilter::default(), 50).await.unwrap();
        assert_eq!(runs.len(), 5, "model runs only: {runs:?}");
        assert!(runs.iter().all(|run| run.kind != "command"));
        let all = store.runs(&RunFilter { commands: true, ..RunFilter::default() }, 50).await.unwrap();
        assert_eq!(all.iter().filter(|run| run.kind == "command").count(), 1);
    }
}
