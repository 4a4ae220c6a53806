//! The owner's chat commands on the worker assembled in-process (real SQLite, the in-process
//! bus, the scripted model): `/users` and `/level` (which changes what a person is offered),
//! `/spend` against the runs it sums, `/cron`'s notices with buttons, and that only the owner,
//! in a direct chat, may use them (and named approvers the ones about tool calls).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use switchboard::config::{ApprovalsConfig, GroupAccessConfig, Identity, Level, ModelPrice, UsersConfig};
use switchboard::schedule::Schedule;
use switchboard::store::RunKind;
use switchboard::store::approvals::{ApprovalStatus, NewApproval};
use switchboard::tools::Tool;
use switchboard::users::AccessPolicy;
use switchboard::worker::{QueueSettings, WorkerSettings};
use switchboard_channels::Deliveries;
use switchboard_channels::contract::{InboundMessage, OutboundMessage, Sender};
use switchboard_channels::control::ButtonAction;
use switchboard_channels::subject::Flow;

use crate::common::{BusKind, Harness, NamedTool, Setup, next_out};
use crate::cron_support::{insert_job, new_job};

const OWNER: &str = "1";
const GROUP: &str = "-100555";

struct Rig {
    h: Harness,
    out: Deliveries,
}

/// A worker whose agent has an `exec` tool (admins only, by default), `[users.groups]` with
/// one Telegram group, a priced model; the owner is an owner in the store.
async fn start() -> Rig {
    start_with(ApprovalsConfig::default()).await
}

/// [`start`] with `approvals` as `[approvals]`.
async fn start_with(approvals: ApprovalsConfig) -> Rig {
    let group = GroupAccessConfig { level: Level::Guest, budget: 0 };
    let users =
        UsersConfig { groups: BTreeMap::from([(format!("telegram:{GROUP}"), group)]), ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &Default::default(), &Default::default()).unwrap();
    let queue = QueueSettings { debounce: Duration::ZERO, ..QueueSettings::default() };
    let settings = WorkerSettings { access, queue, ..WorkerSettings::default() };
    let price = ModelPrice { input_per_mtok: 1000.0, output_per_mtok: 2000.0, ..ModelPrice::default() };
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(NamedTool("exec"))];
    let setup = Setup {
        settings,
        tools,
        message_tool: false,
        prices: BTreeMap::from([("fake-model".to_owned(), price)]),
        approvals,
        ..Setup::new(BusKind::InProcess)
    };
    let h = setup.start().await;
    h.store.set_level(&identity(OWNER), Level::Owner).await.unwrap();
    let out = h.outbound("telegram").await;
    Rig { h, out }
}

fn identity(sender: &str) -> Identity {
    Identity::new("telegram", sender)
}

/// A direct message from `sender`.
fn dm(sender: &str, name: &str, content: &str) -> InboundMessage {
    InboundMessage::user("telegram", sender, Sender { id: sender.into(), name: name.into(), is_bot: false }, content)
}

fn in_group(sender: &str, name: &str, content: &str) -> InboundMessage {
    InboundMessage { is_group: true, chat_id: GROUP.into(), ..dm(sender, name, content) }
}

impl Rig {
    /// Sends `msg`; the notices that came before its answer, and the answer.
    async fn ask(&mut self, msg: &InboundMessage) -> (Vec<OutboundMessage>, String) {
        self.h.send(msg).await;
        let mut before = Vec::new();
        loop {
            let out = next_out(&mut self.out).await;
            if out.in_reply_to.as_deref() == Some(msg.id.as_str()) {
                return (before, out.content);
            }
            before.push(out);
        }
    }

    /// The answer to the owner's `command` in their direct chat.
    async fn owner(&mut self, command: &str) -> String {
        self.ask(&dm(OWNER, "Olga", command)).await.1
    }
}

