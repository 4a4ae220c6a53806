//! Group access (`[users.groups]`) and `/usage`: the worker on the in-process bus with a real
//! SQLite store and the scripted model, fed the messages the Telegram and Discord channels
//! publish (their shapes: negative Telegram group ids, Discord's `guild_id` metadata, threads
//! under their parent channel).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use futures_util::StreamExt;
use serde_json::Value;
use switchboard::config::{BudgetsConfig, GroupAccessConfig, PermissionsConfig, UsersConfig};
use switchboard::config::{Identity, Level};
use switchboard::tools::Tool;
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard_channels::Deliveries;
use switchboard_channels::contract::{InboundMessage, OutboundKind, OutboundMessage, Sender};

use crate::common::{BusKind, NamedTool, Setup};

mod channels;

const FAMILY: &str = "-1001234567890";
const OTHER_GROUP: &str = "-1009876543210";
const GUILD: &str = "100";
const CHANNEL: &str = "200";
const THREAD: &str = "400";
/// What a guest is offered, and what a user is (of the tools the test agent has).
pub(crate) const GUEST_TOOLS: [&str; 1] = ["current_time"];
pub(crate) const USER_TOOLS: [&str; 2] = ["current_time", "write_file"];

struct Harness {
    base: crate::common::Harness,
    telegram: Deliveries,
    discord: Deliveries,
}

pub(crate) fn policy(groups: &[(&str, Level, u64)], budgets: BudgetsConfig) -> AccessPolicy {
    let groups =
        groups.iter().map(|&(key, level, budget)| (key.to_owned(), GroupAccessConfig { level, budget })).collect();
    let users = UsersConfig { owners: vec!["telegram:1".into()], groups, ..UsersConfig::default() };
    AccessPolicy::from_config(&users, &PermissionsConfig::default(), &budgets).unwrap()
}

fn mid_january() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 14, 9, 30, 0).unwrap()
}

async fn start(policy: AccessPolicy) -> Harness {
    let now = Arc::new(Mutex::new(mid_january()));
    let access = policy.with_clock(Arc::new(move || *now.lock().unwrap()));
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(NamedTool("write_file")), Arc::new(NamedTool("exec"))];
    let settings = WorkerSettings { access, ..WorkerSettings::default() };
    let base = Setup { settings, message_tool: false, tools, ..Setup::new(BusKind::InProcess) }.start().await;
    let telegram = base.outbound("telegram").await;
    let discord = base.outbound("discord").await;
    Harness { base, telegram, discord }
}

fn sender(id: &str) -> Sender {
    Sender { id: id.into(), name: format!("{id} name"), is_bot: false }
}

/// A message in a Telegram group (a supergroup's negative id), as the channel publishes it.
fn in_telegram_group(chat: &str, from: &str, text: &str) -> InboundMessage {
    let mut msg = InboundMessage::user("telegram", chat, sender(from), text);
    msg.is_group = true;
    msg.mentioned = true;
    msg
}

/// The echo of a group member's message: the message's context line names them instead of
/// a prefix, and the fake echoes the text alone.
fn group_echo(_from: &str, text: &str) -> String {
    format!("echo: {text}")
}

/// A direct message on Telegram: the chat is the person.
fn telegram_dm(from: &str, text: &str) -> InboundMessage {
    InboundMessage::user("telegram", from, sender(from), text)
}

/// A message in a Discord server's channel, or in a thread under it.
fn on_discord(guild: &str, channel: &str, thread: Option<&str>, from: &str, text: &str) -> InboundMessage {
    let mut msg = InboundMessage::user("discord", channel, sender(from), text);
    msg.is_group = true;
    msg.mentioned = true;
    msg.thread_id = thread.map(str::to_owned);
    msg.metadata.insert("guild_id".into(), Value::String(guild.into()));
    msg
}

