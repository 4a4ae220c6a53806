//! Cron jobs made from a real clock's time: the instants people create jobs at have digits below
//! the millisecond, while the store keeps milliseconds. Every occurrence must fire once and the
//! job must move on (or retire), on both buses.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{BusKind, next_out, nothing_more};
use crate::cron_support::{add_job, person, start, start_with};
use serde_json::json;
use switchboard::clock::to_store_precision;
use switchboard::schedule::Schedule;
use switchboard::scheduler::CronSettings;
use switchboard::scheduler::job::scheduled_id;
use switchboard::store::Database;
use switchboard::store::cron::{CronClaim, CronJob, CronRunStatus, MissedPolicy, NewCronRun, Payload};
use switchboard_channels::Deliveries;
use switchboard_channels::bus::BusExt;
use switchboard_testkit::fake_llm::Scripted;

const MINUTE: Duration = Duration::from_secs(60);

async fn only_job(store: &Arc<dyn Database>) -> CronJob {
    let jobs = store.cron_jobs(None).await.unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    jobs.into_iter().next().unwrap()
}

/// Asks the agent (through its `cron` tool) for a reminder job in a direct chat.
async fn add_through_the_agent(h: &crate::cron_support::Harness, out: &mut Deliveries, args: serde_json::Value) {
    h.llm.push(Scripted::ToolCalls(vec![("cron".into(), args)]));
    h.llm.push(Scripted::Text("Done.".into()));
    h.bus.publish_inbound(&person("telegram", "42", None, false, "set it up")).await.unwrap();
    assert_eq!(next_out(out).await.content, "Done.");
}

async fn an_every_minute_job_fires_every_minute(kind: BusKind) {
    let h = start(kind).await;
    assert_ne!(h.clock.now().timestamp_subsec_nanos() % 1_000_000, 0, "the clock must have sub-millisecond digits");
    let mut out = h.bus.outbound("telegram").await.unwrap();
    add_through_the_agent(
        &h,
        &mut out,
        json!({"action": "add", "every": "1m", "payload": "reminder", "message": "stretch"}),
    )
    .await;
    let mut ids = Vec::new();
    for minute in 1..=3 {
        h.clock.advance(MINUTE);
        let report = h.scheduler.tick().await.unwrap();
        assert_eq!(report.fired.len(), 1, "minute {minute}: {report:?}");
        ids.extend(report.fired);
        assert_eq!(next_out(&mut out).await.content, "stretch");
        // A second tick in the same minute finds nothing due.
        let again = h.scheduler.tick().await.unwrap();
        assert!(again.fired.is_empty() && again.republished.is_empty(), "minute {minute}: {again:?}");
    }
    nothing_more(&mut out, Duration::from_millis(300)).await;
    ids.dedup();
    assert_eq!(ids.len(), 3, "{ids:?}");
    let job = only_job(&h.store).await;
    let history = h.store.cron_history(&job.id, 10).await.unwrap();
    assert_eq!(history.len(), 3, "{history:?}");
    assert!(history.iter().all(|run| run.status == CronRunStatus::Completed), "{history:?}");
    let next = job.job.next_run_at.unwrap();
    assert!(next > h.clock.now() && next - h.clock.now() <= chrono::Duration::minutes(1), "{next}");
}

async fn a_relative_reminder_fires_once_and_retires(kind: BusKind) {
    let settings = CronSettings { max_jobs_per_session: 1, default_timezone: "UTC".into(), ..CronSettings::default() };
    let h = start_with(kind, settings).await;
    let mut out = h.bus.outbound("telegram").await.unwrap();
    add_through_the_agent(
        &h,
        &mut out,
        json!({"action": "add", "at": "+1m", "payload": "reminder", "message": "call Bob"}),
    )
    .await;
    h.clock.advance(MINUTE);
    assert_eq!(h.scheduler.tick().await.unwrap().fired.len(), 1);
    assert_eq!(next_out(&mut out).await.content, "call Bob");
    for _ in 0..3 {
        h.clock.advance(MINUTE);
        let report = h.scheduler.tick().await.unwrap();
        assert!(report.fired.is_empty() && report.republished.is_empty(), "{report:?}");
    }
    nothing_more(&mut out, Duration::from_millis(300)).await;
    assert!(only_job(&h.store).await.is_finished());
    // A finished reminder no longer counts against the session's limit of one job.
    add_through_the_agent(
        &h,
        &mut out,
        json!({"action": "add", "at": "+2m", "payload": "reminder", "message": "again"}),
    )
    .await;
    assert_eq!(h.store.cron_jobs(None).await.unwrap().len(), 2);
}