#[tokio::test]
async fn the_owner_lists_people_and_a_new_level_changes_what_they_are_offered() {
    let mut rig = start().await;
    rig.ask(&dm("2", "Ann", "hi")).await;
    rig.ask(&dm("3", "Anna", "hello")).await;
    assert!(!rig.h.offered_tools(0).contains(&"exec".to_owned()), "a guest is not offered exec");

    let users = rig.owner("/users").await;
    let ann = rig.h.store.resolve_user(&identity("2"), "", Level::Guest).await.unwrap();
    let used = rig.h.store.monthly_usage(ann.id, &switchboard::users::month_key(chrono::Utc::now())).await.unwrap();
    assert!(users.starts_with("People (3), with what they used in "), "{users}");
    assert!(users.contains(&format!("\nAnn, guest: telegram:2; {} tokens, $", used.total())), "{users}");
    assert!(users.contains("\nOlga, owner: telegram:1; nothing yet"), "{users}");

    let several = rig.owner("/level an admin").await;
    assert_eq!(
        several,
        "Several people match an: Ann (telegram:2), Anna (telegram:3). Give one's identity, like telegram:123456."
    );
    assert_eq!(rig.owner("/level ann ADMIN").await, "Ann (telegram:2) is admin now (was guest).");
    assert_eq!(rig.owner("/level @Ann admin").await, "Ann (telegram:2) is admin already.");
    rig.ask(&dm("2", "Ann", "and now?")).await;
    assert!(rig.h.offered_tools(2).contains(&"exec".to_owned()), "{:?}", rig.h.offered_tools(2));

    assert_eq!(
        rig.owner("/level Zed user").await,
        "I know nobody called Zed. /users lists people; an identity like telegram:123456 works too."
    );
    assert_eq!(rig.owner("/level Ann boss").await, "boss is not a level: guest, user, admin, owner.");
    assert!(rig.owner("/level admin").await.starts_with("Use /level <person> <level>"));
    let typo = rig.owner("/level telegram:ann user").await;
    assert!(typo.starts_with("telegram:ann: telegram user ids are numbers"), "{typo}");
    // Someone who never wrote, named by identity, is ready when they do.
    assert_eq!(rig.owner("/level telegram:77 user").await, "telegram:77 is user now (was guest).");

    // A long list is cut, and says how many more there are.
    for n in 100..130 {
        rig.h.store.resolve_user(&identity(&n.to_string()), &format!("P{n}"), Level::Guest).await.unwrap();
    }
    let users = rig.owner("/users").await;
    assert!(users.starts_with("People (34), "), "{users}");
    assert!(users.contains("\n…and 4 more: `switchboard users list` shows everyone.\n"), "{users}");
    assert_eq!(users.lines().count(), 1 + 30 + 2, "{users}");
}

#[tokio::test]
async fn spend_adds_up_the_runs_by_person_and_group() {
    let mut rig = start().await;
    let asked = [dm("2", "Ann", "hi"), in_group("2", "Ann", "hi all"), in_group("3", "Bob", "hey")];
    for msg in &asked {
        rig.ask(msg).await;
    }
    let runs = rig.h.store.recent_runs(50).await.unwrap();
    let sum = |inbound: &[&InboundMessage]| {
        let runs =
            runs.iter().filter(|run| run.kind == RunKind::Turn && inbound.iter().any(|m| m.id == run.inbound_id));
        runs.fold((0, 0.0), |(tokens, usd), run| (tokens + run.usage.total(), usd + run.cost_usd.unwrap()))
    };
    let line = |(tokens, usd): (u64, f64)| format!("{tokens} tokens, ${usd:.4}");
    let spend = rig.owner("/spend").await;
    assert!(spend.contains(&format!(", everyone: {}\n", line(sum(&[&asked[0], &asked[1], &asked[2]])))), "{spend}");
    assert!(spend.contains(&format!("\nAnn (telegram:2): {}", line(sum(&[&asked[0], &asked[1]])))), "{spend}");
    assert!(spend.contains(&format!("\nBob (telegram:3): {}", line(sum(&[&asked[2]])))), "{spend}");
    assert!(spend.contains(&format!("\ntelegram:{GROUP}: {}", line(sum(&[&asked[1], &asked[2]])))), "{spend}");
    assert!(!spend.contains("Olga"), "the owner used nothing: {spend}");
    assert!(!spend.contains("unknown"), "every model has a price: {spend}");
}