impl Harness {
    async fn ask(&mut self, msg: &InboundMessage) -> OutboundMessage {
        self.base.send(msg).await;
        let out = if msg.channel == "telegram" { &mut self.telegram } else { &mut self.discord };
        let delivery =
            tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("no reply").unwrap().unwrap();
        let reply: OutboundMessage = delivery.decode().unwrap();
        delivery.ack().await.unwrap();
        assert_eq!(reply.in_reply_to.as_deref(), Some(msg.id.as_str()));
        reply
    }

    /// The tool names the `i`-th model request offered.
    fn offered(&self, i: usize) -> Vec<String> {
        self.base.offered_tools(i)
    }

    fn model_calls(&self) -> usize {
        self.base.llm.requests().len()
    }

    async fn used_by(&self, identity: &str) -> u64 {
        let identity: Identity = identity.parse().unwrap();
        let user = self.base.store.resolve_user(&identity, "", Level::Guest).await.unwrap();
        let used = self.base.store.monthly_usage(user.id, "2025-01").await.unwrap();
        used.input_tokens + used.output_tokens
    }

    async fn used_by_group(&self, group: &str) -> u64 {
        let used = self.base.store.group_usage(group, "2025-01").await.unwrap();
        used.input_tokens + used.output_tokens
    }
}

#[tokio::test]
async fn a_configured_telegram_group_gives_a_new_member_its_level_there_only() {
    let family = format!("telegram:{FAMILY}");
    let mut h = start(policy(&[(&family, Level::User, 0)], BudgetsConfig::default())).await;
    assert_eq!(h.ask(&in_telegram_group(FAMILY, "55", "hello family")).await.content, group_echo("55", "hello family"));
    assert_eq!(h.offered(0), USER_TOOLS, "a new member of the family group gets the user tools there");
    h.ask(&telegram_dm("55", "hello in private")).await;
    assert_eq!(h.offered(1), GUEST_TOOLS, "in their DM they are a guest");
    h.ask(&in_telegram_group(OTHER_GROUP, "55", "hello elsewhere")).await;
    assert_eq!(h.offered(2), GUEST_TOOLS, "and in a group that is not configured");
    // A forum topic of the family group belongs to it.
    let mut topic = in_telegram_group(FAMILY, "55", "in a topic");
    topic.thread_id = Some("7".into());
    h.ask(&topic).await;
    assert_eq!(h.offered(3), USER_TOOLS);

    // The group never lowers anyone: an admin keeps exec there, the configured owner everything.
    h.base.store.set_level(&Identity::new("telegram", "66"), Level::Admin).await.unwrap();
    h.ask(&in_telegram_group(FAMILY, "66", "admin here")).await;
    assert_eq!(h.offered(4), ["current_time", "exec", "write_file"]);
    h.ask(&in_telegram_group(FAMILY, "1", "owner here")).await;
    assert_eq!(h.offered(5), ["current_time", "exec", "write_file"]);

    // Stored at their own level: the group's applies only while they write in it.
    let users = h.base.store.list_users("2025-01").await.unwrap();
    let member = users.iter().find(|u| u.identities[0].0 == Identity::new("telegram", "55")).unwrap();
    assert_eq!(member.user.level, Level::Guest);
    // Every run in the group and its topic counts for the group too; the others do not.
    let runs = h.base.store.recent_runs(10).await.unwrap();
    let tokens = |run: &&switchboard::store::RunRecord| run.usage.input_tokens + run.usage.output_tokens;
    let in_family: u64 = runs.iter().filter(|run| run.session_key.starts_with(&family)).map(|run| tokens(&run)).sum();
    assert_eq!(runs.len(), 6);
    assert!(in_family > 0 && in_family < runs.iter().map(|run| tokens(&run)).sum::<u64>());
    assert_eq!(h.used_by_group(&family).await, in_family);
}

