//! The rule of a run's finish (`src/store/finish_rule.rs`), run on both stores: one spec of
//! what finishing writes and when it writes nothing.

use bytes::Bytes;
use switchboard::config::{Identity, Level};
use switchboard::provider::ChatMessage;
use switchboard::store::users::{Billing, MonthCost};
use switchboard::store::{BusWrites, RunClaim, RunOutcome, RunRecord, RunStatus, StoreError};
use switchboard_channels::bus::journal::JournalRecord;
use switchboard_channels::contract::{OutboundMessage, Usage};
use switchboard_channels::subject::Flow;

use crate::stores::{Fresh, completed, on_both_stores};

const SESSION: &str = "telegram:7";
const MONTH: &str = "2026-12";

fn payer(sender: &str, group: Option<&str>) -> Billing {
    Billing { identity: Identity::new("telegram", sender), month: MONTH.into(), group: group.map(str::to_owned) }
}

fn usage() -> Usage {
    Usage { input_tokens: 100, output_tokens: 20, cache_read_tokens: 30, cache_write_tokens: 4, estimated: true }
}

async fn claim(fresh: &Fresh, inbound: &str) -> String {
    match fresh.store.claim_run(inbound, SESSION).await.unwrap() {
        RunClaim::New { run_id } => run_id,
        other => panic!("expected a new run, got {other:?}"),
    }
}

async fn run(fresh: &Fresh, run_id: &str) -> RunRecord {
    let runs = fresh.store.recent_runs(50).await.unwrap();
    runs.into_iter().find(|run| run.run_id == run_id).expect("the run is listed")
}

/// The payer's month: its usage (with cached tokens) and its cost.
async fn month_cost(fresh: &Fresh, sender: &str) -> (Usage, MonthCost) {
    let users = fresh.store.list_users(MONTH).await.unwrap();
    let user = users.into_iter().find(|u| u.identities.iter().any(|(id, _)| id.sender_id == sender)).unwrap();
    (fresh.store.monthly_usage(user.user.id, MONTH).await.unwrap(), user.cost)
}

fn reply_record(dedupe: &str) -> JournalRecord {
    JournalRecord {
        flow: Flow::Out,
        channel: "telegram".into(),
        subject: "out.telegram".into(),
        dedupe_id: Some(dedupe.into()),
        payload: Bytes::from_static(b"{\"content\":\"hi\"}"),
    }
}