#[tokio::test]
async fn cron_shows_each_job_with_its_buttons_and_is_answered_once() {
    let mut rig = start().await;
    let now = chrono::Utc::now();
    let hourly = Schedule::every(Duration::from_secs(3600), now, Duration::from_secs(60)).unwrap();
    let daily = Schedule::every(Duration::from_secs(86_400), now, Duration::from_secs(60)).unwrap();
    let news = insert_job(&rig.h.store, &new_job("Morning news", "Europe/Berlin", hourly, now)).await;
    let plants = insert_job(&rig.h.store, &new_job("Water the plants", "UTC", daily, now)).await;
    rig.h.store.set_cron_enabled(&plants.id, None, false, None).await.unwrap();

    let command = dm(OWNER, "Olga", "/cron");
    let (jobs, reply) = rig.ask(&command).await;
    assert_eq!(reply, "2 cron jobs, above.");
    assert_eq!(jobs.len(), 2, "{jobs:#?}");
    assert!(jobs[0].content.starts_with(&format!("Morning news ({})\nevery 1h", news.id)), "{}", jobs[0].content);
    let next = news
        .job
        .next_run_at
        .unwrap()
        .with_timezone(&"Europe/Berlin".parse::<switchboard::zone::Tz>().unwrap())
        .format("%Y-%m-%d %H:%M %Z");
    assert!(jobs[0].content.ends_with(&format!("\nNext run: {next}")), "{}", jobs[0].content);
    assert_eq!(
        jobs[0].buttons,
        [vec![
            ButtonAction::CronPause(news.id.clone()).button("Pause"),
            ButtonAction::CronDelete(news.id).button("Delete")
        ]]
    );
    assert!(jobs[1].content.ends_with("\nPaused."), "{}", jobs[1].content);
    let resume = ButtonAction::CronResume(plants.id.clone()).data();
    assert_eq!(jobs[1].buttons[0][0].data, resume);
    assert!(jobs.iter().all(|job| job.chat_id == OWNER && job.in_reply_to.is_none()));

    // The same command delivered again (past the bus's dedupe) is not run again: nothing is
    // sent twice.
    let payload = Bytes::from(serde_json::to_vec(&command).unwrap());
    rig.h.bus.publish_raw(Flow::In, "telegram", OWNER, None, payload).await.unwrap();
    rig.h.nothing_more(&mut rig.out).await;

    for n in 0..10 {
        let schedule = Schedule::every(Duration::from_secs(7200), now, Duration::from_secs(60)).unwrap();
        insert_job(&rig.h.store, &new_job(&format!("job {n}"), "UTC", schedule, now)).await;
    }
    let (jobs, reply) = rig.ask(&dm(OWNER, "Olga", "/cron")).await;
    assert_eq!(jobs.len(), 10);
    assert_eq!(reply, "12 cron jobs: the 10 above, and 2 more (`switchboard cron list`, or the owner console).");
}

#[tokio::test]
async fn only_the_owner_in_a_direct_chat_may_use_them() {
    let mut rig = start().await;
    for command in ["/pending", "/users", "/level Ann admin", "/cron", "/spend", "/approve ABCD2345", "/deny ABCD2345"]
    {
        let name = command.split_whitespace().next().unwrap();
        let unknown = format!("Unknown command {name}. /help lists the commands.");
        assert_eq!(rig.ask(&dm("2", "Ann", command)).await.1, unknown, "a guest");
        assert_eq!(rig.ask(&in_group(OWNER, "Olga", command)).await.1, unknown, "the owner in a group");
    }
    let help = rig.owner("/help").await;
    for command in ["/pending", "/approve <code> [chat]", "/users", "/level <person> <level>", "/cron", "/spend"] {
        assert!(help.contains(&format!("\n{command}: ")), "{command}: {help}");
    }
    assert!(!rig.ask(&dm("2", "Ann", "/help")).await.1.contains("/spend"));
    assert_eq!(rig.owner("/pending").await, "Nothing waits for you.");
    assert_eq!(
        rig.owner("/cron").await,
        "No cron jobs. Ask me to remind you of something, or add one with `switchboard cron add`."
    );
}

