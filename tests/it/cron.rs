//! Cron jobs through a real worker and the scheduler on the same store and bus, on the
//! in-process bus and on NATS: delivery to topics and threads, verbatim reminders, isolated
//! sessions, exactly-once firing, missed runs, lost publishes, loop limits and failures.

use std::sync::Arc;
use std::time::Duration;
use switchboard_channels::contract::SessionKey;

use crate::common::{BusKind, next_out, nothing_more};
use crate::cron_support::{add_job, person, request_text, start, start_with};
use chrono::{DateTime, Utc};
use serde_json::json;
use switchboard::clock::to_store_precision;
use switchboard::schedule::Schedule;
use switchboard::scheduler::CronSettings;
use switchboard::scheduler::job::scheduled_id;
use switchboard::store::Database;
use switchboard::store::cron::{CronJob, CronRunStatus, CronStore, MissedPolicy, NewCronRun, Payload};
use switchboard::store::sqlite::SqliteStore;
use switchboard_channels::bus::BusExt;
use switchboard_testkit::fake_llm::Scripted;

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

fn add_call(args: serde_json::Value) -> Scripted {
    Scripted::ToolCalls(vec![("cron".into(), args)])
}

async fn only_job(store: &Arc<dyn Database>) -> CronJob {
    let jobs = store.cron_jobs(None).await.unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    jobs.into_iter().next().unwrap()
}

async fn reminder_in_a_telegram_topic_is_delivered_verbatim(kind: BusKind) {
    let h = start(kind).await;
    let mut out = h.bus.outbound("telegram").await.unwrap();
    h.llm.push(add_call(
        json!({"action": "add", "at": "+20m", "payload": "reminder", "message": "Stand-up starts now!"}),
    ));
    h.llm.push(Scripted::Text("I'll remind you.".into()));
    h.bus.publish_inbound(&person("telegram", "-100123", Some("7"), true, "remind us in 20 minutes")).await.unwrap();
    assert_eq!(next_out(&mut out).await.content, "I'll remind you.");

    h.clock.advance(19 * MINUTE);
    assert!(h.scheduler.tick().await.unwrap().fired.is_empty(), "fired early");
    h.clock.advance(MINUTE);
    let report = h.scheduler.tick().await.unwrap();
    assert_eq!(report.fired.len(), 1, "{report:?}");
    let reminder = next_out(&mut out).await;
    assert_eq!(reminder.content, "Stand-up starts now!");
    assert_eq!((reminder.chat_id.as_str(), reminder.thread_id.as_deref()), ("-100123", Some("7")));
    assert_eq!(h.llm.requests().len(), 2, "the reminder must not call the model");

    // Done: kept in the list as finished, with its last run.
    let job = only_job(&h.store).await;
    assert!(job.is_finished());
    assert_eq!(job.last_status.as_deref(), Some("completed"));
    let history = h.store.cron_history(&job.id, 10).await.unwrap();
    assert_eq!(history[0].status, CronRunStatus::Completed);
    // The session's transcript notes the reminder went out.
    let transcript = h.store.history("telegram:-100123:topic:7", 50).await.unwrap();
    assert!(transcript.iter().any(|m| m.content == "Stand-up starts now!"), "{transcript:?}");
    h.clock.advance(HOUR);
    assert!(h.scheduler.tick().await.unwrap().fired.is_empty());
    nothing_more(&mut out, Duration::from_millis(300)).await;
}

async fn turn_job_in_a_discord_thread_answers_there_with_the_sessions_history(kind: BusKind) {
    let h = start(kind).await;
    let mut out = h.bus.outbound("discord").await.unwrap();
    h.llm.push(add_call(json!({"action": "add", "every": "1h", "message": "Post the build status", "name": "status"})));
    h.llm.push(Scripted::Text("Scheduled.".into()));
    let asked = "the deploy of project zebra is ongoing; report hourly";
    h.bus.publish_inbound(&person("discord", "55", Some("9"), true, asked)).await.unwrap();
    assert_eq!(next_out(&mut out).await.content, "Scheduled.");

    h.llm.push(Scripted::Text("Build is green.".into()));
    h.clock.advance(HOUR);
    assert_eq!(h.scheduler.tick().await.unwrap().fired.len(), 1);
    let reply = next_out(&mut out).await;
    assert_eq!(reply.content, "Build is green.");
    assert_eq!((reply.chat_id.as_str(), reply.thread_id.as_deref()), ("55", Some("9")));
    let request = request_text(&h.llm, 2);
    assert!(request.contains("Post the build status"), "{request}");
    assert!(request.contains("Scheduled job \"status\""), "{request}");
    assert!(request.contains(asked), "the session's history is missing: {request}");
    let job = only_job(&h.store).await;
    assert_eq!(job.last_status.as_deref(), Some("completed"));
    assert_eq!(job.job.next_run_at, Some(to_store_precision(h.clock.now()) + chrono::Duration::hours(1)));
}