#[tokio::test]
async fn a_discord_server_entry_covers_its_channels_and_threads() {
    let guild = format!("discord:guild:{GUILD}");
    let mut h =
        start(policy(&[(&guild, Level::User, 0), ("discord:201", Level::Guest, 0)], BudgetsConfig::default())).await;
    h.ask(&on_discord(GUILD, CHANNEL, None, "77", "in the channel")).await;
    assert_eq!(h.offered(0), USER_TOOLS);
    h.ask(&on_discord(GUILD, CHANNEL, Some(THREAD), "77", "in a thread")).await;
    assert_eq!(h.offered(1), USER_TOOLS);
    h.ask(&on_discord("999", "300", None, "77", "another server")).await;
    assert_eq!(h.offered(2), GUEST_TOOLS);
    // A channel's own entry wins over its server's.
    h.ask(&on_discord(GUILD, "201", None, "77", "the channel with its own entry")).await;
    assert_eq!(h.offered(3), GUEST_TOOLS);
    let mut dm = InboundMessage::user("discord", "300", sender("77"), "in a DM");
    dm.is_group = false;
    h.ask(&dm).await;
    assert_eq!(h.offered(4), GUEST_TOOLS);
}

#[tokio::test]
async fn a_used_up_shared_budget_stops_the_group_but_not_the_members_dms() {
    let family = format!("telegram:{FAMILY}");
    let mut h = start(policy(&[(&family, Level::User, 1)], BudgetsConfig::default())).await;
    assert_eq!(h.ask(&in_telegram_group(FAMILY, "55", "first")).await.content, group_echo("55", "first"));
    // Anyone else in the group now gets the notice, and the model is not called.
    let notice = h.ask(&in_telegram_group(FAMILY, "56", "second")).await;
    assert_eq!(notice.kind, OutboundKind::Notice);
    assert_eq!(
        notice.content,
        "This group has used its shared allowance for this month (1 tokens). It resets on 1 February 2025 (UTC)."
    );
    assert_eq!(h.model_calls(), 1);
    // Their own chats are not the group's.
    assert_eq!(h.ask(&telegram_dm("56", "in private")).await.content, "echo: in private");
    assert_eq!(h.model_calls(), 2);
    let runs = h.base.store.recent_runs(10).await.unwrap();
    // The group's usage is its runs' (the refused one used nothing).
    let in_group: u64 = runs
        .iter()
        .filter(|run| run.session_key == family)
        .map(|run| run.usage.input_tokens + run.usage.output_tokens)
        .sum();
    assert!(in_group > 0);
    assert_eq!(h.used_by_group(&family).await, in_group);
}

#[tokio::test]
async fn a_members_own_budget_still_applies_in_the_group() {
    let family = format!("telegram:{FAMILY}");
    let budgets = BudgetsConfig { user: 1, ..BudgetsConfig::default() };
    let mut h = start(policy(&[(&family, Level::User, 0)], budgets)).await;
    h.ask(&in_telegram_group(FAMILY, "55", "first")).await;
    let notice = h.ask(&in_telegram_group(FAMILY, "55", "second")).await;
    assert!(notice.content.starts_with("You have used this month's allowance (1 tokens)."), "{}", notice.content);
    // Another member is not stopped by it.
    assert_eq!(h.ask(&in_telegram_group(FAMILY, "56", "third")).await.content, group_echo("56", "third"));
    assert_eq!(h.model_calls(), 2);
}

