//! Cron on the shared worker harness: the worker's agent has the `cron` tool, a manual
//! clock, and a cron scheduler on the same store and bus.

#![allow(dead_code)]

use std::ops::Deref;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use switchboard::clock::ManualClock;
use switchboard::config::Level;
use switchboard::config::UsersConfig;
use switchboard::schedule::Schedule;
use switchboard::scheduler::{CronScheduler, CronSettings};
use switchboard::store::Database;
use switchboard::store::cron::{AddLimits, AddOutcome, CronJob, CronStore, MissedPolicy, NewCronJob, Payload};
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard_channels::Bus;
use switchboard_channels::contract::{ChatAddress, InboundMessage, Sender};
use switchboard_testkit::fake_llm::FakeLlm;

use crate::common::{BusKind, Setup};

/// The shared harness's worker, with the clock, the settings and a scheduler of its own.
pub struct Harness {
    pub base: crate::common::Harness,
    pub clock: ManualClock,
    pub settings: CronSettings,
    pub scheduler: CronScheduler,
}

/// The worker's fields (`bus`, `store`, `llm`, `dir`) read as the cron harness's own.
impl Deref for Harness {
    type Target = crate::common::Harness;

    fn deref(&self) -> &crate::common::Harness {
        &self.base
    }
}

/// Now, with the sub-millisecond digits of a real clock: the worker drops messages older than
/// an hour by the real clock, so the manual one starts at the real time.
pub fn start_time() -> DateTime<Utc> {
    crate::common::real_now()
}

pub async fn start(kind: BusKind) -> Harness {
    start_with(kind, CronSettings { default_timezone: "UTC".into(), ..CronSettings::default() }).await
}

pub async fn start_with(kind: BusKind, settings: CronSettings) -> Harness {
    let clock = ManualClock::new(start_time());
    let base = worker_setup(kind, &clock, &settings).start().await;
    let scheduler = scheduler(&base.store, &base.bus, &clock, &settings);
    Harness { base, clock, settings, scheduler }
}

pub fn scheduler(
    store: &Arc<dyn Database>,
    bus: &Arc<dyn Bus>,
    clock: &ManualClock,
    settings: &CronSettings,
) -> CronScheduler {
    let store = Arc::clone(store) as Arc<dyn CronStore>;
    CronScheduler::new(store, Arc::clone(bus), clock.clock(), settings.clone())
}

/// A worker whose agent has the `cron` tool (and not `message`); every sender is a user.
pub fn worker_setup(kind: BusKind, clock: &ManualClock, cron: &CronSettings) -> Setup {
    let users = UsersConfig { default_level: Level::User, ..UsersConfig::default() };
    let access = AccessPolicy::from_config(&users, &Default::default(), &Default::default()).unwrap();
    let settings = WorkerSettings { access, ..WorkerSettings::default() };
    let cron = Some((cron.clone(), clock.clock()));
    Setup { settings, message_tool: false, cron, ..Setup::new(kind) }
}

/// A person's message in a chat, optionally in a topic or thread.
pub fn person(channel: &str, chat: &str, thread: Option<&str>, is_group: bool, content: &str) -> InboundMessage {
    let sender = Sender { id: "u1".into(), name: "Ada".into(), is_bot: false };
    let mut msg = InboundMessage::user(channel, chat, sender, content);
    msg.thread_id = thread.map(str::to_owned);
    msg.is_group = is_group;
    msg
}

/// The text of every message of the model's `n`th request (0-based), joined.
pub fn request_text(llm: &FakeLlm, n: usize) -> String {
    let requests = llm.requests();
    let request = requests.get(n).unwrap_or_else(|| panic!("only {} model requests", requests.len()));
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The tool results of the model's `n`th request that belong to its current turn (after the
/// last user message).
pub fn turn_tool_results(llm: &FakeLlm, n: usize) -> Vec<String> {
    let requests = llm.requests();
    let messages = requests[n]["messages"].as_array().unwrap().clone();
    let last_user = messages.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
    messages[last_user..]
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// A job added straight to the store, as `switchboard cron add` does.
pub async fn add_job(
    store: &Arc<dyn Database>,
    payload: Payload,
    schedule: Schedule,
    missed: MissedPolicy,
    now: DateTime<Utc>,
) -> CronJob {
    insert_job(store, &NewCronJob { payload, missed, ..new_job("daily", "UTC", schedule, now) }).await
}

/// `job` added straight to the store.
pub async fn insert_job(store: &Arc<dyn Database>, job: &NewCronJob) -> CronJob {
    match store.add_cron_job(job, AddLimits { max_per_session: 100, max_per_run: None }).await.unwrap() {
        AddOutcome::Added(job) => *job,
        other => panic!("{other:?}"),
    }
}

/// A job `name` made from the shell, its times shown in `tz`, a turn whose results go to the
/// Telegram chat 42.
pub fn new_job(name: &str, tz: &str, schedule: Schedule, now: DateTime<Utc>) -> NewCronJob {
    let chat = ChatAddress { channel: "telegram".into(), chat_id: "42".into(), thread_id: None, is_group: false };
    NewCronJob {
        name: name.into(),
        agent: "main".into(),
        owner_session: chat.session_key(),
        chat,
        payload: Payload::Turn,
        message: "good morning".into(),
        next_run_at: schedule.next_after(now),
        schedule,
        tz: tz.into(),
        missed: MissedPolicy::Skip,
        created_by_id: "cli".into(),
        created_by_name: "test".into(),
        created_at: now,
        generation: 0,
        parent_job: None,
        created_by_run: None,
        on_behalf_of: None,
    }
}
