//! Users, permission levels and budgets: the worker on the in-process bus with a real SQLite
//! store and the scripted model server, and the `switchboard users` commands through the binary.

use crate::common::{BusKind, NamedTool, Setup};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};
use futures_util::StreamExt;
use switchboard::config::{BudgetsConfig, PermissionsConfig, UsersConfig};
use switchboard::config::{Identity, Level};
use switchboard::store::RunStatus;
use switchboard::store::sqlite::SqliteStore;
use switchboard::store::users::{LinkOutcome, UserStore};
use switchboard::tools::Tool;
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard_channels::contract::{InboundKind, InboundMessage, OutboundKind, OutboundMessage, Sender};
use switchboard_channels::subject::Flow;
use switchboard_channels::{BusExt, Deliveries};

/// The shared worker harness, the chat's outbound stream and the policy's clock.
struct Harness {
    base: crate::common::Harness,
    out: Deliveries,
    /// What the worker's policy takes as "now".
    clock: Arc<Mutex<DateTime<Utc>>>,
}

fn jan_31() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 31, 23, 0, 0).unwrap()
}

fn policy(owners: &[&str], budgets: BudgetsConfig) -> AccessPolicy {
    let users = UsersConfig { owners: owners.iter().map(|o| o.to_string()).collect(), ..UsersConfig::default() };
    AccessPolicy::from_config(&users, &PermissionsConfig::default(), &budgets).unwrap()
}

/// The worker's agent has three dummy tools besides the built-ins (and no `message` tool).
async fn start(policy: AccessPolicy) -> Harness {
    let clock = Arc::new(Mutex::new(jan_31()));
    let now = Arc::clone(&clock);
    let access = policy.with_clock(Arc::new(move || *now.lock().unwrap()));
    let dummies: Vec<Arc<dyn Tool>> = ["exec", "write_file", "brand_new_tool"]
        .into_iter()
        .map(|name| Arc::new(NamedTool(name)) as Arc<dyn Tool>)
        .collect();
    let settings = WorkerSettings { access, ..WorkerSettings::default() };
    let base = Setup { settings, message_tool: false, tools: dummies, ..Setup::new(BusKind::InProcess) }.start().await;
    let out = base.outbound("test").await;
    Harness { base, out, clock }
}

fn from(sender: &str, content: &str) -> InboundMessage {
    let sender = Sender { id: sender.into(), name: format!("{sender} name"), is_bot: false };
    // One chat per sender, so their runs do not queue behind each other.
    InboundMessage::user("test", &format!("chat-{}", sender.id), sender, content)
}

impl Harness {
    /// Sends a message and waits for its answer.
    async fn ask(&mut self, msg: &InboundMessage) -> OutboundMessage {
        self.base.bus.publish_inbound(msg).await.unwrap();
        let reply = next_reply(&mut self.out).await;
        assert_eq!(reply.in_reply_to.as_deref(), Some(msg.id.as_str()));
        reply
    }

    /// The tool names offered in the `i`-th model request.
    fn offered(&self, i: usize) -> Vec<String> {
        self.base.offered_tools(i)
    }

    fn set_now(&self, now: DateTime<Utc>) {
        *self.clock.lock().unwrap() = now;
    }

    async fn user_of(&self, identity: &str) -> switchboard::store::users::User {
        let identity: Identity = identity.parse().unwrap();
        self.base.store.resolve_user(&identity, "", Level::Guest).await.unwrap()
    }

    async fn used(&self, identity: &str, month: &str) -> u64 {
        let user = self.user_of(identity).await;
        let usage = self.base.store.monthly_usage(user.id, month).await.unwrap();
        usage.input_tokens + usage.output_tokens
    }
}

async fn next_reply(out: &mut Deliveries) -> OutboundMessage {
    let delivery = tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("no reply").unwrap().unwrap();
    let reply = delivery.decode().unwrap();
    delivery.ack().await.unwrap();
    reply
}

async fn no_more_replies(out: &mut Deliveries) {
    if let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_millis(500), out.next()).await {
        panic!("unexpected reply {:?}", String::from_utf8_lossy(&d.payload));
    }
}