async fn isolated_job_replies_to_its_target_and_keeps_its_own_history(kind: BusKind) {
    let h = start(kind).await;
    let mut out = h.bus.outbound("telegram").await.unwrap();
    h.llm.push(add_call(json!({
        "action": "add", "cron": "0 8 * * *", "tz": "Europe/Berlin", "payload": "isolated",
        "target": "telegram:-100555", "message": "Summarise the news", "name": "daily summary"
    })));
    h.llm.push(Scripted::Text("Daily summary set up.".into()));
    let private = "my secret plan is about penguins";
    h.bus.publish_inbound(&person("telegram", "42", None, false, private)).await.unwrap();
    assert_eq!(next_out(&mut out).await.content, "Daily summary set up.");

    let job = only_job(&h.store).await;
    let due = job.job.next_run_at.unwrap();
    let berlin: switchboard::zone::Tz = "Europe/Berlin".parse().unwrap();
    assert_eq!(due.with_timezone(&berlin).format("%H:%M").to_string(), "08:00");
    h.llm.push(Scripted::Text("Today: nothing happened.".into()));
    h.clock.set(due);
    assert_eq!(h.scheduler.tick().await.unwrap().fired, vec![scheduled_id(&job.id, due)]);
    let reply = next_out(&mut out).await;
    assert_eq!((reply.chat_id.as_str(), reply.thread_id.as_deref()), ("-100555", None));
    assert_eq!(reply.content, "Today: nothing happened.");
    let request = request_text(&h.llm, 2);
    assert!(request.contains("Summarise the news") && !request.contains(private), "{request}");
    let own = h.store.history(&format!("cron:{}", job.id), 50).await.unwrap();
    assert!(own.iter().any(|m| m.content == "Today: nothing happened."), "{own:?}");
    let dm = h.store.history("telegram:42", 50).await.unwrap();
    assert!(!dm.iter().any(|m| m.content.contains("nothing happened")));
}

/// Two schedulers (two store handles on one file) and two workers on one bus, ticking at once.
async fn two_schedulers_fire_each_occurrence_once(kind: BusKind) {
    let h = start(kind).await;
    let beside = h.another_worker(crate::cron_support::worker_setup(kind, &h.clock, &h.settings)).await;
    let second = crate::cron_support::scheduler(&beside.store, &beside.bus, &h.clock, &h.settings);
    let mut out = h.bus.outbound("telegram").await.unwrap();
    let every = Schedule::Every { every_secs: 3600, anchor: h.clock.now() };
    let job = add_job(&h.store, Payload::Turn, every, MissedPolicy::RunOnce, h.clock.now()).await;

    let mut fired = Vec::new();
    for step in 0..4 {
        // Past one due time, then (last step) past two at once, within the grace.
        h.clock.advance(if step == 3 { HOUR + MINUTE } else { HOUR });
        for _ in 0..3 {
            let (a, b) = tokio::join!(h.scheduler.tick(), second.tick());
            fired.extend(a.unwrap().fired);
            fired.extend(b.unwrap().fired);
        }
    }
    let mut replies = Vec::new();
    for _ in 0..4 {
        replies.push(next_out(&mut out).await.in_reply_to.unwrap());
    }
    nothing_more(&mut out, Duration::from_millis(800)).await;
    let mut unique = fired.clone();
    unique.sort();
    unique.dedup();
    assert_eq!((fired.len(), unique.len()), (4, 4), "{fired:?}");
    replies.sort();
    assert_eq!(replies, unique);
    let runs = h.store.recent_runs(100).await.unwrap();
    assert_eq!(runs.len(), 4, "{runs:?}");
    assert_eq!(h.llm.requests().len(), 4);
    assert_eq!(h.store.cron_history(&job.id, 100).await.unwrap().len(), 4);
}

