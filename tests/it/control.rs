//! The owner's operations (`switchboard::control`) on both stores: who may decide, pairing
//! decisions that tell the stranger, cron changes.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use switchboard::config::{Config, Identity, Level};
use switchboard::control::{Control, CronChange};
use switchboard::schedule::Schedule;
use switchboard::store::StoreError;
use switchboard::store::cron::{MissedPolicy, Payload};
use switchboard::store::pairing::CodeProblem;
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::contract::{OutboundKind, OutboundMessage};
use switchboard_channels::{Bus, Deliveries};

use crate::cron_support::add_job;
use crate::stores::on_both_stores;

const HOUR: Duration = Duration::from_secs(3600);

fn config(owners: &[&str], approvers: &[&str]) -> Config {
    let mut config = Config::default();
    config.users.owners = owners.iter().map(|owner| owner.to_string()).collect();
    config.approvals.approvers = approvers.iter().map(|approver| approver.to_string()).collect();
    config
}

async fn next_told(out: &mut Deliveries) -> OutboundMessage {
    let delivery =
        tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("nothing told").unwrap().unwrap();
    let msg = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    msg
}

fn identity(text: &str) -> Identity {
    text.parse().unwrap()
}

on_both_stores! {
    async fn owners_are_named_or_stored_and_approvers_default_to_them(fresh) {
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(16));
        let store = Arc::clone(&fresh.store);
        let control = Control::new(Arc::clone(&store) as _, Arc::clone(&bus), &config(&["discord:9", "telegram:2", "telegram:1"], &[]));
        let deciders = control.deciders();
        assert!(deciders.is_owner(store.as_ref(), &identity("telegram:1"), "Ann").await.unwrap());
        assert!(!deciders.is_owner(store.as_ref(), &identity("telegram:5"), "Eve").await.unwrap());
        store.set_level(&identity("telegram:5"), Level::Owner).await.unwrap();
        assert!(deciders.is_owner(store.as_ref(), &identity("telegram:5"), "Eve").await.unwrap());
        assert!(deciders.is_approver(store.as_ref(), &identity("telegram:5"), "Eve").await.unwrap());
        // The first named owner of a channel is the one told about its strangers.
        assert_eq!(deciders.named_owners_on("telegram"), [identity("telegram:2"), identity("telegram:1")]);

        deciders.reload(&config(&["telegram:1"], &["api:ops"]));
        assert!(deciders.is_approver(store.as_ref(), &identity("api:ops"), "").await.unwrap());
        assert!(!deciders.is_approver(store.as_ref(), &identity("telegram:1"), "Ann").await.unwrap());
    }

    async fn pairing_decisions_tell_the_stranger_once(fresh) {
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(16));
        let mut out = bus.outbound("telegram").await.unwrap();
        let store = Arc::clone(&fresh.store);
        let control = Control::new(Arc::clone(&store) as _, Arc::clone(&bus), &config(&["telegram:1"], &[]));
        let ann = store.request("telegram", "77", "Ann", HOUR, 10).await.unwrap().unwrap();
        let bob = store.request("telegram", "78", "Bob", HOUR, 10).await.unwrap().unwrap();
        assert_eq!(control.open_pairing(&ann.code.to_lowercase()).await.unwrap().unwrap().sender_id, "77");

        let approved = control.approve_pairing("telegram", &ann.code, "telegram:1").await.unwrap();
        assert_eq!((approved.sender_id.as_str(), approved.level), ("77", Level::User));
        let told = next_told(&mut out).await;
        assert_eq!((told.chat_id.as_str(), told.to_user(), told.kind), ("77", true, OutboundKind::Notice));
        assert!(told.content.contains("approved"), "{}", told.content);

        control.deny_pairing("telegram", &bob.code, "telegram:1").await.unwrap();
        let told = next_told(&mut out).await;
        assert!(told.chat_id == "78" && told.content.contains("declined"), "{told:?}");
        assert!(control.open_pairing(&bob.code).await.unwrap().is_none());

        // Decided requests stay decided, whoever tries again.
        match control.approve_pairing("telegram", &bob.code, "telegram:1").await {
            Err(StoreError::PairingCode { problem: CodeProblem::Used, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    /// Every decision is listed, newest first, with who decided and when; a denial is kept for
    /// the record long after it stops keeping the sender from a new code, and goes after 30 days.
    async fn pairing_decisions_are_listed_and_kept_for_a_month(fresh) {
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(16));
        let store = Arc::clone(&fresh.store);
        let control = Control::new(Arc::clone(&store) as _, Arc::clone(&bus), &config(&["telegram:1"], &[]));
        let ann = store.request("telegram", "77", "Ann", HOUR, 10).await.unwrap().unwrap();
        let bob = store.request("telegram", "78", "Bob", HOUR, 10).await.unwrap().unwrap();
        let before = chrono::Utc::now() - chrono::Duration::seconds(1);
        control.approve_pairing("telegram", &ann.code, "telegram:1").await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        control.deny_pairing("telegram", &bob.code, "api:ops").await.unwrap();

        let decisions = store.pairing_decisions(None, 10).await.unwrap();
        let listed: Vec<(&str, &str, &str, &str)> = decisions
            .iter()
            .map(|d| (d.sender_name.as_str(), d.code.as_str(), d.decision.as_str(), d.decided_by.as_str()))
            .collect();
        assert_eq!(listed, [("Bob", bob.code.as_str(), "denied", "api:ops"), ("Ann", ann.code.as_str(), "approved", "telegram:1")]);
        assert!(decisions.iter().all(|d| d.decided_at > before && d.decided_at <= chrono::Utc::now()), "{decisions:?}");
        assert!(store.pairing_decisions(Some("discord"), 10).await.unwrap().is_empty());
        assert_eq!(store.pairing_decisions(None, 1).await.unwrap()[0].sender_name, "Bob");

        // Two days on, Bob's code long expired: he may ask again, and the denial is still listed
        // (asking prunes what is due).
        let day = 24 * 3600 * 1000_i64;
        let now = chrono::Utc::now().timestamp_millis();
        let aged = format!("UPDATE pairing_requests SET expires_at = {}, used_at = {} WHERE sender_id = '78'", now - 2 * day, now - 2 * day);
        assert_eq!(fresh.execute(&aged).await, 1);
        assert!(store.request("telegram", "78", "Bob", HOUR, 10).await.unwrap().is_some(), "the denial no longer blocks");
        let names: Vec<String> = store.pairing_decisions(None, 10).await.unwrap().into_iter().map(|d| d.sender_name).collect();
        assert_eq!(names, ["Ann", "Bob"]);

        // Past 30 days it is gone.
        let old = format!("UPDATE pairing_requests SET used_at = {} WHERE code = '{}'", now - 31 * day, bob.code);
        assert_eq!(fresh.execute(&old).await, 1);
        store.request("telegram", "79", "Cid", HOUR, 10).await.unwrap().unwrap();
        let names: Vec<String> = store.pairing_decisions(None, 10).await.unwrap().into_iter().map(|d| d.sender_name).collect();
        assert_eq!(names, ["Ann"]);
    }

    async fn cron_jobs_pause_resume_and_go(fresh) {
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(16));
        let store = Arc::clone(&fresh.store);
        let control = Control::new(Arc::clone(&store) as _, bus, &config(&["telegram:1"], &[]));
        let now = switchboard::clock::now();
        let schedule = Schedule::every(HOUR, now, Duration::from_secs(60)).unwrap();
        let job = add_job(&store, Payload::Turn, schedule, MissedPolicy::Skip, now).await;

        assert_eq!(control.pause_cron(&job.id).await.unwrap(), CronChange::Paused);
        assert!(!store.cron_job(&job.id).await.unwrap().unwrap().enabled);
        let CronChange::Resumed(Some(next)) = control.resume_cron(&job.id).await.unwrap() else { panic!("not resumed") };
        assert!(next > now, "{next} after {now}");
        assert!(store.cron_job(&job.id).await.unwrap().unwrap().enabled);
        assert_eq!(control.delete_cron(&job.id).await.unwrap(), CronChange::Deleted);
        assert_eq!(control.pause_cron(&job.id).await.unwrap(), CronChange::Gone);
        assert_eq!(control.resume_cron(&job.id).await.unwrap(), CronChange::Gone);
    }
}