#[tokio::test]
async fn a_first_message_creates_a_guest_who_is_offered_guest_tools_only() {
    let mut h = start(AccessPolicy::default()).await;
    let reply = h.ask(&from("alice", "hello")).await;
    assert_eq!(reply.content, "echo: hello");
    assert_eq!(h.offered(0), ["current_time"]);

    let users = h.base.store.list_users("2025-01").await.unwrap();
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(users[0].user.level, Level::Guest);
    assert_eq!(users[0].identities, [(Identity::new("test", "alice"), "alice name".to_owned())]);
    assert!(users[0].used.input_tokens > 0, "the run's usage is counted in the injected month");
}

#[tokio::test]
async fn higher_levels_and_configured_owners_are_offered_more_tools() {
    let mut h = start(policy(&["test:boss"], BudgetsConfig::default())).await;
    h.base.store.set_level(&Identity::new("test", "ann"), Level::Admin).await.unwrap();
    h.base.store.set_level(&Identity::new("test", "uma"), Level::User).await.unwrap();
    // Stored as a guest, but listed in users.owners: acts as owner all the same.
    h.base.store.set_level(&Identity::new("test", "boss"), Level::Guest).await.unwrap();
    for sender in ["uma", "ann", "boss"] {
        h.ask(&from(sender, "hi")).await;
    }
    assert_eq!(h.offered(0), ["current_time", "write_file"]);
    assert_eq!(h.offered(1), ["current_time", "exec", "write_file"]);
    // Tools the config does not list are for owners only.
    assert_eq!(h.offered(2), ["brand_new_tool", "current_time", "exec", "write_file"]);
}

#[tokio::test]
async fn a_configured_owner_is_created_as_owner() {
    let mut h = start(policy(&["test:boss"], BudgetsConfig::default())).await;
    h.ask(&from("boss", "hi")).await;
    assert_eq!(h.user_of("test:boss").await.level, Level::Owner);
}