/// Earlier versions kept nanoseconds in the schedule and stored the "next" occurrence equal to
/// the one that had just fired; such a job must move on by itself, without a second run.
async fn a_job_stuck_on_an_occurrence_it_already_fired_moves_on(kind: BusKind) {
    let h = start(kind).await;
    let mut out = h.bus.outbound("telegram").await.unwrap();
    let now = h.clock.now();
    let schedule: Schedule = serde_json::from_value(json!({"kind": "every", "every_secs": 60, "anchor": now})).unwrap();
    let job = add_job(&h.store, Payload::Reminder, schedule, MissedPolicy::RunOnce, now).await;
    let due = job.job.next_run_at.unwrap();
    assert_eq!(due, to_store_precision(now) + chrono::Duration::minutes(1));
    let inbound = scheduled_id(&job.id, due);
    let fired = NewCronRun {
        scheduled_for: due,
        inbound_id: Some(inbound.clone()),
        status: CronRunStatus::Pending,
        note: String::new(),
        at: due,
    };
    // The old claim: "next" equal to the occurrence itself, and the occurrence published.
    assert_eq!(h.store.claim_cron_run(&job.id, due, Some(due), &fired, 20).await.unwrap(), CronClaim::Claimed);
    h.store.mark_cron_fired(&inbound, due).await.unwrap();

    h.clock.set(due + chrono::Duration::seconds(1));
    let report = h.scheduler.tick().await.unwrap();
    assert!(report.fired.is_empty() && report.republished.is_empty(), "{report:?}");
    let job = h.store.cron_job(&job.id).await.unwrap().unwrap();
    assert_eq!(job.job.next_run_at, Some(due + chrono::Duration::minutes(1)));
    h.clock.advance(MINUTE);
    assert_eq!(
        h.scheduler.tick().await.unwrap().fired,
        vec![scheduled_id(&job.id, due + chrono::Duration::minutes(1))]
    );
    assert_eq!(next_out(&mut out).await.content, "good morning");
    nothing_more(&mut out, Duration::from_millis(300)).await;
}

crate::both_buses!(
    an_every_minute_job_fires_every_minute,
    a_relative_reminder_fires_once_and_retires,
    a_job_stuck_on_an_occurrence_it_already_fired_moves_on,
);

#[test]
fn schedules_compute_at_the_stores_precision() {
    let now = crate::common::real_now();
    let next_of = |schedule: &Schedule, after| schedule.next_after(after);
    for schedule in [
        Schedule::every(MINUTE, now, MINUTE).unwrap(),
        Schedule::at("+1m", "UTC", now).unwrap(),
        // Built by hand, as stored by earlier versions: nanoseconds in the instants.
        Schedule::Every { every_secs: 60, anchor: now },
        Schedule::At { at: now + chrono::Duration::minutes(1) },
    ] {
        let due = next_of(&schedule, now).unwrap();
        assert_eq!(due, to_store_precision(due), "{schedule:?}");
        // What the store gives back is the same instant, and nothing fires twice from it.
        let stored = to_store_precision(due);
        assert_ne!(next_of(&schedule, stored), Some(stored), "{schedule:?}");
        // The stored JSON reads back at the store's precision.
        let json = serde_json::to_string(&schedule).unwrap();
        let read: Schedule = serde_json::from_str(&json).unwrap();
        assert_eq!(next_of(&read, stored), next_of(&schedule, stored), "{json}");
    }
}