on_both_stores! {
    /// A completed run: its row, its transcript, its usage and cost on its payer's and group's
    /// month, and the session's history.
    async fn a_finished_run_writes_its_row_transcript_and_usage(fresh) {
        fresh.store.resolve_user(&Identity::new("telegram", "ann"), "Ann", Level::User).await.unwrap();
        let run_id = claim(fresh, "in-1").await;
        let outcome = RunOutcome {
            usage: usage(),
            cost_usd: Some(0.25),
            context_tokens: 900,
            iterations: 2,
            billing: Some(payer("ann", Some("team"))),
            ..completed(vec![ChatMessage::user("hello"), ChatMessage::assistant("hi", Vec::new())])
        };
        fresh.store.finish_run(&run_id, &outcome).await.unwrap();

        let record = run(fresh, &run_id).await;
        assert_eq!((record.status, record.usage, record.cost_usd, record.iterations), (RunStatus::Completed, usage(), Some(0.25), 2));
        assert!(record.finished_at.is_some() && !record.reply_delivered);
        let history: Vec<String> = fresh.store.history(SESSION, 10).await.unwrap().into_iter().map(|m| m.content).collect();
        assert_eq!(history, ["hello", "hi"]);
        let (used, cost) = month_cost(fresh, "ann").await;
        assert_eq!((used.input_tokens, used.output_tokens, used.cache_read_tokens), (100, 20, 30));
        assert_eq!(cost, MonthCost { usd: 0.25, unpriced_tokens: 0 });
        assert_eq!(fresh.store.group_usage("team", MONTH).await.unwrap().cache_read_tokens, 30);
        assert_eq!(fresh.store.group_cost("team", MONTH).await.unwrap(), MonthCost { usd: 0.25, unpriced_tokens: 0 });
        let info = fresh.store.session_info(SESSION).await.unwrap();
        assert_eq!(info.last_turn.map(|turn| turn.context_tokens), Some(900));
        assert!(fresh.store.run_settled("in-1").await.unwrap());
    }

    /// A failed run without a known cost: its error kept, its tokens counted as unpriced; a
    /// payer without a user is not counted, and the finish still succeeds.
    async fn a_failed_run_counts_unpriced_tokens_and_an_unknown_payer_nothing(fresh) {
        fresh.store.resolve_user(&Identity::new("telegram", "bob"), "Bob", Level::User).await.unwrap();
        let failed = RunOutcome {
            status: RunStatus::Failed,
            error: Some("the model failed".into()),
            billing: Some(payer("bob", None)),
            ..completed(Vec::new())
        };
        let run_id = claim(fresh, "in-1").await;
        fresh.store.finish_run(&run_id, &failed).await.unwrap();
        let record = run(fresh, &run_id).await;
        assert_eq!((record.status, record.error.as_deref(), record.cost_usd), (RunStatus::Failed, Some("the model failed"), None));
        assert_eq!(month_cost(fresh, "bob").await.1, MonthCost { usd: 0.0, unpriced_tokens: 15 });

        let stranger = RunOutcome { billing: Some(payer("nobody", None)), ..completed(Vec::new()) };
        let run_id = claim(fresh, "in-2").await;
        fresh.store.finish_run(&run_id, &stranger).await.unwrap();
        assert_eq!(run(fresh, &run_id).await.status, RunStatus::Completed);
    }

    /// A resumed run is finished once: a second finish of it (the first attempt's worker
    /// coming back) is refused and writes nothing; a run never claimed has nothing to finish.
    async fn a_run_is_finished_once_whichever_attempt_finishes_it(fresh) {
        fresh.store.resolve_user(&Identity::new("telegram", "cy"), "Cy", Level::User).await.unwrap();
        let run_id = claim(fresh, "in-1").await;
        let resumed = fresh.store.claim_run("in-1", SESSION).await.unwrap();
        assert!(matches!(&resumed, RunClaim::Resumed { attempt: 2, run_id: resumed } if *resumed == run_id), "{resumed:?}");
        let outcome = RunOutcome { billing: Some(payer("cy", None)), ..completed(vec![ChatMessage::user("once")]) };
        fresh.store.finish_run(&run_id, &outcome).await.unwrap();

        let again = fresh.store.finish_run(&run_id, &outcome).await;
        assert!(matches!(again, Err(StoreError::Finish { .. })), "{again:?}");
        assert_eq!(fresh.store.history(SESSION, 10).await.unwrap().len(), 1, "the transcript is not written twice");
        assert_eq!(month_cost(fresh, "cy").await.0.total(), 15, "the usage is not counted twice");
        assert_eq!(run(fresh, &run_id).await.attempt, 2);
        let unknown = fresh.store.finish_run("no-such-run", &outcome).await;
        assert!(matches!(unknown, Err(StoreError::NoSuchRun(_))), "{unknown:?}");
    }

    /// With the in-process bus's writes: the reply's journal row is added (unless a row with its
    /// dedupe id is pending), the reply counts as delivered, the answered row is removed.
    async fn a_journaled_finish_adds_the_reply_and_removes_the_answered_row(fresh) {
        let answered = fresh.store.append(Flow::In, "telegram", "in.telegram", Some("in-1"), b"{}").await.unwrap();
        let run_id = claim(fresh, "in-1").await;
        let reply = reply_record("reply-1");
        let outcome = RunOutcome {
            reply: Some(OutboundMessage { id: "reply-1".into(), content: "hi".into(), ..OutboundMessage::default() }),
            ..completed(vec![ChatMessage::user("hello")])
        };
        let bus = BusWrites { reply: Some(&reply), answered_row: answered };
        let row = fresh.store.finish_run_journaled(&run_id, &outcome, &bus).await.unwrap();

        let pending = fresh.store.pending().await.unwrap();
        assert_eq!(pending.iter().map(|entry| Some(entry.seq)).collect::<Vec<_>>(), [row]);
        assert_eq!(pending[0].payload, reply.payload);
        assert!(run(fresh, &run_id).await.reply_delivered);
        assert!(fresh.store.run_settled("in-1").await.unwrap());

        // The same reply again (another run answering with the same id): already pending.
        let run_id = claim(fresh, "in-2").await;
        let only_reply = BusWrites { reply: Some(&reply), answered_row: None };
        let again = fresh.store.finish_run_journaled(&run_id, &outcome, &only_reply).await.unwrap();
        assert_eq!(again, None);
        assert_eq!(fresh.store.pending().await.unwrap().len(), 1);
    }
}
