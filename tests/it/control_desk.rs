//! The control desk (`switchboard::control::Desk`) on both stores and a real bus: what a button
//! press does and answers, who may press, and where a stranger's pairing request is announced.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use switchboard::config::{Config, Identity};
use switchboard::control::{Control, Desk};
use switchboard::schedule::Schedule;
use switchboard::store::Database;
use switchboard::store::approvals::{ApprovalStatus, NewApproval};
use switchboard::store::cron::{MissedPolicy, Payload};
use switchboard_channels::bus::in_process::InProcessBus;
use switchboard_channels::contract::{Button, ChatAddress, Sender};
use switchboard_channels::control::{ControlDesk, PairingNotice, Press, PressAnswer};
use switchboard_channels::{Bus, Deliveries, OutboundMessage};

use crate::cron_support::add_job;
use crate::stores::on_both_stores;

const HOUR: Duration = Duration::from_secs(3600);

fn desk(store: &Arc<dyn Database>, bus: &Arc<dyn Bus>, owners: &[&str], approvers: &[&str]) -> Desk {
    let mut config = Config::default();
    config.users.owners = owners.iter().map(|owner| owner.to_string()).collect();
    config.approvals.approvers = approvers.iter().map(|approver| approver.to_string()).collect();
    let control = Arc::new(Control::new(Arc::clone(store) as _, Arc::clone(bus), &config));
    Desk::new(control, Arc::clone(bus), &config)
}

fn press(id: &str, name: &str, data: &str) -> Press {
    Press {
        channel: "telegram".into(),
        chat_id: id.into(),
        presser: Sender { id: id.into(), name: name.into(), is_bot: false },
        data: data.into(),
    }
}

fn toast(text: &str) -> PressAnswer {
    PressAnswer::toast(text)
}

fn notice() -> PairingNotice {
    PairingNotice {
        channel: "telegram".into(),
        sender: Sender { id: "555".into(), name: "Eve".into(), is_bot: false },
        username: Some("eve".into()),
        chat_id: "555".into(),
        first_message: "hello".into(),
        code: "ABCD2345".into(),
        expires_at: chrono::Utc::now() + chrono::Duration::hours(1),
    }
}

/// The next outbound message on `out`, if one comes within a moment.
async fn next_out(out: &mut Deliveries) -> Option<OutboundMessage> {
    let delivery = tokio::time::timeout(Duration::from_millis(500), out.next()).await.ok()??.ok()?;
    let msg = delivery.decode().ok();
    delivery.ack().await.unwrap();
    msg
}