async fn downtime_with_skip_records_the_missed_runs(kind: BusKind) {
    let h = start(kind).await;
    let mut out = h.bus.outbound("telegram").await.unwrap();
    let start = h.clock.now();
    let daily = Schedule::Every { every_secs: 86_400, anchor: start };
    let job = add_job(&h.store, Payload::Reminder, daily, MissedPolicy::Skip, start).await;
    h.clock.advance(3 * DAY + 5 * MINUTE);
    let report = h.scheduler.tick().await.unwrap();
    assert_eq!((report.fired.len(), report.skipped.clone()), (0, vec![job.id.clone()]));
    nothing_more(&mut out, Duration::from_millis(500)).await;
    let history = h.store.cron_history(&job.id, 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].status, CronRunStatus::Missed);
    assert!(history[0].note.contains("skipped 3 missed run(s)"), "{}", history[0].note);
    let job = h.store.cron_job(&job.id).await.unwrap().unwrap();
    assert_eq!(job.job.next_run_at, Some(to_store_precision(start) + chrono::Duration::days(4)));
    assert!(h.scheduler.tick().await.unwrap().skipped.is_empty());
}

async fn downtime_with_run_once_runs_once_and_says_it_is_late(kind: BusKind) {
    let h = start(kind).await;
    let mut out = h.bus.outbound("telegram").await.unwrap();
    let start = h.clock.now();
    let daily = Schedule::Every { every_secs: 86_400, anchor: start };
    let job = add_job(&h.store, Payload::Reminder, daily, MissedPolicy::RunOnce, start).await;
    h.clock.advance(3 * DAY + 5 * MINUTE);
    assert_eq!(h.scheduler.tick().await.unwrap().fired.len(), 1);
    assert_eq!(h.scheduler.tick().await.unwrap().fired.len(), 0);
    assert_eq!(next_out(&mut out).await.content, "good morning");
    nothing_more(&mut out, Duration::from_millis(500)).await;
    let history = h.store.cron_history(&job.id, 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert!(history[0].note.contains("ran late") && history[0].note.contains("3 run(s) missed"), "{}", history[0].note);
    let job = h.store.cron_job(&job.id).await.unwrap().unwrap();
    assert_eq!(job.job.next_run_at, Some(to_store_precision(start) + chrono::Duration::days(4)));
}

async fn a_claim_whose_publish_was_lost_is_published_by_the_next_tick(kind: BusKind) {
    let h = start(kind).await;
    let mut out = h.bus.outbound("telegram").await.unwrap();
    let start = h.clock.now();
    let hourly = Schedule::Every { every_secs: 3600, anchor: start };
    let job = add_job(&h.store, Payload::Reminder, hourly, MissedPolicy::RunOnce, start).await;
    let due = start + chrono::Duration::hours(1);
    h.clock.set(due);
    // A scheduler claims the occurrence and dies before publishing.
    let inbound = scheduled_id(&job.id, due);
    let run = NewCronRun {
        scheduled_for: due,
        inbound_id: Some(inbound.clone()),
        status: CronRunStatus::Pending,
        note: String::new(),
        at: due,
    };
    let claim = h.store.claim_cron_run(&job.id, due, Some(due + chrono::Duration::hours(1)), &run, 20).await.unwrap();
    assert_eq!(claim, switchboard::store::cron::CronClaim::Claimed);
    let report = h.scheduler.tick().await.unwrap();
    assert_eq!((report.fired.len(), report.republished.clone()), (0, vec![inbound]));
    assert_eq!(next_out(&mut out).await.content, "good morning");
    assert!(h.scheduler.tick().await.unwrap().republished.is_empty());
    nothing_more(&mut out, Duration::from_millis(500)).await;
}

/// A cron turn may add one job per run, one generation deeper, up to the limit.
async fn cron_turns_cannot_add_jobs_without_bound(kind: BusKind) {
    let settings = CronSettings { max_generation: 1, default_timezone: "UTC".into(), ..CronSettings::default() };
    let h = start_with(kind, settings).await;
    let mut out = h.bus.outbound("telegram").await.unwrap();
    let chain = json!({"action": "add", "every": "1h", "message": "do it again, and schedule yourself once more"});
    h.llm.push(add_call(chain.clone()));
    h.llm.push(Scripted::Text("ok".into()));
    h.bus.publish_inbound(&person("telegram", "42", None, false, "start the chain")).await.unwrap();
    assert_eq!(next_out(&mut out).await.content, "ok");
    // Generation 0 fires: its turn adds two jobs; the second is over the per-run limit.
    h.llm.push(Scripted::ToolCalls(vec![("cron".into(), chain.clone()), ("cron".into(), chain.clone())]));
    h.llm.push(Scripted::Text("first fired".into()));
    h.clock.advance(HOUR);
    assert_eq!(h.scheduler.tick().await.unwrap().fired.len(), 1);
    assert_eq!(next_out(&mut out).await.content, "first fired");
    let results = crate::cron_support::turn_tool_results(&h.llm, 3);
    assert_eq!(results.len(), 2, "{results:?}");
    // The two calls run in parallel: either may be the one refused.
    assert_eq!(results.iter().filter(|r| r.starts_with("Added:")).count(), 1, "{results:?}");
    assert_eq!(results.iter().filter(|r| r.contains("may add at most 1 job(s)")).count(), 1, "{results:?}");
    let jobs = h.store.cron_jobs(Some("telegram:42")).await.unwrap();
    assert_eq!(jobs.iter().map(|j| j.job.generation).collect::<Vec<_>>(), vec![0, 1]);
    // Both fire an hour later (the child was added then, so it is due in an hour too). The
    // child's turn may not add a generation-2 job.
    h.llm.push(add_call(chain.clone()));
    h.llm.push(Scripted::Text("second fired".into()));
    h.llm.push(add_call(chain));
    h.llm.push(Scripted::Text("third fired".into()));
    h.clock.advance(HOUR);
    assert_eq!(h.scheduler.tick().await.unwrap().fired.len(), 2);
    let mut replies = vec![next_out(&mut out).await.content, next_out(&mut out).await.content];
    replies.sort();
    assert_eq!(replies, ["second fired", "third fired"]);
    let all = (0..h.llm.requests().len()).map(|n| request_text(&h.llm, n)).collect::<Vec<_>>().join("\n");
    assert!(all.contains("would be generation 2"), "{all}");
    assert_eq!(h.store.cron_jobs(None).await.unwrap().len(), 3, "the parent added one more, the child none");
}

async fn a_failing_cron_turn_is_recorded_on_the_job(kind: BusKind) {
    let h = start(kind).await;
    let mut out = h.bus.outbound("telegram").await.unwrap();
    let start = h.clock.now();
    let hourly = Schedule::Every { every_secs: 3600, anchor: start };
    let job = add_job(&h.store, Payload::Turn, hourly, MissedPolicy::RunOnce, start).await;
    for _ in 0..6 {
        h.llm.push(Scripted::server_error());
    }
    h.clock.advance(HOUR);
    assert_eq!(h.scheduler.tick().await.unwrap().fired.len(), 1);
    let notice = next_out(&mut out).await;
    assert_eq!(notice.chat_id, "42");
    let job = h.store.cron_job(&job.id).await.unwrap().unwrap();
    assert_eq!(job.last_status.as_deref(), Some("failed"));
    assert!(job.last_error.as_deref().is_some_and(|e| !e.is_empty()), "{job:?}");
    let history = h.store.cron_history(&job.id, 10).await.unwrap();
    assert_eq!(history[0].status, CronRunStatus::Failed);
    assert_eq!(history[0].error, job.last_error);
}

crate::both_buses!(
    reminder_in_a_telegram_topic_is_delivered_verbatim,
    turn_job_in_a_discord_thread_answers_there_with_the_sessions_history,
    isolated_job_replies_to_its_target_and_keeps_its_own_history,
    two_schedulers_fire_each_occurrence_once,
    downtime_with_skip_records_the_missed_runs,
    downtime_with_run_once_runs_once_and_says_it_is_late,
    a_claim_whose_publish_was_lost_is_published_by_the_next_tick,
    cron_turns_cannot_add_jobs_without_bound,
    a_failing_cron_turn_is_recorded_on_the_job,
);

mod tool {
    use super::*;
    use switchboard::clock::ManualClock;
    use switchboard::scheduler::CronTool;
    use switchboard::tools::{Tool, ToolContext, ToolError};

    struct Setup {
        tool: CronTool,
        clock: ManualClock,
        store: Arc<dyn Database>,
        _dir: tempfile::TempDir,
    }

    async fn setup(settings: CronSettings) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
        let clock = ManualClock::new(DateTime::parse_from_rfc3339("2026-11-22T10:00:00Z").unwrap().to_utc());
        let tool = CronTool::new(Arc::clone(&store) as Arc<dyn CronStore>, clock.clock(), settings);
        Setup { tool, clock, store, _dir: dir }
    }

    fn ctx(chat: &str) -> ToolContext {
        ToolContext {
            session_key: SessionKey::stored(format!("telegram:{chat}")),
            channel: "telegram".into(),
            chat_id: chat.into(),
            run_id: "run-1".into(),
            sender_id: "u1".into(),
            sender_name: "Ada".into(),
            agent: "main".into(),
            ..ToolContext::default()
        }
    }

    fn berlin() -> CronSettings {
        CronSettings { default_timezone: "Europe/Berlin".into(), ..CronSettings::default() }
    }

    fn id_of(added: &str) -> String {
        added.trim_start_matches("Added: ").split_whitespace().next().unwrap().to_owned()
    }

    #[tokio::test]
    async fn list_shows_the_next_run_in_the_jobs_zone() {
        let s = setup(berlin()).await;
        let added = s
            .tool
            .execute(json!({"action": "add", "cron": "30 7 * * *", "message": "stretch"}), &ctx("42"))
            .await
            .unwrap();
        assert!(added.contains("next 2026-11-23 07:30 CET"), "{added}");
        let ny = json!({"action": "add", "at": "2026-11-22 18:00", "tz": "America/New_York", "message": "call", "payload": "reminder"});
        s.tool.execute(ny, &ctx("42")).await.unwrap();
        let list = s.tool.execute(json!({"action": "list"}), &ctx("42")).await.unwrap();
        assert!(list.contains("07:30 CET") && list.contains("2026-11-22 18:00 EST"), "{list}");
        assert!(list.contains("\"stretch\"") && list.contains("[reminder]"), "{list}");
    }

    #[tokio::test]
    async fn pause_resume_and_remove() {
        let s = setup(berlin()).await;
        let added = s
            .tool
            .execute(json!({"action": "add", "every": "1h", "message": "drink water"}), &ctx("42"))
            .await
            .unwrap();
        let id = id_of(&added);
        s.tool.execute(json!({"action": "pause", "id": id}), &ctx("42")).await.unwrap();
        assert!(s.tool.execute(json!({"action": "list"}), &ctx("42")).await.unwrap().contains("paused"));
        assert!(s.store.due_cron_jobs(s.clock.now() + chrono::Duration::days(1)).await.unwrap().is_empty());
        // Resumed three hours later: the next run is after now, the hours in between are not made up.
        s.clock.advance(3 * HOUR);
        let resumed = s.tool.execute(json!({"action": "resume", "id": id}), &ctx("42")).await.unwrap();
        assert!(resumed.contains("next run 2026-11-22 15:00 CET"), "{resumed}");
        let removed = s.tool.execute(json!({"action": "remove", "id": id}), &ctx("42")).await.unwrap();
        assert_eq!(removed, format!("Removed job {id}."));
        let list = s.tool.execute(json!({"action": "list"}), &ctx("42")).await.unwrap();
        assert_eq!(list, "No scheduled jobs in this conversation.");
    }

    #[tokio::test]
    async fn sessions_cannot_see_or_touch_other_sessions_jobs() {
        let s = setup(berlin()).await;
        let added =
            s.tool.execute(json!({"action": "add", "every": "1h", "message": "mine"}), &ctx("42")).await.unwrap();
        let id = id_of(&added);
        let other = ctx("43");
        assert_eq!(
            s.tool.execute(json!({"action": "list"}), &other).await.unwrap(),
            "No scheduled jobs in this conversation."
        );
        for action in ["remove", "pause", "resume", "history"] {
            let err = s.tool.execute(json!({"action": action, "id": id}), &other).await.unwrap_err();
            assert!(matches!(&err, ToolError::InvalidArguments(m) if m.contains("no job")), "{action}: {err}");
        }
        assert!(s.store.cron_job(&id).await.unwrap().unwrap().enabled);
    }

    #[tokio::test]
    async fn the_per_session_limit_and_the_minimum_interval_are_enforced() {
        let s = setup(CronSettings { max_jobs_per_session: 2, ..berlin() }).await;
        for _ in 0..2 {
            s.tool.execute(json!({"action": "add", "every": "1h", "message": "x"}), &ctx("42")).await.unwrap();
        }
        let err =
            s.tool.execute(json!({"action": "add", "every": "1h", "message": "x"}), &ctx("42")).await.unwrap_err();
        assert!(matches!(&err, ToolError::Refused(m) if m.contains("has 2 scheduled jobs")), "{err}");
        // Another session has its own allowance.
        s.tool.execute(json!({"action": "add", "every": "1h", "message": "x"}), &ctx("43")).await.unwrap();
        let err =
            s.tool.execute(json!({"action": "add", "every": "30s", "message": "x"}), &ctx("44")).await.unwrap_err();
        assert!(matches!(&err, ToolError::InvalidArguments(_)), "{err}");
        let err = s
            .tool
            .execute(json!({"action": "add", "at": "+5m", "every": "1h", "message": "x"}), &ctx("44"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("exactly one"), "{err}");
        let err = s.tool.execute(json!({"action": "add", "at": "+5m"}), &ctx("44")).await.unwrap_err();
        assert!(err.to_string().contains("`message`"), "{err}");
    }

    #[tokio::test]
    async fn a_target_chat_and_thread_can_be_named() {
        let s = setup(berlin()).await;
        let args = json!({"action": "add", "at": "+1h", "message": "hi", "target": "discord:55", "thread_id": "9"});
        let added = s.tool.execute(args, &ctx("42")).await.unwrap();
        assert!(added.contains("→ discord:55:thread:9"), "{added}");
        let job = s.store.cron_job(&id_of(&added)).await.unwrap().unwrap();
        assert_eq!(job.job.owner_session, "telegram:42");
        assert_eq!(job.job.created_by_name, "Ada");
    }
}

mod store {
    use super::*;
    use crate::stores::on_both_stores;
    use switchboard::store::cron::CronClaim;

    fn run(at: DateTime<Utc>, inbound: &str) -> NewCronRun {
        NewCronRun {
            scheduled_for: at,
            inbound_id: Some(inbound.into()),
            status: CronRunStatus::Pending,
            note: String::new(),
            at,
        }
    }

    on_both_stores! {
    /// Two schedulers (processes, hosts) claim each occurrence once.
    async fn a_claim_succeeds_once_per_read_value_and_history_is_bounded(fresh) {
        let (first, second) = (Arc::clone(&fresh.store), fresh.another().await);
        let start = crate::cron_support::start_time();
        let hourly = Schedule::Every { every_secs: 3600, anchor: start };
        let job = add_job(&first, Payload::Reminder, hourly, MissedPolicy::RunOnce, start).await;
        let mut due = job.job.next_run_at.unwrap();
        for n in 0..5 {
            let next = due + chrono::Duration::hours(1);
            let inbound = format!("cron:{}:{n}", job.id);
            let occurrence = run(due, &inbound);
            let (a, b) = tokio::join!(
                first.claim_cron_run(&job.id, due, Some(next), &occurrence, 3),
                second.claim_cron_run(&job.id, due, Some(next), &occurrence, 3),
            );
            let mut claims = [a.unwrap(), b.unwrap()];
            claims.sort_by_key(|c| *c == CronClaim::AlreadyClaimed);
            assert_eq!(claims, [CronClaim::Claimed, CronClaim::AlreadyClaimed]);
            first.mark_cron_fired(&inbound, due).await.unwrap();
            due = next;
        }
        let history = first.cron_history(&job.id, 100).await.unwrap();
        let ids: Vec<_> = history.iter().map(|r| r.inbound_id.clone().unwrap()).collect();
        let expected: Vec<_> = (2..5).rev().map(|n| format!("cron:{}:{n}", job.id)).collect();
        assert_eq!(ids, expected, "newest first, three kept");
        assert!(history.iter().all(|r| r.status == CronRunStatus::Fired));
        assert_eq!(first.cron_job(&job.id).await.unwrap().unwrap().job.next_run_at, Some(due));
    }

    async fn pending_rows_survive_pruning_and_removal_takes_the_history(fresh) {
        let store = Arc::clone(&fresh.store);
        let start = crate::cron_support::start_time();
        let hourly = Schedule::Every { every_secs: 3600, anchor: start };
        let job = add_job(&store, Payload::Reminder, hourly, MissedPolicy::RunOnce, start).await;
        let mut due = job.job.next_run_at.unwrap();
        for n in 0..3 {
            let next = due + chrono::Duration::hours(1);
            store.claim_cron_run(&job.id, due, Some(next), &run(due, &format!("p{n}")), 1).await.unwrap();
            due = next;
        }
        assert_eq!(store.pending_cron_runs().await.unwrap().len(), 3, "unpublished occurrences are never pruned");
        assert!(!store.remove_cron_job(&job.id, Some("telegram:other")).await.unwrap());
        assert!(store.remove_cron_job(&job.id, Some("telegram:42")).await.unwrap());
        assert!(store.pending_cron_runs().await.unwrap().is_empty());
        assert!(store.cron_job(&job.id).await.unwrap().is_none());
    }
    }
}
