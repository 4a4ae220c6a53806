//! Heartbeats: every N minutes, per agent, a system message that asks the agent to work
//! through `HEARTBEAT.md`, sent to a configured chat or the owner's most recent direct chat.
//!
//! A slot is skipped (and used up) when the file lists no active tasks, outside the active
//! hours, or when there is no target; it is retried a minute later while the target
//! session is running a turn. Each slot acts exactly once across several schedulers on one
//! store: the scheduler whose compare-and-set moves the agent's `next_at` on is the one that
//! acts, and the message id `heartbeat:<agent>:<slot unix secs>` makes a repeated publish
//! harmless.

pub mod ack;
mod settings;
pub mod tasks;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use switchboard_channels::contract::{ChatAddress, InboundMessage, Origin, SessionKey};
use switchboard_channels::{Bus, BusError, BusExt};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

pub use self::ack::HeartbeatAck;
pub use self::settings::{BadHeartbeat, HeartbeatSettings};
use crate::clock::{Clock, to_store_precision};
use crate::config::HeartbeatTarget;
use crate::store::StoreError;
use crate::store::heartbeat::{HeartbeatStore, SlotClaim};

/// `origin.kind` of heartbeat messages.
pub const HEARTBEAT_ORIGIN: &str = "heartbeat";

/// How long a heartbeat waits when its target session is busy, instead of a full interval.
pub const BUSY_RETRY: Duration = Duration::from_secs(60);

/// How often [`Heartbeats::run`] looks at the clock; the clock decides what is due.
const TICK_EVERY: Duration = Duration::from_secs(5);

/// The file a heartbeat works through, in the agent's workspace.
const HEARTBEAT_FILE: &str = "HEARTBEAT.md";

#[derive(Debug, Error)]
pub enum HeartbeatError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot publish agent {agent}'s heartbeat: {source}")]
    Publish { agent: String, source: BusError },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("agent {agent}: heartbeat interval is out of range")]
    Interval { agent: String },
}

/// One agent's heartbeat.
#[derive(Debug, Clone)]
pub struct HeartbeatAgent {
    pub name: String,
    /// Where its `HEARTBEAT.md` is.
    pub workspace: PathBuf,
    pub settings: HeartbeatSettings,
}

/// Why a slot passed without a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// `HEARTBEAT.md` is missing or lists nothing to do.
    NoTasks,
    OutsideActiveHours,
    /// A run of the target session is running; tried again after [`BUSY_RETRY`].
    Busy,
    /// `target = "owner"` and no owner has written to the agent in a direct chat yet.
    NoTarget,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::NoTasks => "no active tasks",
            SkipReason::OutsideActiveHours => "outside active hours",
            SkipReason::Busy => "target session busy",
            SkipReason::NoTarget => "no target",
        }
    }
}

/// What one tick did for one agent.
#[derive(Debug, Clone, PartialEq)]
pub enum HeartbeatOutcome {
    /// The agent's next slot is later.
    NotDue {
        agent: String,
        next_at: DateTime<Utc>,
    },
    Skipped {
        agent: String,
        reason: SkipReason,
    },
    /// The heartbeat message `id` was published to `chat`.
    Fired {
        agent: String,
        id: String,
        chat: ChatAddress,
    },
    /// Another scheduler claimed the slot first.
    ClaimedElsewhere {
        agent: String,
    },
}

/// The heartbeat scheduler for a set of agents.
pub struct Heartbeats {
    store: Arc<dyn HeartbeatStore>,
    bus: Arc<dyn Bus>,
    clock: Clock,
    agents: Vec<HeartbeatAgent>,
    /// Runs of the target session started longer ago than this do not make it busy.
    abandoned_after: Duration,
}

impl Heartbeats {
    pub fn new(store: Arc<dyn HeartbeatStore>, bus: Arc<dyn Bus>, clock: Clock, agents: Vec<HeartbeatAgent>) -> Self {
        let abandoned_after = crate::config::WorkerConfig::default().max_message_age();
        Self { store, bus, clock, agents, abandoned_after }
    }

    /// A run still `running` after `max_message_age` (the worker's `max_message_age_secs`) is
    /// one whose worker crashed: its message, redelivered, would be dropped as too old, so
    /// the run never ends and must not keep the session busy forever. The heartbeat interval
    /// would be the wrong bound: a real turn may well run longer than 5 minutes.
    pub fn with_max_message_age(mut self, max_message_age: Duration) -> Self {
        self.abandoned_after = max_message_age;
        self
    }