on_both_stores! {
    async fn cron_buttons_act_for_owners_only(fresh) {
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(16));
        let store = Arc::clone(&fresh.store);
        let desk = desk(&store, &bus, &["telegram:1"], &[]);
        let now = switchboard::clock::now();
        let job = add_job(&store, Payload::Turn, Schedule::every(HOUR, now, Duration::from_secs(60)).unwrap(), MissedPolicy::Skip, now).await;

        assert_eq!(desk.press(&press("1", "Ann", "zz:1")).await, toast("This button is not mine."));
        let pause = format!("cp:{}", job.id);
        assert_eq!(desk.press(&press("5", "Eve", &pause)).await, toast("Only the owner can decide this."));
        assert!(store.cron_job(&job.id).await.unwrap().unwrap().enabled, "a refused press changes nothing");

        let paused = desk.press(&press("1", "Ann", &pause)).await;
        assert_eq!(paused, PressAnswer::settled("Paused.", "⏸ Paused by Ann (telegram:1)."));
        assert!(!store.cron_job(&job.id).await.unwrap().unwrap().enabled);
        let resumed = desk.press(&press("1", "Ann", &format!("cr:{}", job.id))).await;
        assert!(resumed.outcome.unwrap().starts_with("▶️ Resumed by Ann (telegram:1); next run "));
        let deleted = desk.press(&press("1", "Ann", &format!("cx:{}", job.id))).await;
        assert_eq!(deleted.outcome.as_deref(), Some("🗑 Deleted by Ann (telegram:1)."));
        assert_eq!(desk.press(&press("1", "Ann", &pause)).await, PressAnswer::settled("That job is gone.", "That job is gone."));
    }

    async fn tool_buttons_act_for_approvers_once(fresh) {
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(16));
        let store = Arc::clone(&fresh.store);
        let desk = desk(&store, &bus, &["telegram:1"], &["telegram:9"]);
        let request = NewApproval {
            run_id: "r1".into(),
            session_key: "telegram:222".into(),
            channel: "telegram".into(),
            chat_id: "222".into(),
            tool: "exec".into(),
            arguments: "{}".into(),
            requested_by: "telegram:222".into(),
        };
        let code = store.request_approval(&request, Duration::from_secs(60)).await.unwrap().code;

        // Approvers are named: the owner is not one.
        let by_owner = desk.press(&press("1", "Ann", &format!("ta:{code}"))).await;
        assert_eq!(by_owner, toast("Only an approver can decide this."));
        let allowed = desk.press(&press("9", "Val", &format!("tc:{code}"))).await;
        assert_eq!(allowed, PressAnswer::settled("Allowed for this chat.", "✅ Allowed for this chat by Val (telegram:9)."));
        let stored = store.approval(&code).await.unwrap().unwrap();
        assert_eq!((stored.status, stored.decided_by.as_str()), (ApprovalStatus::Allowed, "telegram:9"));
        let again = desk.press(&press("9", "Val", &format!("td:{code}"))).await;
        assert_eq!(again, PressAnswer::settled("This request is no longer open.", "No longer open."));
        let unknown = desk.press(&press("9", "Val", "td:ZZZZZZZZ")).await;
        assert_eq!(unknown, PressAnswer::settled("This request is no longer open.", "No longer open."));
    }

    async fn a_pairing_request_goes_to_the_first_named_owner_else_the_owners_direct_chats(fresh) {
        let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(16));
        let mut out = bus.outbound("telegram").await.unwrap();
        let store = Arc::clone(&fresh.store);

        desk(&store, &bus, &["discord:3", "telegram:2", "telegram:1"], &[]).pairing_requested(&notice()).await;
        let told = next_out(&mut out).await.expect("the named owner is told");
        assert_eq!((told.chat_id.as_str(), told.to_user()), ("2", true));
        assert_eq!(told.buttons, [vec![Button::new("Approve", "pa:ABCD2345"), Button::new("Deny", "pd:ABCD2345")]]);
        assert!(told.content.contains("**Eve** (@eve, id 555 on Telegram) asks to talk to me."), "{}", told.content);
        assert!(next_out(&mut out).await.is_none(), "only the first named owner");

        // No owner named on Telegram: the owners who wrote to the bot there, each once.
        let now = switchboard::clock::now();
        let dm = |chat: &str| ChatAddress { channel: "telegram".into(), chat_id: chat.into(), thread_id: None, is_group: false };
        store.record_owner_chat("main", &Identity::new("telegram", "7"), &dm("70"), now).await.unwrap();
        store.record_owner_chat("main", &Identity::new("telegram", "8"), &dm("80"), now).await.unwrap();
        let discord = ChatAddress { channel: "discord".into(), ..dm("90") };
        store.record_owner_chat("main", &Identity::new("discord", "3"), &discord, now).await.unwrap();
        desk(&store, &bus, &["discord:3"], &[]).pairing_requested(&notice()).await;
        let mut chats = Vec::new();
        while let Some(told) = next_out(&mut out).await {
            assert!(!told.to_user() && told.buttons.len() == 1, "{told:?}");
            chats.push(told.chat_id);
        }
        chats.sort();
        assert_eq!(chats, ["70", "80"]);
    }
}

/// With nobody to tell, the request is only logged: the code still works from the shell.
#[tokio::test]
async fn a_pairing_request_without_any_owner_tells_nobody() {
    let fresh = crate::stores::Fresh::sqlite().await;
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new(16));
    let mut out = bus.outbound("telegram").await.unwrap();
    desk(&fresh.store, &bus, &[], &[]).pairing_requested(&notice()).await;
    assert!(next_out(&mut out).await.is_none());
}