#[tokio::test]
async fn usage_shows_level_used_left_reset_and_the_pool_without_a_model_call() {
    let family = format!("telegram:{FAMILY}");
    let mut h = start(policy(&[(&family, Level::User, 5_000_000)], BudgetsConfig::default())).await;
    h.ask(&in_telegram_group(FAMILY, "55", "hello")).await;
    let used = h.used_by("telegram:55").await;
    let group_used = h.used_by_group(&family).await;

    let report = h.ask(&in_telegram_group(FAMILY, "55", "/usage")).await;
    assert_eq!(report.kind, OutboundKind::Notice);
    assert_eq!(
        report.content,
        format!(
            "Your level here: user (this group's; your own is guest)\nTokens you used in January 2025: {used}\n\
             Your allowance: 1000000 tokens a month, {} left\n\
             This group's shared allowance: 5000000 tokens a month, {group_used} used, {} left\n\
             Counts start again on 1 February 2025 (UTC).",
            1_000_000 - used,
            5_000_000 - group_used
        )
    );
    let in_private = h.ask(&telegram_dm("55", "/usage")).await;
    assert_eq!(
        in_private.content,
        format!(
            "Your level: guest\nTokens you used in January 2025: {used}\nYour allowance: 250000 tokens a month, {} \
             left\nCounts start again on 1 February 2025 (UTC).",
            250_000 - used
        )
    );
    let owner = h.ask(&telegram_dm("1", "/usage@switchboard_bot")).await;
    assert!(
        owner.content.starts_with("Your level: owner\nTokens you used in January 2025: 0\nYour allowance: unlimited\n")
    );
    // Asking costs nothing: no model call, nothing counted.
    assert_eq!(h.model_calls(), 1);
    assert_eq!(h.used_by("telegram:55").await, used);
}

#[tokio::test]
async fn usage_answers_a_member_whose_budget_is_used_up() {
    let budgets = BudgetsConfig { guest: 1, ..BudgetsConfig::default() };
    let mut h = start(policy(&[], budgets)).await;
    h.ask(&telegram_dm("55", "hello")).await;
    assert_eq!(h.ask(&telegram_dm("55", "again")).await.kind, OutboundKind::Notice);
    let report = h.ask(&telegram_dm("55", "/usage")).await;
    assert!(report.content.contains("\nYour allowance: 1 tokens a month, 0 left\n"), "{}", report.content);
    assert_eq!(h.model_calls(), 1);
}

#[tokio::test]
async fn users_list_shows_each_group_with_its_level_pool_and_usage() {
    let data = tempfile::tempdir().unwrap();
    let family = format!("telegram:{FAMILY}");
    let settings =
        WorkerSettings { access: policy(&[(&family, Level::User, 0)], BudgetsConfig::default()), ..Default::default() };
    let store_path = Some(data.path().join("switchboard.db"));
    let base = Setup { settings, store_path, ..Setup::new(BusKind::InProcess) }.start().await;
    let mut out = base.outbound("telegram").await;
    base.send(&in_telegram_group(FAMILY, "55", "hello")).await;
    tokio::time::timeout(Duration::from_secs(10), out.next()).await.expect("no reply").unwrap().unwrap();
    let used = base.store.group_usage(&family, &switchboard::users::month_key(Utc::now())).await.unwrap();
    assert!(used.input_tokens > 0);
    base.stop().await;

    let groups =
        format!(r#"{{"{family}" = {{level = "user"}}, "discord:guild:100" = {{level = "admin", budget = 500000}}}}"#);
    let env = [("SWITCHBOARD_USERS__GROUPS", groups.as_str()), ("SWITCHBOARD_LOG", "warn")];
    let (status, stderr, stdout) = crate::support::run_to_exit(data.path(), &["users", "list"], &env);
    assert!(status.success(), "{stderr}");
    let row =
        |key: &str| stdout.lines().find(|line| line.starts_with(key)).unwrap_or_else(|| panic!("{stdout}")).to_owned();
    let words = |line: String| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let total = (used.input_tokens + used.output_tokens).to_string();
    assert_eq!(words(row(&family)), [family.as_str(), "user", "none", total.as_str()]);
    assert_eq!(words(row("discord:guild:100")), ["discord:guild:100", "admin", "500000", "tokens", "0"]);
    // The member is listed at their own level.
    let member = stdout.lines().find(|line| line.contains("telegram:55")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(member.contains(" guest "), "{stdout}");
}