    /// Handles every agent's slot that is due now. One agent's failure (an unreadable
    /// `HEARTBEAT.md`, a failed publish) does not hold up the others: every agent is handled,
    /// then the first error is returned.
    pub async fn tick(&self) -> Result<Vec<HeartbeatOutcome>, HeartbeatError> {
        let now = to_store_precision((self.clock)());
        let mut outcomes = Vec::with_capacity(self.agents.len());
        let mut first_error = None;
        for agent in &self.agents {
            match self.tick_agent(agent, now).await {
                Ok(outcome) => {
                    log_outcome(&outcome);
                    outcomes.push(outcome);
                }
                Err(err) => {
                    tracing::warn!(agent = %agent.name, %err, "heartbeat failed; trying again at the next tick");
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(outcomes),
        }
    }

    /// Ticks until `shutdown` is cancelled. A failed tick is logged and tried again next time.
    pub async fn run(self, shutdown: CancellationToken) {
        let names: Vec<&str> = self.agents.iter().map(|agent| agent.name.as_str()).collect();
        tracing::info!(agents = ?names, "heartbeats started");
        loop {
            // `tick` logs what it did and what failed.
            let _ = self.tick().await;
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(TICK_EVERY) => {}
            }
        }
        tracing::info!("heartbeats stopped");
    }

    async fn tick_agent(&self, agent: &HeartbeatAgent, now: DateTime<Utc>) -> Result<HeartbeatOutcome, HeartbeatError> {
        let every = chrono::Duration::from_std(agent.settings.every)
            .map_err(|_| HeartbeatError::Interval { agent: agent.name.clone() })?;
        // The first heartbeat comes one interval after the first scheduler started.
        let mut slot = self.store.heartbeat_state(&agent.name, now + every).await?.next_at;
        if slot > now + every {
            slot = self.bring_forward(agent, slot, now + every).await?;
        }
        if now < slot {
            return Ok(HeartbeatOutcome::NotDue { agent: agent.name.clone(), next_at: slot });
        }
        let next = next_slot(slot, now, every);
        let skip = |reason: SkipReason| HeartbeatOutcome::Skipped { agent: agent.name.clone(), reason };
        if !self.has_tasks(agent).await? {
            return self.use_slot(agent, slot, next, now, skip(SkipReason::NoTasks)).await;
        }
        if !agent.settings.is_active_at(now) {
            return self.use_slot(agent, slot, next, now, skip(SkipReason::OutsideActiveHours)).await;
        }
        let Some(chat) = self.target_chat(agent).await? else {
            return self.use_slot(agent, slot, next, now, skip(SkipReason::NoTarget)).await;
        };
        if self.is_busy(&SessionKey::of_chat(&agent.name, &chat), now).await? {
            let retry = now + chrono::Duration::from_std(BUSY_RETRY).unwrap_or(every);
            return self.use_slot(agent, slot, retry, now, skip(SkipReason::Busy)).await;
        }
        let id = format!("heartbeat:{}:{}", agent.name, slot.timestamp());
        let fired = HeartbeatOutcome::Fired { agent: agent.name.clone(), id: id.clone(), chat: chat.clone() };
        let outcome = self.use_slot(agent, slot, next, now, fired).await?;
        if !matches!(outcome, HeartbeatOutcome::Fired { .. }) {
            return Ok(outcome);
        }
        let mut msg = InboundMessage::system(
            id,
            chat,
            Origin { kind: HEARTBEAT_ORIGIN.into(), id: agent.name.clone() },
            &agent.settings.prompt,
        );
        msg.set_system_agent(&agent.name);
        msg.received_at = now;
        if let Err(source) = self.bus.publish_inbound(&msg).await {
            // Give the slot back so the next tick tries again; the id makes a second publish
            // of a message that did get through harmless.
            let undo = SlotClaim { agent: &agent.name, slot: next, next: slot, now, outcome: "publish failed" };
            self.store.claim_heartbeat_slot(&undo).await?;
            return Err(HeartbeatError::Publish { agent: agent.name.clone(), source });
        }
        Ok(outcome)
    }

    /// Claims the slot and records `outcome`; [`HeartbeatOutcome::ClaimedElsewhere`] when
    /// another scheduler was first.
    async fn use_slot(
        &self,
        agent: &HeartbeatAgent,
        slot: DateTime<Utc>,
        next: DateTime<Utc>,
        now: DateTime<Utc>,
        outcome: HeartbeatOutcome,
    ) -> Result<HeartbeatOutcome, HeartbeatError> {
        let text = match &outcome {
            HeartbeatOutcome::Skipped { reason, .. } => format!("skipped: {}", reason.as_str()),
            _ => "fired".to_owned(),
        };
        let claim = SlotClaim { agent: &agent.name, slot, next, now, outcome: &text };
        if self.store.claim_heartbeat_slot(&claim).await? {
            Ok(outcome)
        } else {
            Ok(HeartbeatOutcome::ClaimedElsewhere { agent: agent.name.clone() })
        }
    }

    /// A slot further away than one interval was set under a longer `every_minutes` (say a
    /// day, now 30 minutes): it moves to `to`, one new interval from now, instead of keeping
    /// the next heartbeat a day away. Returns the slot now stored (another scheduler may
    /// have moved it first).
    async fn bring_forward(
        &self,
        agent: &HeartbeatAgent,
        slot: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, HeartbeatError> {
        if self.store.move_heartbeat_slot(&agent.name, slot, to).await? {
            tracing::info!(agent = %agent.name, from = %slot, %to, "heartbeat interval shortened; next slot brought forward");
            return Ok(to);
        }
        Ok(self.store.heartbeat_state(&agent.name, to).await?.next_at)
    }

    /// Whether the session runs a turn now; see [`Heartbeats::with_max_message_age`].
    async fn is_busy(&self, session_key: &SessionKey, now: DateTime<Utc>) -> Result<bool, HeartbeatError> {
        let age = chrono::Duration::from_std(self.abandoned_after).unwrap_or(chrono::Duration::MAX);
        let started_after = now.checked_sub_signed(age).unwrap_or(DateTime::<Utc>::MIN_UTC);
        Ok(self.store.session_has_running_run(session_key, started_after).await?)
    }

    async fn has_tasks(&self, agent: &HeartbeatAgent) -> Result<bool, HeartbeatError> {
        let path = agent.workspace.join(HEARTBEAT_FILE);
        match tokio::fs::read_to_string(&path).await {
            Ok(text) => Ok(tasks::has_active_tasks(&text)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(HeartbeatError::Read { path, source }),
        }
    }

    /// The configured chat, or the owner's most recent direct chat with this agent.
    async fn target_chat(&self, agent: &HeartbeatAgent) -> Result<Option<ChatAddress>, HeartbeatError> {
        match &agent.settings.target {
            HeartbeatTarget::Chat(chat) => Ok(Some(chat.clone())),
            HeartbeatTarget::Owner => {
                let owner = self.store.latest_owner_chat(&agent.name).await?;
                // Only direct chats are recorded; the check keeps a group out even so.
                Ok(owner.map(|owner| owner.chat).filter(|chat| !chat.is_group))
            }
        }
    }
}

/// The first slot after `now` on the grid of `slot` + k × `every`: slots missed while no
/// scheduler ran are not made up.
fn next_slot(slot: DateTime<Utc>, now: DateTime<Utc>, every: chrono::Duration) -> DateTime<Utc> {
    let every_ms = every.num_milliseconds().max(1);
    let behind = (now - slot).num_milliseconds().max(0);
    slot + chrono::Duration::milliseconds((behind / every_ms + 1) * every_ms)
}

fn log_outcome(outcome: &HeartbeatOutcome) {
    match outcome {
        HeartbeatOutcome::NotDue { .. } => {}
        HeartbeatOutcome::Skipped { agent, reason } => {
            tracing::info!(%agent, reason = reason.as_str(), "heartbeat skipped")
        }
        HeartbeatOutcome::Fired { agent, id, chat } => {
            tracing::info!(%agent, %id, session = %chat.session_key(), "heartbeat sent");
        }
        HeartbeatOutcome::ClaimedElsewhere { agent } => {
            tracing::debug!(%agent, "heartbeat slot taken by another scheduler");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn missed_slots_are_not_made_up() {
        let every = chrono::Duration::minutes(30);
        let slot = utc("2026-01-15T10:00:00Z");
        assert_eq!(next_slot(slot, slot, every), utc("2026-01-15T10:30:00Z"));
        assert_eq!(next_slot(slot, utc("2026-01-15T10:29:00Z"), every), utc("2026-01-15T10:30:00Z"));
        assert_eq!(next_slot(slot, utc("2026-01-15T12:45:00Z"), every), utc("2026-01-15T13:00:00Z"));
    }
}