#[tokio::test]
async fn concurrent_first_messages_make_one_user() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    // Two stores on one file, like two worker processes.
    let stores = [SqliteStore::open(&path).await.unwrap(), SqliteStore::open(&path).await.unwrap()];
    let identity = Identity::new("telegram", "42");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let (store, identity) = (stores[i % 2].clone(), identity.clone());
        tasks.spawn(async move { store.resolve_user(&identity, "Zed", Level::Guest).await.unwrap().id });
    }
    let ids: Vec<_> = tasks.join_all().await;
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(stores[0].list_users("2025-01").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_guest_over_budget_gets_a_notice_and_the_model_is_not_called() {
    let mut h = start(policy(&[], BudgetsConfig { guest: 1, ..BudgetsConfig::default() })).await;
    assert_eq!(h.ask(&from("alice", "first")).await.content, "echo: first");
    let notice = h.ask(&from("alice", "second")).await;
    assert_eq!(notice.kind, OutboundKind::Notice);
    assert_eq!(notice.content, "You have used this month's allowance (1 tokens). It resets on 1 February 2025 (UTC).");
    assert_eq!(h.base.llm.requests().len(), 1, "no model call for the refused message");
    // The worker marks the reply delivered just after publishing it: give it a moment.
    let mut runs = h.base.store.recent_runs(10).await.unwrap();
    for _ in 0..100 {
        if runs[0].reply_delivered {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        runs = h.base.store.recent_runs(10).await.unwrap();
    }
    assert_eq!(runs.len(), 2);
    assert_eq!((runs[0].status, runs[0].iterations, runs[0].reply_delivered), (RunStatus::Completed, 0, true));
    // The refused message stays out of the model's history.
    let history = h.base.store.history("test:chat-alice", 10).await.unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
}

#[tokio::test]
async fn usage_accumulates_per_month_and_a_new_month_starts_from_zero() {
    let mut h = start(policy(&[], BudgetsConfig { guest: 1, ..BudgetsConfig::default() })).await;
    h.ask(&from("alice", "in january")).await;
    let january = h.used("test:alice", "2025-01").await;
    assert!(january > 0);
    assert_eq!(h.ask(&from("alice", "still january")).await.kind, OutboundKind::Notice);

    h.set_now(Utc.with_ymd_and_hms(2025, 2, 1, 0, 0, 0).unwrap());
    assert_eq!(h.ask(&from("alice", "in february")).await.content, "echo: in february");
    assert_eq!(h.base.llm.requests().len(), 2);
    assert_eq!(h.used("test:alice", "2025-01").await, january, "january is left as it was");
    assert!(h.used("test:alice", "2025-02").await > 0);

    // Unlimited budgets still count.
    h.base.store.set_budget(&Identity::new("test", "alice"), Some(0), Level::Guest).await.unwrap();
    let before = h.used("test:alice", "2025-02").await;
    h.ask(&from("alice", "more")).await;
    assert!(h.used("test:alice", "2025-02").await > before);
}

#[tokio::test]
async fn linked_identities_share_one_user_and_one_budget() {
    let mut h = start(AccessPolicy::default()).await;
    h.ask(&from("alice", "from telegram")).await;
    h.ask(&from("alice-d", "from discord")).await;
    let (a, b) = (h.used("test:alice", "2025-01").await, h.used("test:alice-d", "2025-01").await);

    let (first, second) = (Identity::new("test", "alice"), Identity::new("test", "alice-d"));
    let outcome = h.base.store.link(&first, &second, Level::Guest).await.unwrap();
    assert!(matches!(outcome, LinkOutcome::Merged { .. }), "{outcome:?}");
    let users = h.base.store.list_users("2025-01").await.unwrap();
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(users[0].identities.len(), 2);
    assert_eq!(h.used("test:alice-d", "2025-01").await, a + b, "the merged user's usage moved over");

    // Whatever either identity uses counts against the one budget.
    h.base.store.set_budget(&first, Some(a + b + 1), Level::Guest).await.unwrap();
    h.ask(&from("alice-d", "one more")).await;
    assert_eq!(h.ask(&from("alice", "and another")).await.kind, OutboundKind::Notice);
    assert_eq!(h.base.llm.requests().len(), 3);
    // Linking again changes nothing.
    let again = h.base.store.link(&first, &second, Level::Guest).await.unwrap();
    assert!(matches!(again, LinkOutcome::AlreadyLinked { .. }), "{again:?}");
}

#[tokio::test]
async fn a_redelivered_message_is_counted_once() {
    let mut h = start(AccessPolicy::default()).await;
    let m = from("alice", "count me once");
    let payload = Bytes::from(serde_json::to_vec(&m).unwrap());
    for _ in 0..2 {
        h.base.bus.publish_raw(Flow::In, "test", &m.chat_id, None, payload.clone()).await.unwrap();
    }
    next_reply(&mut h.out).await;
    no_more_replies(&mut h.out).await;
    // And once more after the run finished.
    h.base.bus.publish_raw(Flow::In, "test", &m.chat_id, None, payload).await.unwrap();
    no_more_replies(&mut h.out).await;
    let runs = h.base.store.recent_runs(10).await.unwrap();
    assert_eq!(runs.len(), 1);
    let run_tokens = runs[0].usage.input_tokens + runs[0].usage.output_tokens;
    assert_eq!(h.used("test:alice", "2025-01").await, run_tokens);
}

#[tokio::test]
async fn system_messages_run_as_owner_and_count_against_no_one() {
    let mut h = start(policy(&[], BudgetsConfig { guest: 1, ..BudgetsConfig::default() })).await;
    let mut cron = from("cron", "daily summary");
    cron.kind = InboundKind::System;
    h.ask(&cron).await;
    assert_eq!(h.offered(0), ["brand_new_tool", "current_time", "exec", "write_file"]);
    assert!(h.base.store.list_users("2025-01").await.unwrap().is_empty(), "no user for switchboard itself");
}

/// Runs `switchboard users …` with the data dir and returns (success, stdout, stderr).
fn users_cli(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut full = vec!["users"];
    full.extend_from_slice(args);
    let mut env = env.to_vec();
    env.push(("SWITCHBOARD_LOG", "warn"));
    let (status, stderr, stdout) = crate::support::run_to_exit(dir, &full, &env);
    (status.success(), stdout, stderr)
}

#[tokio::test]
async fn the_users_commands_list_link_and_set_levels_and_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    let (ok, out, err) = users_cli(path, &["set-level", "telegram:1", "admin"], &[]);
    assert!(ok, "{err}");
    assert_eq!(out, "telegram:1 (user 1) is now admin.\n");

    let (ok, out, err) = users_cli(path, &["set-budget", "discord:2", "500"], &[]);
    assert!(ok, "{err}");
    assert_eq!(out, "discord:2 (user 2): monthly budget is now 500 tokens (own).\n");

    let (ok, out, err) = users_cli(path, &["link", "telegram:1", "discord:2"], &[]);
    assert!(ok, "{err}");
    assert!(out.starts_with("discord:2 belonged to user 2: merged it into user 1 (telegram:1)"), "{out}");
    assert!(out.contains("User 2 was guest with its own budget of 500 tokens"), "{out}");

    let (ok, out, err) = users_cli(path, &["link", "telegram:1", "api:me"], &[]);
    assert!(ok, "{err}");
    assert_eq!(out, "api:me now belongs to user 1 with telegram:1.\n");

    let (ok, out, err) = users_cli(path, &["list"], &[]);
    assert!(ok, "{err}");
    let row = out.lines().nth(1).unwrap();
    assert!(row.contains(" admin ") && row.contains("unlimited (admin level)"), "{out}");
    assert!(row.ends_with("api:me, discord:2, telegram:1"), "{out}");
    assert_eq!(out.lines().count(), 3, "one user: {out}");

    // Configured owners show as owners.
    let (ok, out, _) = users_cli(path, &["list"], &[("SWITCHBOARD_USERS__OWNERS", r#"["api:me"]"#)]);
    assert!(ok && out.lines().nth(1).unwrap().contains(" owner "), "{out}");

    let (ok, out, err) = users_cli(path, &["set-budget", "api:me", "default"], &[]);
    assert!(ok, "{err}");
    assert_eq!(out, "api:me (user 1): monthly budget is now unlimited (admin level).\n");

    let (ok, _, err) = users_cli(path, &["set-level", "telegram", "admin"], &[]);
    assert!(!ok && err.contains("is not an identity (expected channel:sender_id"), "{err}");
    let (ok, _, err) = users_cli(path, &["set-level", "telegram:1", "root"], &[]);
    assert!(!ok && err.contains("is not a level"), "{err}");
    let (ok, _, err) = users_cli(path, &["link", "api:me", "api:me"], &[]);
    assert!(!ok && err.contains("cannot link api:me to itself"), "{err}");
    // Identities no sender can have are refused, not stored.
    let (ok, _, err) = users_cli(path, &["set-level", "telegarm:1", "owner"], &[]);
    assert!(!ok && err.contains("switchboard has no channel \"telegarm\"; did you mean telegram:1?"), "{err}");
    let (ok, _, err) = users_cli(path, &["set-level", "my adapter:1", "owner"], &[]);
    assert!(!ok && err.contains("cannot be a channel name"), "{err}");
    let (ok, _, err) = users_cli(path, &["set-level", "telegram:me", "owner"], &[]);
    assert!(!ok && err.contains("telegram user ids are numbers"), "{err}");
    let (ok, _, err) = users_cli(path, &["link", "telegram:1", "discord:@bob"], &[]);
    assert!(!ok && err.contains("discord user ids are numbers"), "{err}");
    // Raising an API identity while the API has no token says what that means.
    let (ok, out, err) = users_cli(path, &["set-level", "api:api", "owner"], &[]);
    assert!(ok && out.contains("is now owner"), "{err}");
    assert!(err.contains("warning: the API has no token") && err.contains("exec included"), "{err}");
    let token = [("SWITCHBOARD_CHANNELS__API__TOKEN", "sk-local-secret")];
    let (ok, _, err) = users_cli(path, &["set-level", "api:api", "owner"], &token);
    assert!(ok && !err.contains("warning"), "{err}");
    let (ok, _, err) = users_cli(path, &["set-level", "api:api", "user"], &[]);
    assert!(ok && !err.contains("warning"), "{err}");

    // The data is where the daemon will find it.
    let store = SqliteStore::open(&path.join("switchboard.db")).await.unwrap();
    let users = store.list_users("2025-01").await.unwrap();
    assert_eq!(users.len(), 2, "the linked user and api:api");
    assert_eq!((users[0].user.level, users[0].user.budget), (Level::Admin, None));
}

/// A third-party adapter on the bus (docs/bus.md) publishes under a channel name of its own:
/// its people can be given a level, with a warning while the config names no such channel
/// (their messages only match once an adapter publishes under it), and none once it does.
#[tokio::test]
async fn people_of_a_third_party_adapter_can_be_given_a_level() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    let (ok, out, err) = users_cli(path, &["set-level", "zulip:@ann:example.org", "user"], &[]);
    assert!(ok, "{err}");
    assert_eq!(out, "zulip:@ann:example.org (user 1) is now user.\n");
    assert!(err.contains("warning: no adapter named \"zulip\" is built in or named in the config"), "{err}");
    assert!(err.contains("\"channel\": \"zulip\" (docs/bus.md)"), "{err}");

    // Named in the config (here by an owner on that channel): no warning.
    let groups = [("SWITCHBOARD_USERS__OWNERS", r#"["zulip:@me:example.org"]"#)];
    let (ok, out, err) = users_cli(path, &["set-level", "zulip:@bob:example.org", "admin"], &groups);
    assert!(ok && out == "zulip:@bob:example.org (user 2) is now admin.\n", "{out}\n{err}");
    assert!(!err.contains("warning"), "{err}");
    let (ok, out, err) = users_cli(path, &["link", "zulip:@bob:example.org", "telegram:7"], &groups);
    assert!(ok && out.contains("telegram:7 now belongs to user 2"), "{out}\n{err}");

    let (ok, out, err) = users_cli(path, &["list"], &[]);
    assert!(ok, "{err}");
    assert!(out.lines().nth(1).is_some_and(|row| row.contains(" user ") && row.ends_with("zulip:@ann:example.org")));
    let bob = out.lines().nth(2).unwrap_or_default();
    assert!(bob.contains(" admin ") && bob.ends_with("telegram:7, zulip:@bob:example.org"), "{out}");
}

/// What a guest's trial costs, measured rather than assumed: one conversation of messages of
/// about 150 characters answered with about 600 (a brief chat answer), against the system
/// prompt of a workspace `switchboard init` wrote, the default operator prompt and the tools a
/// guest is offered, with the history growing turn by turn as the default history settings
/// keep it. The model reports usage as real servers do (about four characters a token, tool
/// schemas included). The default guest budget must last for at least 50 such messages.
#[tokio::test]
async fn the_default_guest_budget_lasts_a_trial_of_fifty_messages() {
    const AT_LEAST: usize = 50;
    let mut agent = crate::common::AgentSpec::new("main", "fake-model", "workspace");
    agent.system_prompt = switchboard::config::Config::default().agent.system_prompt;
    let settings = WorkerSettings {
        // Not a queueing test: each message is answered before the next is sent.
        queue: switchboard::worker::QueueSettings { debounce: Duration::ZERO, ..Default::default() },
        ..WorkerSettings::default()
    };
    let llm = switchboard_testkit::fake_llm::FakeLlm::start().await;
    let answer = "Here is what I found. ".repeat(27); // 594 characters
    for _ in 0..4 * AT_LEAST {
        llm.push(switchboard_testkit::fake_llm::Scripted::Text(answer.clone()));
    }
    let h = Setup { settings, llm: Some(llm), agents: vec![agent], ..Setup::new(BusKind::InProcess) }.start().await;
    switchboard::workspace::init::write_workspace(&h.workspace).unwrap();
    let mut out = h.outbound("test").await;

    let mut answered = 0;
    let refused = loop {
        let text = format!("Question {answered}: {}", "what would you suggest for this week's plans? ".repeat(3));
        h.send(&from("trial", &text)).await;
        let reply = next_reply(&mut out).await;
        if reply.kind == OutboundKind::Notice {
            break reply;
        }
        answered += 1;
        assert!(answered < 4 * AT_LEAST, "the guest budget never ran out");
    };
    assert!(refused.content.starts_with("You have used this month's allowance"), "{}", refused.content);
    // The turns were the size they claim: a guest's prompt, one tool, the whole init workspace.
    let first = &h.llm.requests()[0];
    let system = first["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("## AGENTS.md"), "{system}");
    let line = switchboard_testkit::fake_llm::context_lines(first).pop().flatten().unwrap_or_default();
    assert!(line.contains("level guest"), "{line}");
    assert_eq!(first["tools"].as_array().map(Vec::len), Some(1), "{}", first["tools"]);
    assert!(answered >= AT_LEAST, "the default guest budget lasted {answered} messages");
}