/// With approvers named, tool calls are theirs to decide, as the buttons have it: the owner,
/// not among them, is refused and not shown the calls; an approver who is not an owner uses
/// `/pending`, `/approve` and `/deny` for calls, and none of the owner's other commands.
#[tokio::test]
async fn named_approvers_decide_tool_calls_and_an_owner_outside_them_is_refused() {
    let approvals =
        ApprovalsConfig { tools: vec!["exec".into()], approvers: vec!["telegram:9".into()], timeout_secs: 600 };
    let mut rig = start_with(approvals).await;
    let request = |chat: &str| NewApproval {
        run_id: format!("run-{chat}"),
        session_key: format!("telegram:{chat}"),
        channel: "telegram".into(),
        chat_id: chat.into(),
        tool: "exec".into(),
        arguments: r#"{"command":"ls"}"#.into(),
        requested_by: format!("telegram:{chat}"),
    };
    let asked = rig.h.store.request_approval(&request("2"), Duration::from_secs(600)).await.unwrap().code;
    let stranger = rig.h.store.request("telegram", "77", "Eve", Duration::from_secs(3600), 10).await.unwrap().unwrap();

    for command in [format!("/approve {asked}"), format!("/approve {asked} chat"), format!("/deny {asked}")] {
        assert_eq!(rig.owner(&command).await, "Only an approver can decide this.", "{command}");
    }
    assert_eq!(rig.h.store.approval(&asked).await.unwrap().unwrap().status, ApprovalStatus::Pending);
    let owners = rig.owner("/pending").await;
    assert!(owners.contains(&stranger.code) && !owners.contains(&asked), "{owners}");

    let approver = |content: &str| dm("9", "Val", content);
    let pending = rig.ask(&approver("/pending")).await.1;
    assert!(pending.contains(&format!("{asked} exec asked by telegram:2 in telegram:2")), "{pending}");
    assert!(!pending.contains(&stranger.code), "pairing requests are the owner's: {pending}");
    let help = rig.ask(&approver("/help")).await.1;
    assert!(help.contains("\n/approve <code> [chat]: ") && !help.contains("/users"), "{help}");
    for command in ["/users", "/level Ann admin", "/cron", "/spend"] {
        let name = command.split_whitespace().next().unwrap();
        assert_eq!(rig.ask(&approver(command)).await.1, format!("Unknown command {name}. /help lists the commands."));
    }
    let refused = rig.ask(&approver(&format!("/approve {}", stranger.code))).await.1;
    assert_eq!(refused, "Only the owner can decide this.");
    assert!(rig.h.store.list_pairings(None).await.unwrap().iter().any(|entry| entry.sender_id == "77"
        && matches!(entry.state, switchboard::store::pairing::PairingState::Pending { .. })));

    let allowed = rig.ask(&approver(&format!("/approve {}", asked.to_lowercase()))).await.1;
    assert_eq!(allowed, format!("{asked}: allowed exec in telegram:2."));
    let stored = rig.h.store.approval(&asked).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.decided_by.as_str()), (ApprovalStatus::Allowed, "telegram:9"));
    let denied = rig.h.store.request_approval(&request("3"), Duration::from_secs(600)).await.unwrap().code;
    assert_eq!(rig.ask(&approver(&format!("/deny {denied}"))).await.1, format!("{denied}: denied exec in telegram:3."));
    // The owner still decides the stranger.
    assert!(rig.owner(&format!("/approve {}", stranger.code)).await.starts_with("Approved Eve (telegram 77)"));
}
